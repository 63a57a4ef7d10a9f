"""Writing byte-reproducible ``.tar.zst`` archives (see :mod:`world_format.archive`)."""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

import zstandard

from world_format.canonical import atomic_writer
from world_format.errors import ArchiveError

from .rules import DEFAULT_BUDGET, O_BINARY, O_CLOEXEC, O_NOFOLLOW, ArchiveBudget, Rejected, check_name, one_line

ZSTD_LEVEL = 10
"""The fixed zstd level of :func:`write_tar_zst` (changing it changes every archive's bytes)."""

MULTI_WORKER_BYTES = 64 << 20
"""A tar stream of at least this many bytes (a kit with a large seed) is compressed in zstd's multi-worker mode: one
frame still, made of jobs compressed in parallel. Its bytes are the same for every number of workers (one on a
one-core machine, :func:`compression_workers`), so an archive stays byte-reproducible on any machine; they are not the
single-threaded mode's bytes, which every smaller archive keeps (changing this threshold changes the bytes of the
archives between the two values). On two cores it halves the wall time of compressing a 371 MB seed."""

MAX_WORKERS = 4
"""At most this many zstd workers (each holds its own match tables and job buffers: tens of MB at this level)."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


def compression_workers() -> int:
    """The zstd workers for an archive of at least :data:`MULTI_WORKER_BYTES`: :func:`available_cpus`, at most
    :data:`MAX_WORKERS`. The archive's bytes do not depend on it."""
    return min(MAX_WORKERS, available_cpus())


def zstd_threads(tar_bytes: int) -> int:
    """zstandard's ``threads`` for a tar stream of ``tar_bytes``: 0 (single-threaded) below
    :data:`MULTI_WORKER_BYTES`, else :func:`compression_workers` (multi-worker mode, whatever the count)."""
    return 0 if tar_bytes < MULTI_WORKER_BYTES else compression_workers()


class _Hashing:
    """A binary file that hashes what is written through it (the archive's sha256 without reading it back)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()


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


def _tar_size(root_name: str, entries: list[tuple[str, bool, int]]) -> int:
    """The size of the tar :func:`_write_tar` writes: each member's header and its data padded to whole blocks,
    two zero blocks, then zeros up to a whole record (as :meth:`tarfile.TarFile.close` pads)."""
    members = [(root_name, True, 0)] + [(f"{root_name}/{rel}", is_dir, size) for rel, is_dir, size in entries]
    total = sum(len(_member_info(name, is_dir, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "strict"))
                + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE for name, is_dir, size in members)
    total += 2 * tarfile.BLOCKSIZE
    return -(-total // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


CHUNK_BYTES = 1 << 20
"""How much of the tar goes to the compressor per write: tarfile's own 10 KiB records cost about 10 % more zstd time
on a 371 MB kit than 1 MiB pieces, which give the same bytes (zstd's stream does not depend on how it is fed)."""


def _write_tar(source_dir: Path, root_name: str, entries: list[tuple[str, bool, int]], out: BinaryIO) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict",
                      bufsize=CHUNK_BYTES) as tar:
        tar.copybufsize = CHUNK_BYTES  # type: ignore[attr-defined]  # in tarfile since 3.8; typeshed lacks it
        tar.addfile(_member_info(root_name, True, 0))
        for rel, is_dir, size in entries:
            name = f"{root_name}/{rel}"
            if is_dir:
                tar.addfile(_member_info(name, True, 0))
                continue
            fd = os.open(source_dir / rel, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_BINARY)
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
    before_replace: Callable[[], None] | None = None,
) -> tuple[str, int]:
    """Write every file and directory under ``source_dir`` to a reproducible ``archive_path``.

    Members live under ``root_name/``. Symlinks and special files are refused, as is anything
    ``budget`` would make :func:`extract_tar_zst` refuse, so that what is written can be read
    back. The tar is streamed into the compressor as it is made (no temporary tar file). The
    archive is replaced atomically, after ``before_replace()`` (which may raise to keep the old
    one). Returns ``(sha256 hex, size in bytes)`` of it.
    """
    source_dir = Path(source_dir)
    archive_path = Path(archive_path)
    if not isinstance(root_name, str) or "/" in root_name:
        raise ArchiveError(f"archive root name must be a single path component, got {root_name!r}")
    try:
        check_name(root_name, budget)
    except Rejected as exc:
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
        raise ArchiveError(f"cannot read {source_dir}: {one_line(str(exc))}") from exc

    if len(entries) + 1 > budget.max_members:
        raise ArchiveError(f"{source_dir} has {len(entries) + 1} members, over the {budget.max_members} limit")
    total = 0
    for rel, _is_dir, size in entries:
        try:
            check_name(f"{root_name}/{rel}", budget)
        except Rejected as exc:
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

    tar_bytes = _tar_size(root_name, entries)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=True,
                                          threads=zstd_threads(tar_bytes))
    try:
        archive_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(archive_path) as out:
            hashing = _Hashing(out)
            sink = cast(BinaryIO, hashing)
            with compressor.stream_writer(sink, size=tar_bytes, closefd=False) as writer:
                _write_tar(source_dir, root_name, entries, cast(BinaryIO, writer))
            if before_replace is not None:
                before_replace()
        digest, size = hashing.digest.hexdigest(), archive_path.stat().st_size
        if size != hashing.size:
            raise ArchiveError(f"archive {archive_path} changed while it was being written")
    except OSError as exc:
        raise ArchiveError(f"cannot write archive {archive_path}: {one_line(str(exc))}") from exc
    return digest, size
