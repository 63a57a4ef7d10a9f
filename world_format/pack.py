"""Turning a single-file export into a packaged world directory, deterministically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .loaded import LoadedWorld, world_document
from .loader import MANIFEST_FILE, MANIFEST_FORMAT, SEED_FILE, WORLD_FILE
from .manifest import FileTable, file_table, write_manifested_dir


def _world_bytes(loaded: LoadedWorld) -> bytes:
    document = world_document(loaded.world, SEED_FILE)
    return (json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def manifest_bytes(table: FileTable) -> bytes:
    """The package manifest (indented JSON, as packages have always been written)."""
    manifest: dict[str, Any] = {"format": MANIFEST_FORMAT, "version": 1, "files": table}
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode("utf-8")


def package_files(loaded: LoadedWorld) -> dict[str, bytes]:
    """The files of the packaged form (world.json, seed.sqlite, manifest.json) as bytes."""
    files = {WORLD_FILE: _world_bytes(loaded), SEED_FILE: loaded.seed}
    hashed = {SEED_FILE: loaded.seed_sha256} if loaded.seed_sha256 else None
    files[MANIFEST_FILE] = manifest_bytes(file_table(files, hashed))
    return files


def write_package(loaded: LoadedWorld, out: Path) -> Path:
    """Write the packaged world to ``out`` atomically (the manifest last); return ``out``."""
    write_manifested_dir(out, {WORLD_FILE: _world_bytes(loaded), SEED_FILE: loaded.seed}, MANIFEST_FILE,
                         manifest_bytes)
    return out
