"""Turning a single-file export into a packaged world directory, deterministically."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from blobkit.canonical import atomic_write_bytes, replace_dir, sha256_hex, staging_dir

from .loader import MANIFEST_FILE, MANIFEST_FORMAT, SEED_FILE, WORLD_FILE, LoadedWorld, world_document


def package_files(loaded: LoadedWorld) -> dict[str, bytes]:
    """The files of the packaged form (world.json, seed.sqlite, manifest.json) as bytes."""
    world_bytes = (json.dumps(world_document(loaded.world, SEED_FILE), sort_keys=True, indent=1,
                              ensure_ascii=False) + "\n").encode("utf-8")
    files = {WORLD_FILE: world_bytes, SEED_FILE: loaded.seed}
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "version": 1,
        "files": {name: {"sha256": sha256_hex(data), "bytes": len(data)} for name, data in sorted(files.items())},
    }
    files[MANIFEST_FILE] = (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode("utf-8")
    return files


def write_package(loaded: LoadedWorld, out: Path) -> Path:
    """Write the packaged world to ``out`` atomically (the manifest last); return ``out``."""
    staging = staging_dir(out)
    try:
        files = package_files(loaded)
        for name in (WORLD_FILE, SEED_FILE, MANIFEST_FILE):
            atomic_write_bytes(staging / name, files[name])
        replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out
