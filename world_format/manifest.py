"""Manifested directories: a folder of files plus one manifest that pins each by sha256 and size.

World packages (``manifest.json``), kits (``kit.json``) and model exports (``manifest.json``) are all
manifested directories, written and checked here and nowhere else:

* :func:`write_manifested_dir` stages every file in a fresh folder beside the target, writes the
  manifest *last* (its presence means the artifact is complete), lets the caller add derived files
  from the finished folder (the kit archive) while the staged files are flushed to disk on a thread,
  then swaps the folder in atomically once they are;
* :func:`verify_manifested_dir` refuses links, special files, unlisted files and missing files, and
  compares every listed file's sha256 and size, all before the caller uses anything.

Every manifest's file table has the same shape: ``{"relative/path": {"sha256": hex, "bytes": int}}``.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from world_format.background import Background
from world_format.canonical import atomic_writer, file_sha256, fsync_dir, replace_dir, sha256_hex, staging_dir
from world_format.errors import ChecksumError

FileTable = dict[str, dict[str, Any]]
Content = bytes | Path
"""A file's content: bytes in memory, or a file on disk to copy (streamed, fsynced)."""


def file_entry(data: bytes, sha256: str | None = None) -> dict[str, Any]:
    """The manifest entry of ``data``: its sha256 (hex; ``sha256`` when the caller already hashed these very bytes)
    and size in bytes."""
    return {"sha256": sha256 or sha256_hex(data), "bytes": len(data)}


def file_table(files: Mapping[str, bytes], hashed: Mapping[str, str] | None = None) -> FileTable:
    """The manifest entries of in-memory files, by relative path (sorted); ``hashed`` gives the sha256 of files
    whose bytes the caller already hashed."""
    known = hashed or {}
    return {name: file_entry(data, known.get(name)) for name, data in sorted(files.items())}


def _entry_of_path(path: Path) -> dict[str, Any]:
    return {"sha256": file_sha256(path), "bytes": path.stat().st_size}


def _copy_durable(source: Path, target: Path) -> None:
    with open(source, "rb") as src, atomic_writer(target) as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _stage_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to a new file of a private staging folder (flushed to disk later, :func:`_flush_staged`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as handle:
        handle.write(data)


def _flush_staged(staging: Path, names: list[str]) -> None:
    """fsync the staged files and every folder holding them, so the folder swapped in is durable."""
    for name in names:
        fd = os.open(staging / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in sorted({(staging / name).parent for name in names}, reverse=True):
        fsync_dir(folder)


def write_manifested_dir(out: Path, files: Mapping[str, Content], manifest_name: str,
                         render: Callable[[FileTable], bytes],
                         before_publish: Callable[[Path], None] | None = None,
                         hashed: Mapping[str, str] | None = None) -> FileTable:
    """Write ``files`` and their manifest into ``out``, atomically; return the file table.

    ``files`` maps relative POSIX paths to bytes or to files to copy. ``render(table)`` returns
    the manifest's bytes (each artifact keeps its own manifest document around the shared table).
    ``before_publish(staging)`` runs on the complete folder before it replaces ``out`` (the kit
    writes its archive there). ``hashed`` gives the sha256 of in-memory files whose very bytes the
    caller already hashed (a kit's seed). On any failure ``out`` is left as it was and the staging
    folder is removed.
    """
    staging = staging_dir(out)
    known = hashed or {}
    flushing: Background[None] | None = None
    try:
        table: FileTable = {}
        for name in sorted(files):
            content, target = files[name], staging / name
            if isinstance(content, bytes):
                _stage_bytes(target, content)
                table[name] = file_entry(content, known.get(name))
            else:
                _copy_durable(Path(content), target)
                table[name] = _entry_of_path(target)
        _stage_bytes(staging / manifest_name, render(table))
        # the disk flush of a large staged file (a kit's seed) is I/O: it overlaps the caller's archive
        flushing = Background(lambda: _flush_staged(staging, [*sorted(files), manifest_name]), "blobkit-flush")
        if before_publish is not None:
            before_publish(staging)
        flushing.result()
        replace_dir(staging, out)
    finally:
        if flushing is not None:
            flushing.wait()
        if staging.exists():
            shutil.rmtree(staging)
    return table


def present_files(root: Path, *, recursive: bool) -> Iterator[str]:
    """Relative POSIX paths of the regular files under ``root`` (sorted within each folder).

    Links and special files are refused (ChecksumError); without ``recursive`` so are subfolders.
    """
    root = Path(root)
    for directory, subdirs, names in os.walk(root, followlinks=False):
        subdirs.sort()
        if not recursive and subdirs:
            raise ChecksumError(f"{root}: {subdirs[0]} is a folder (only regular files are allowed here)")
        for name in sorted(names) + [d for d in subdirs if (Path(directory) / d).is_symlink()]:
            path = Path(directory) / name
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise ChecksumError(f"{path}: not a regular file (links and special files are refused)")
            yield path.relative_to(root).as_posix()


def check_listing(root: Path, table: Mapping[str, Any], manifest_name: str, *, recursive: bool) -> None:
    """Every file present is listed and every listed file is present (the manifest itself excepted)."""
    present = set(present_files(root, recursive=recursive)) - {manifest_name}
    unlisted = sorted(present - set(table))
    if unlisted:
        raise ChecksumError(f"{root}: {unlisted[0]} is not listed in {manifest_name}")
    missing = sorted(set(table) - present)
    if missing:
        raise ChecksumError(f"{root}: {missing[0]} is listed in {manifest_name} but missing")


def _well_formed(entry: Any) -> bool:
    return (isinstance(entry, dict) and set(entry) == {"sha256", "bytes"} and isinstance(entry["sha256"], str)
            and isinstance(entry["bytes"], int) and not isinstance(entry["bytes"], bool))


def check_bytes(path: Path, data: bytes, entry: Any, manifest_name: str) -> str:
    """Compare bytes already read with their manifest entry; return their sha256 (hex)."""
    digest = sha256_hex(data) if _well_formed(entry) and len(data) == entry["bytes"] else ""
    if not digest or digest != entry["sha256"]:
        raise ChecksumError(f"{path}: sha256 or size does not match {manifest_name}")
    return digest


def verify_manifested_dir(root: Path, table: Mapping[str, Any], manifest_name: str, *, recursive: bool) -> None:
    """The listing matches (:func:`check_listing`) and every file's sha256 and size match its entry.

    Files are streamed, so a multi-gigabyte weight file is never held in memory.
    """
    check_listing(root, table, manifest_name, recursive=recursive)
    for name, entry in sorted(table.items()):
        path = Path(root) / name
        if not _well_formed(entry) or path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
            raise ChecksumError(f"{path}: sha256 or size does not match {manifest_name}; refusing to use it")
