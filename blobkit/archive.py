"""Byte-reproducible ``.tar.zst`` archives, and a hardened extractor for untrusted ones.

Writing (:func:`write_tar_zst`)
    Every directory and regular file under a source folder is stored below one top-level
    directory, in sorted order of relative POSIX path, with fixed metadata (mtime 0, uid/gid 0,
    empty user and group names, mode 0o644 for files and 0o755 for directories) in the PAX
    format. PAX extended headers appear only where ustar cannot hold a name (long or non-ASCII
    names) and never carry times. The tar stream is compressed as a single zstd frame at a
    fixed level, single-threaded, with the content size and a content checksum in the frame,
    and written atomically. Identical trees therefore give byte-identical archives whatever
    the creation order, timestamps or permissions of their files.

Reading (:func:`extract_tar_zst`, :func:`open_archive`)
    The archive is treated as hostile. It is decompressed as a stream with a bounded window and
    a cap on the decompressed byte count, and read with :mod:`tarfile` in streaming mode (``r|``)
    using a strict header class, so a corrupt header or a missing end-of-archive marker is an
    error rather than a silent early end. Only regular files and directories with canonical
    relative names under a single top-level directory are accepted; member count, per-member
    size and total size are budgeted (:class:`ArchiveBudget`). Files are written by this module
    (``O_CREAT | O_EXCL | O_NOFOLLOW``) into a fresh private temporary folder; ``tarfile``'s own
    extraction is never used. Every failure removes that folder and raises :class:`ArchiveError`
    with a one-line message naming the archive. The zstd frame must end exactly at the end of
    the file and its checksum must verify.

The caller owns the extracted tree: remove it with :func:`extracted_root_cleanup` (which
deletes the temporary folder, i.e. the returned root's parent), or use :func:`open_archive`.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import zstandard

from blobkit.canonical import atomic_writer, file_sha256
from blobkit.errors import ArchiveError

__all__ = [
    "DEFAULT_BUDGET",
    "ZSTD_LEVEL",
    "ArchiveBudget",
    "extract_tar_zst",
    "extracted_root_cleanup",
    "open_archive",
    "write_tar_zst",
]

ZSTD_LEVEL = 10
"""The fixed zstd level of :func:`write_tar_zst` (changing it changes every archive's bytes)."""

_MiB = 1 << 20
_GiB = 1 << 30

_EXTRACT_PREFIX = ".blobkit-extract-"
_COPY_CHUNK = 1 << 20
# Compressed bytes fed to the decompressor per call. zstd can expand ~4 input bytes into a
# 128 KiB block, so this bounds what one call can produce (~16 MiB) before the
# decompressed-size cap is checked.
_FEED_BYTES = 512
_READ_BYTES = 64 * 1024
# Decompressed bytes allowed beyond the file data: tar headers, pax records, padding, trailer.
_OVERHEAD_FIXED = _MiB
_OVERHEAD_PER_MEMBER = 8 * 1024
# Largest pax / GNU long-name header tarfile may read into memory.
_MAX_META_BYTES = 64 * 1024
_META_TYPES = frozenset(
    {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}
)
_TYPE_NAMES = {
    tarfile.SYMTYPE: "a symlink",
    tarfile.LNKTYPE: "a hardlink",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a fifo",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a GNU sparse file",
}
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FRAME_HEADER_MAX = 18
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)


