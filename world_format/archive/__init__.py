"""Byte-reproducible ``.tar.zst`` archives, and a hardened extractor for untrusted ones.

Writing (:func:`write_tar_zst`)
    Every directory and regular file under a source folder is stored below one top-level
    directory, in sorted order of relative POSIX path, with fixed metadata (mtime 0, uid/gid 0,
    empty user and group names, mode 0o644 for files and 0o755 for directories) in the PAX
    format. PAX extended headers appear only where ustar cannot hold a name (long or non-ASCII
    names) and never carry times. The tar stream is compressed as a single zstd frame at a
    fixed level, with the content size and a content checksum in the frame, and written
    atomically: single-threaded below 64 MiB of tar (every kit of a small world), in zstd's
    multi-worker mode from there on (``MULTI_WORKER_BYTES``: jobs compressed in parallel, whose
    bytes are the same for any number of workers, one included). Identical trees therefore give
    byte-identical archives whatever the creation order, timestamps or permissions of their
    files, and whatever the machine's core count.

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

from .read import extract_tar_zst, extracted_root_cleanup, open_archive
from .rules import DEFAULT_BUDGET, ArchiveBudget
from .write import ZSTD_LEVEL, write_tar_zst

__all__ = [
    "DEFAULT_BUDGET",
    "ZSTD_LEVEL",
    "ArchiveBudget",
    "extract_tar_zst",
    "extracted_root_cleanup",
    "open_archive",
    "write_tar_zst",
]
