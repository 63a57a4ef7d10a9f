"""What a job is of: its source (pinned by sha256), its base model and its config."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from blobkit.errors import SourceError
from world_format.canonical import canonical_json, file_sha256, sha256_hex

from .config import TINY, CompanyConfig


def source_sha256(path: Path) -> str:
    """sha256 of a world.json, or of the sorted (name, sha256) table of a packaged world directory."""
    path = Path(path)
    if path.is_dir():
        table = {entry.name: file_sha256(Path(entry.path)) for entry in sorted(os.scandir(path), key=lambda e: e.name)
                 if entry.is_file(follow_symlinks=False)}
        return sha256_hex(canonical_json(table).encode("utf-8"))
    if not path.is_file():
        raise SourceError(f"{path}: no such source (pass a world.json or a packaged world directory)")
    return file_sha256(path)


def checked_source(identity: dict[str, Any]) -> Path:
    """The job's source path, checked against the sha256 recorded when the job was created."""
    path = Path(identity["source"]["path"])
    if source_sha256(path) != identity["source"]["sha256"]:
        raise SourceError(f"{path}: the source changed since the job was created (sha256 differs); "
                          "create a new job for the new export")
    return path


def base_identity(base_model: str, revision: str | None = None) -> dict[str, Any]:
    """Validate the base model choice and describe it for the job identity."""
    if base_model == TINY:
        return {"id": TINY, "source": TINY, "revision": None,
                "note": "a tiny Qwen2-shaped model with random weights, built offline from the kit's text"}
    from trainers.catalog import resolve_base

    resolved = resolve_base(base_model, revision)
    return {"id": base_model, "source": resolved.source, "revision": resolved.revision,
            "name_or_path": resolved.name_or_path}


def job_identity(source: Path, base_model: str, config: CompanyConfig, revision: str | None = None) -> dict[str, Any]:
    """The identity a job is created with: the source and its sha256, the base model, the whole config."""
    source = Path(source).resolve()
    return {"source": {"path": str(source), "sha256": source_sha256(source)},
            "base_model": base_identity(base_model, revision), "config": config.model_dump(mode="json")}