@dataclass(frozen=True)
class ArchiveBudget:
    """Limits for reading (and writing) an archive. All sizes are in bytes."""

    max_members: int = 10_000
    max_member_bytes: int = 512 * _MiB
    max_total_bytes: int = 2 * _GiB
    max_window_bytes: int = 1 << 27
    max_name_length: int = 255

    def __post_init__(self) -> None:
        for field_name in ("max_members", "max_member_bytes", "max_total_bytes", "max_window_bytes", "max_name_length"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArchiveError(f"ArchiveBudget.{field_name} must be a positive integer, got {value!r}")

    @property
    def max_decompressed_bytes(self) -> int:
        """The cap on the whole decompressed tar stream: file data plus a header allowance."""
        return self.max_total_bytes + _OVERHEAD_FIXED + self.max_members * _OVERHEAD_PER_MEMBER


DEFAULT_BUDGET = ArchiveBudget()


class _Rejected(ArchiveError):
    """Internal: a reason to refuse the archive; the public error adds the archive's name."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _label(name: str) -> str:
    shown = repr(name)
    return shown if len(shown) <= 120 else shown[:117] + "..."


def _check_name(name: str, budget: ArchiveBudget) -> tuple[str, ...]:
    """Validate a canonical relative POSIX member name; return its components."""
    label = _label(name)
    if not name:
        raise _Rejected("a member has an empty name")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise _Rejected(f"member {label}: name is not valid UTF-8") from None
    if len(encoded) > budget.max_name_length:
        raise _Rejected(f"member {label}: name is {len(encoded)} bytes, over the {budget.max_name_length}-byte limit")
    if "\x00" in name:
        raise _Rejected(f"member {label}: name contains a NUL byte")
    if "\\" in name:
        raise _Rejected(f"member {label}: name contains a backslash")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise _Rejected(f"member {label}: name contains a control character")
    if name.startswith("/"):
        raise _Rejected(f"member {label}: absolute path")
    parts = tuple(name.split("/"))
    for part in parts:
        if part == "":
            raise _Rejected(f"member {label}: empty path component")
        if part in (".", ".."):
            raise _Rejected(f"member {label}: '{part}' path component")
    return parts


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _scan_source(source_dir: Path) -> list[tuple[str, bool, int]]:
    """Every entry under ``source_dir`` as (relative POSIX path, is_dir, size), sorted by path."""
    found: list[tuple[str, bool, int]] = []
    pending: list[tuple[Path, str]] = [(source_dir, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise ArchiveError(f"refusing to archive {rel!r} in {source_dir}: it is a symlink")
                if stat.S_ISDIR(st.st_mode):
                    found.append((rel, True, 0))
                    pending.append((Path(entry.path), rel + "/"))
                elif stat.S_ISREG(st.st_mode):
                    found.append((rel, False, st.st_size))
                else:
                    raise ArchiveError(f"refusing to archive {rel!r} in {source_dir}: not a regular file or directory")
    found.sort(key=lambda item: item[0])
    return found


def _member_info(name: str, is_dir: bool, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.size = 0 if is_dir else size
    info.mode = 0o755 if is_dir else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.linkname = ""
    info.devmajor = info.devminor = 0
    info.pax_headers = {}
    return info


def _write_tar(source_dir: Path, root_name: str, entries: list[tuple[str, bool, int]], out: BinaryIO) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict") as tar:
        tar.addfile(_member_info(root_name, True, 0))
        for rel, is_dir, size in entries:
            name = f"{root_name}/{rel}"
            if is_dir:
                tar.addfile(_member_info(name, True, 0))
                continue
            fd = os.open(source_dir / rel, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY)
            with os.fdopen(fd, "rb") as handle:
                st = os.fstat(handle.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                    raise ArchiveError(f"{rel!r} in {source_dir} changed while it was being archived")
                tar.addfile(_member_info(name, False, size), handle)
                if os.fstat(handle.fileno()).st_size != size:
                    raise ArchiveError(f"{rel!r} in {source_dir} changed while it was being archived")


def write_tar_zst(
    source_dir: Path,
    archive_path: Path,
    root_name: str,
    *,
    budget: ArchiveBudget = DEFAULT_BUDGET,
) -> tuple[str, int]:
    """Write every file and directory under ``source_dir`` to a reproducible ``archive_path``.

    Members live under ``root_name/``. Symlinks and special files are refused, as is anything
    ``budget`` would make :func:`extract_tar_zst` refuse, so that what is written can be read
    back. The archive is replaced atomically. Returns ``(sha256 hex, size in bytes)`` of it.
    """
    source_dir = Path(source_dir)
    archive_path = Path(archive_path)
    if not isinstance(root_name, str) or "/" in root_name:
        raise ArchiveError(f"archive root name must be a single path component, got {root_name!r}")
    try:
        _check_name(root_name, budget)
    except _Rejected as exc:
        raise ArchiveError(f"invalid archive root name {root_name!r}: {exc}") from None
    try:
        st = os.lstat(source_dir)
        if not stat.S_ISDIR(st.st_mode):
            raise ArchiveError(f"cannot archive {source_dir}: not a directory (symlinks are refused)")
        archive_parent = archive_path.parent.resolve()
        source_real = source_dir.resolve()
        if archive_parent == source_real or source_real in archive_parent.parents:
            raise ArchiveError(f"archive {archive_path} must not be written inside its source {source_dir}")
        entries = _scan_source(source_dir)
    except OSError as exc:
        raise ArchiveError(f"cannot read {source_dir}: {_one_line(str(exc))}") from exc

    if len(entries) + 1 > budget.max_members:
        raise ArchiveError(f"{source_dir} has {len(entries) + 1} members, over the {budget.max_members} limit")
    total = 0
    for rel, _is_dir, size in entries:
        try:
            _check_name(f"{root_name}/{rel}", budget)
        except _Rejected as exc:
            raise ArchiveError(f"cannot archive {source_dir}: {exc}") from None
        if size > budget.max_member_bytes:
            raise ArchiveError(
                f"cannot archive {source_dir}: {rel!r} is {size} bytes, over the "
                f"{budget.max_member_bytes}-byte member limit"
            )
        total += size
    if total > budget.max_total_bytes:
        raise ArchiveError(
            f"cannot archive {source_dir}: {total} bytes of files, over the {budget.max_total_bytes}-byte limit"
        )

    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=True, threads=0)
    try:
        archive_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=archive_path.parent) as raw:
            _write_tar(source_dir, root_name, entries, raw)
            tar_size = raw.tell()
            raw.seek(0)
            with atomic_writer(archive_path) as out:
                compressor.copy_stream(raw, out, size=tar_size)
        digest, size = file_sha256(archive_path), archive_path.stat().st_size
    except OSError as exc:
        raise ArchiveError(f"cannot write archive {archive_path}: {_one_line(str(exc))}") from exc
    return digest, size


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


class _BoundedZstdReader(io.RawIOBase):
    """Decompress exactly one checksummed zstd frame, capping window and output size.

    Raises :class:`_Rejected` when the output passes ``limit`` bytes, when the input ends before
    the frame does, or when anything follows the frame.
    """

    def __init__(self, source: BinaryIO, budget: ArchiveBudget) -> None:
        super().__init__()
        self._source = source
        self._limit = budget.max_decompressed_bytes
        self._window = budget.max_window_bytes
        self._dobj = zstandard.ZstdDecompressor(max_window_size=budget.max_window_bytes).decompressobj()
        self._pending = memoryview(b"")
        self._out = bytearray()
        self._total = 0
        self._started = False
        self.finished = False

    def readable(self) -> bool:
        return True

    def _check_frame_header(self) -> None:
        head = self._source.read(_FRAME_HEADER_MAX)
        if head[:4] != _ZSTD_MAGIC:
            raise _Rejected("not a zstd archive (bad magic number)")
        params = zstandard.get_frame_parameters(head)
        if params.window_size > self._window:
            raise _Rejected(f"zstd window of {params.window_size} bytes exceeds the {self._window}-byte limit")
        if params.dict_id:
            raise _Rejected("zstd frame needs a dictionary")
        if not params.has_checksum:
            raise _Rejected("zstd frame has no content checksum")
        if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size > self._limit:
            raise _Rejected(f"declares {params.content_size} decompressed bytes, over the {self._limit}-byte limit")
        self._pending = memoryview(head)

    def _step(self) -> None:
        if not self._started:
            self._started = True
            self._check_frame_header()
        if not self._pending:
            self._pending = memoryview(self._source.read(_READ_BYTES))
            if not self._pending:
                raise _Rejected("truncated: the zstd frame ends before it is complete")
        chunk, self._pending = self._pending[:_FEED_BYTES], self._pending[_FEED_BYTES:]
        produced = self._dobj.decompress(chunk)
        self._total += len(produced)
        if self._total > self._limit:
            raise _Rejected(f"decompresses to more than {self._limit} bytes")
        self._out += produced
        if self._dobj.eof:
            self.finished = True
            if self._dobj.unused_data or self._pending or self._source.read(1):
                raise _Rejected("unexpected data after the zstd frame")

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            while not self.finished:
                self._step()
            size = len(self._out)
        while len(self._out) < size and not self.finished:
            self._step()
        data = bytes(self._out[:size])
        del self._out[:size]
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _TarStructureError(Exception):
    """Raised from inside tarfile for a bad header; deliberately not a ``tarfile.HeaderError``,
    which ``TarFile.next`` would swallow and treat as the end of the archive."""


class _StrictTarInfo(tarfile.TarInfo):
    """A TarInfo whose header parsing refuses what tarfile would silently take as an archive end."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _StrictTarInfo:
        if len(buf) == 0:
            raise _TarStructureError("truncated: the tar stream has no end-of-archive marker")
        if len(buf) != tarfile.BLOCKSIZE:
            raise _TarStructureError("truncated: the tar stream ends inside a header")
        if buf.count(tarfile.NUL) == tarfile.BLOCKSIZE:
            return super().frombuf(buf, encoding, errors)  # raises EOFHeaderError: the end marker
        try:
            obj = super().frombuf(buf, encoding, errors)
        except tarfile.HeaderError as exc:
            raise _TarStructureError(f"corrupt tar header ({exc})") from None
        if obj.type in _META_TYPES and obj.size > _MAX_META_BYTES:
            raise _TarStructureError(f"tar extended header of {obj.size} bytes is too large")
        return obj


@dataclass
class _ExtractState:
    root: Path
    top: str | None = None
    members: int = 0
    total_bytes: int = 0
    # relative name -> "file", "dir" (a member) or "implicit" (created as a parent)
    kinds: dict[str, str] = field(default_factory=dict)


def _member_kind(member: tarfile.TarInfo, label: str) -> str:
    if member.type == tarfile.DIRTYPE:
        kind = "dir"
    elif member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        kind = "file"
    else:
        what = _TYPE_NAMES.get(member.type, f"of unsupported type {member.type!r}")
        raise _Rejected(f"member {label} is {what}; only regular files and directories are allowed")
    if member.sparse is not None or any(key.startswith("GNU.sparse") for key in member.pax_headers):
        raise _Rejected(f"member {label} is a sparse file")
    if member.linkname:
        raise _Rejected(f"member {label} has a link target")
    if member.size < 0:
        raise _Rejected(f"member {label} has a negative size")
    if kind == "dir" and member.size != 0:
        raise _Rejected(f"directory member {label} has a nonzero size")
    return kind


def _make_parents(parts: tuple[str, ...], state: _ExtractState, label: str) -> None:
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        existing = state.kinds.get(prefix)
        if existing == "file":
            raise _Rejected(f"member {label}: parent {_label(prefix)} is a file")
        if existing is None:
            os.mkdir(state.root.joinpath(*parts[:depth]), 0o755)
            state.kinds[prefix] = "implicit"


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, state: _ExtractState, budget: ArchiveBudget) -> None:
    name = member.name
    label = _label(name)
    state.members += 1
    if state.members > budget.max_members:
        raise _Rejected(f"more than {budget.max_members} members")
    parts = _check_name(name, budget)
    kind = _member_kind(member, label)
    if state.top is None:
        state.top = parts[0]
    elif parts[0] != state.top:
        raise _Rejected(f"member {label} is outside the single top-level directory {_label(state.top)}")
    if len(parts) == 1 and kind != "dir":
        raise _Rejected(f"member {label}: the top level must be a directory")
    existing = state.kinds.get(name)
    if existing in ("file", "dir"):
        raise _Rejected(f"duplicate member {label}")
    if existing == "implicit" and kind == "file":
        raise _Rejected(f"member {label} is a file but earlier members use it as a directory")
    _make_parents(parts, state, label)
    target = state.root.joinpath(*parts)
    if kind == "dir":
        if existing is None:
            os.mkdir(target, 0o755)
        state.kinds[name] = "dir"
        return

    if member.size > budget.max_member_bytes:
        raise _Rejected(f"member {label} is {member.size} bytes, over the {budget.max_member_bytes}-byte member limit")
    if state.total_bytes + member.size > budget.max_total_bytes:
        raise _Rejected(f"members total more than {budget.max_total_bytes} bytes")
    source = tar.extractfile(member)
    if source is None:  # pragma: no cover - regular members always have a reader
        raise _Rejected(f"member {label} has no data")
    state.kinds[name] = "file"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
    fd = os.open(target, flags, 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while written < member.size:
            block = source.read(min(_COPY_CHUNK, member.size - written))
            if not block:
                raise _Rejected(f"truncated: member {label} ends after {written} of {member.size} bytes")
            written += len(block)
            state.total_bytes += len(block)
            if written > member.size or written > budget.max_member_bytes:
                raise _Rejected(f"member {label} holds more data than it declares")
            if state.total_bytes > budget.max_total_bytes:
                raise _Rejected(f"members total more than {budget.max_total_bytes} bytes")
            out.write(block)


def _check_trailer(stream: object) -> None:
    """After the first zero block: only NUL padding may follow, up to the end of the frame."""
    read = getattr(stream, "read", None)
    if read is None:  # pragma: no cover - tarfile always has a stream here
        raise _Rejected("cannot read the end of the tar stream")
    while True:
        block = read(_READ_BYTES)
        if not block:
            return
        if block.count(0) != len(block):
            raise _Rejected("unexpected data after the end-of-archive marker")


def _extract_into(archive_path: Path, root: Path, budget: ArchiveBudget) -> Path:
    state = _ExtractState(root=root)
    with open(archive_path, "rb") as handle:
        reader = _BoundedZstdReader(handle, budget)
        with tarfile.open(
            fileobj=reader, mode="r|", tarinfo=_StrictTarInfo, encoding="utf-8", errors="surrogateescape"
        ) as tar:
            while (member := tar.next()) is not None:
                _extract_member(tar, member, state, budget)
            _check_trailer(tar.fileobj)
        if not reader.finished:  # pragma: no cover - draining the trailer ends the frame
            raise _Rejected("truncated: the zstd frame ends before it is complete")
    if state.top is None:
        raise _Rejected("archive has no members")
    return root / state.top


def extract_tar_zst(
    archive_path: Path,
    dest_parent: Path | None = None,
    budget: ArchiveBudget = DEFAULT_BUDGET,
) -> Path:
    """Safely extract an untrusted ``.tar.zst`` into a new temporary folder inside ``dest_parent``.

    Returns the extracted top-level directory. The caller removes it, together with its private
    temporary parent, with :func:`extracted_root_cleanup` (or uses :func:`open_archive`).
    On any failure nothing is left behind and :class:`ArchiveError` is raised.
    """
    archive_path = Path(archive_path)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_EXTRACT_PREFIX, dir=dest_parent))
    except OSError as exc:
        raise ArchiveError(
            f"cannot extract archive {archive_path}: no temporary folder in {dest_parent}: {_one_line(str(exc))}"
        ) from exc
    ok = False
    try:
        root = _extract_into(archive_path, tmp, budget)
        ok = True
        return root
    except _Rejected as exc:
        raise ArchiveError(f"archive {archive_path} rejected: {_one_line(str(exc))}") from None
    except _TarStructureError as exc:
        raise ArchiveError(f"archive {archive_path} rejected: {_one_line(str(exc))}") from None
    except Exception as exc:
        detail = _one_line(f"{type(exc).__name__}: {exc}")
        raise ArchiveError(f"archive {archive_path} is corrupt or unreadable ({detail})") from exc
    finally:
        if not ok:
            shutil.rmtree(tmp, ignore_errors=True)


def extracted_root_cleanup(path: Path) -> None:
    """Remove an extracted root returned by :func:`extract_tar_zst`, with its temporary parent.

    Refuses (``ArchiveError``) a path whose parent is not one of this module's extraction folders.
    """
    parent = Path(path).parent
    if not parent.name.startswith(_EXTRACT_PREFIX):
        raise ArchiveError(f"refusing to remove {parent}: not an extraction folder made by blobkit")
    shutil.rmtree(parent, ignore_errors=True)


@contextmanager
def open_archive(
    archive_path: Path,
    budget: ArchiveBudget = DEFAULT_BUDGET,
    dest_parent: Path | None = None,
) -> Iterator[Path]:
    """Extract ``archive_path`` (see :func:`extract_tar_zst`) and yield the extracted root;
    the temporary folder is removed on exit, also when the block raises."""
    root = extract_tar_zst(archive_path, dest_parent=dest_parent, budget=budget)
    try:
        yield root
    finally:
        extracted_root_cleanup(root)
