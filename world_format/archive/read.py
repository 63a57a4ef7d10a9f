"""Reading untrusted ``.tar.zst`` archives into a private folder (see :mod:`world_format.archive`)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import zstandard

from world_format.errors import ArchiveError

from .rules import (
    DEFAULT_BUDGET,
    O_BINARY,
    O_CLOEXEC,
    O_NOFOLLOW,
    ArchiveBudget,
    Rejected,
    check_name,
    one_line,
    quoted_name,
)

_EXTRACT_PREFIX = ".blobkit-extract-"
_COPY_CHUNK = 1 << 20
# Compressed bytes fed to the decompressor per call. zstd can expand ~4 input bytes into a
# 128 KiB block, so this bounds what one call can produce (~16 MiB) before the
# decompressed-size cap is checked.
_FEED_BYTES = 512
_READ_BYTES = 64 * 1024
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


class _BoundedZstdReader(io.RawIOBase):
    """Decompress exactly one checksummed zstd frame, capping window and output size.

    Raises :class:`Rejected` when the output passes ``limit`` bytes, when the input ends before
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
            raise Rejected("not a zstd archive (bad magic number)")
        params = zstandard.get_frame_parameters(head)
        if params.window_size > self._window:
            raise Rejected(f"zstd window of {params.window_size} bytes exceeds the {self._window}-byte limit")
        if params.dict_id:
            raise Rejected("zstd frame needs a dictionary")
        if not params.has_checksum:
            raise Rejected("zstd frame has no content checksum")
        if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size > self._limit:
            raise Rejected(f"declares {params.content_size} decompressed bytes, over the {self._limit}-byte limit")
        self._pending = memoryview(head)

    def _step(self) -> None:
        if not self._started:
            self._started = True
            self._check_frame_header()
        if not self._pending:
            self._pending = memoryview(self._source.read(_READ_BYTES))
            if not self._pending:
                raise Rejected("truncated: the zstd frame ends before it is complete")
        chunk, self._pending = self._pending[:_FEED_BYTES], self._pending[_FEED_BYTES:]
        produced = self._dobj.decompress(chunk)
        self._total += len(produced)
        if self._total > self._limit:
            raise Rejected(f"decompresses to more than {self._limit} bytes")
        self._out += produced
        if self._dobj.eof:
            self.finished = True
            if self._dobj.unused_data or self._pending or self._source.read(1):
                raise Rejected("unexpected data after the zstd frame")

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
        raise Rejected(f"member {label} is {what}; only regular files and directories are allowed")
    if member.sparse is not None or any(key.startswith("GNU.sparse") for key in member.pax_headers):
        raise Rejected(f"member {label} is a sparse file")
    if member.linkname:
        raise Rejected(f"member {label} has a link target")
    if member.size < 0:
        raise Rejected(f"member {label} has a negative size")
    if kind == "dir" and member.size != 0:
        raise Rejected(f"directory member {label} has a nonzero size")
    return kind


def _make_parents(parts: tuple[str, ...], state: _ExtractState, label: str) -> None:
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        existing = state.kinds.get(prefix)
        if existing == "file":
            raise Rejected(f"member {label}: parent {quoted_name(prefix)} is a file")
        if existing is None:
            os.mkdir(state.root.joinpath(*parts[:depth]), 0o755)
            state.kinds[prefix] = "implicit"


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, state: _ExtractState, budget: ArchiveBudget) -> None:
    name = member.name
    label = quoted_name(name)
    state.members += 1
    if state.members > budget.max_members:
        raise Rejected(f"more than {budget.max_members} members")
    parts = check_name(name, budget)
    kind = _member_kind(member, label)
    if state.top is None:
        state.top = parts[0]
    elif parts[0] != state.top:
        raise Rejected(f"member {label} is outside the single top-level directory {quoted_name(state.top)}")
    if len(parts) == 1 and kind != "dir":
        raise Rejected(f"member {label}: the top level must be a directory")
    existing = state.kinds.get(name)
    if existing in ("file", "dir"):
        raise Rejected(f"duplicate member {label}")
    if existing == "implicit" and kind == "file":
        raise Rejected(f"member {label} is a file but earlier members use it as a directory")
    _make_parents(parts, state, label)
    target = state.root.joinpath(*parts)
    if kind == "dir":
        if existing is None:
            os.mkdir(target, 0o755)
        state.kinds[name] = "dir"
        return

    if member.size > budget.max_member_bytes:
        raise Rejected(f"member {label} is {member.size} bytes, over the {budget.max_member_bytes}-byte member limit")
    if state.total_bytes + member.size > budget.max_total_bytes:
        raise Rejected(f"members total more than {budget.max_total_bytes} bytes")
    source = tar.extractfile(member)
    if source is None:  # pragma: no cover - regular members always have a reader
        raise Rejected(f"member {label} has no data")
    state.kinds[name] = "file"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_BINARY
    fd = os.open(target, flags, 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while written < member.size:
            block = source.read(min(_COPY_CHUNK, member.size - written))
            if not block:
                raise Rejected(f"truncated: member {label} ends after {written} of {member.size} bytes")
            written += len(block)
            state.total_bytes += len(block)
            if written > member.size or written > budget.max_member_bytes:
                raise Rejected(f"member {label} holds more data than it declares")
            if state.total_bytes > budget.max_total_bytes:
                raise Rejected(f"members total more than {budget.max_total_bytes} bytes")
            out.write(block)


def _check_trailer(stream: object) -> None:
    """After the first zero block: only NUL padding may follow, up to the end of the frame."""
    read = getattr(stream, "read", None)
    if read is None:  # pragma: no cover - tarfile always has a stream here
        raise Rejected("cannot read the end of the tar stream")
    while True:
        block = read(_READ_BYTES)
        if not block:
            return
        if block.count(0) != len(block):
            raise Rejected("unexpected data after the end-of-archive marker")


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
            raise Rejected("truncated: the zstd frame ends before it is complete")
    if state.top is None:
        raise Rejected("archive has no members")
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
            f"cannot extract archive {archive_path}: no temporary folder in {dest_parent}: {one_line(str(exc))}"
        ) from exc
    ok = False
    try:
        root = _extract_into(archive_path, tmp, budget)
        ok = True
        return root
    except Rejected as exc:
        raise ArchiveError(f"archive {archive_path} rejected: {one_line(str(exc))}") from None
    except _TarStructureError as exc:
        raise ArchiveError(f"archive {archive_path} rejected: {one_line(str(exc))}") from None
    except Exception as exc:
        detail = one_line(f"{type(exc).__name__}: {exc}")
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
