"""A world source as bytes (what an environment stores) and as a path the loader and builder read.

Two forms: ``world.json`` (a single-file export) and ``package`` (a packaged world directory sent as a
``.tar.zst``, extracted with the hostile-safe archive reader). The server and the worker both use these.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

from blobkit.errors import WorldFormatError
from world_format.archive import write_tar_zst
from world_format.archive.read import extract_tar_zst

SourceForm = Literal["world.json", "package"]
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def source_form(data: bytes) -> SourceForm:
    """``package`` for a zstd stream (a .tar.zst), else ``world.json``."""
    return "package" if data[:4] == ZSTD_MAGIC else "world.json"


def materialize(data: bytes, form: SourceForm, dest: Path) -> Path:
    """Write the source under the new folder ``dest``; return the path to load (world.json or the package dir)."""
    dest.mkdir(parents=True, exist_ok=False)
    if form == "world.json":
        path = dest / "world.json"
        path.write_bytes(data)
        return path
    archive = dest / "source.tar.zst"
    archive.write_bytes(data)
    root = extract_tar_zst(archive, dest_parent=dest)
    archive.unlink()
    if not (root / "world.json").is_file():
        raise WorldFormatError("the .tar.zst holds no packaged world (no world.json in its top folder); send a "
                               "world.json, or an archive of a directory made by blobkit pack")
    return root


def pack_source(path: Path, scratch: Path) -> tuple[bytes, SourceForm]:
    """The bytes of a source on disk: a world.json as is, a packaged directory as a reproducible .tar.zst."""
    path = Path(path)
    if path.is_dir():
        archive = scratch / "source.tar.zst"
        write_tar_zst(path, archive, path.name or "world")
        data = archive.read_bytes()
        archive.unlink()
        return data, "package"
    if not path.is_file():
        raise WorldFormatError(f"{path}: no such world (pass a world.json or a packaged world directory)")
    return path.read_bytes(), "world.json"


def remove(dest: Path) -> None:
    """Remove a folder :func:`materialize` made."""
    shutil.rmtree(dest, ignore_errors=True)
