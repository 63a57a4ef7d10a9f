"""Canonical JSON, content hashes and crash-safe writes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, BinaryIO

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _not_serializable(value: Any) -> Any:
    return _ENCODER.default(value)  # raises TypeError, as json.dumps does


# What json.dumps builds on every call for these options, made once: C's encoder, which keeps no state between calls
# without the circular-reference check (canonical values are JSON data, never circular).
_C_ENCODER = None if c_make_encoder is None else c_make_encoder(
    None, _not_serializable, encode_basestring, None, ":", ",", True, False, False)


def canonical_json(value: Any) -> str:
    """Serialise ``value`` with sorted keys and fixed separators (no whitespace, UTF-8 kept)."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def canonical_bytes(value: Any) -> bytes:
    """``canonical_json`` encoded as UTF-8."""
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` as lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def content_id(value: Any, prefix: str = "", length: int = 16) -> str:
    """A short, stable id: a prefix plus the first ``length`` hex digits of sha256(canonical JSON)."""
    return prefix + sha256_hex(canonical_bytes(value))[:length]


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Stream a file and return its sha256 hex digest."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary handle on a temp file beside ``path``; on success fsync, rename over ``path``, fsync the folder.

    If the block raises, the temp file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_writer`."""
    with atomic_writer(path) as handle:
        handle.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text through :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, value: Any) -> None:
    """Canonical JSON plus a trailing newline, written atomically."""
    atomic_write_bytes(path, canonical_bytes(value) + b"\n")


def jsonl_bytes(rows: Iterable[Any]) -> bytes:
    """Canonical JSON Lines: one canonical object per line, each ending in a newline."""
    return b"".join(canonical_bytes(row) + b"\n" for row in rows)


def replace_dir(staging: Path, final: Path) -> None:
    """Move a fully written ``staging`` directory to ``final``, keeping the old one until the swap.

    A crash at any point leaves either the old ``final`` or the new one in place (plus, at
    worst, a stale ``.old`` directory beside it), never a half-written artifact.
    """
    final = Path(final)
    backup = final.with_name(f".{final.name}.old")
    if backup.exists():
        shutil.rmtree(backup)
    if final.exists():
        os.replace(final, backup)
    os.replace(staging, final)
    fsync_dir(final.parent)
    if backup.exists():
        shutil.rmtree(backup)


def staging_dir(final: Path) -> Path:
    """A fresh temporary directory beside ``final`` (same filesystem, so the rename is atomic)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
