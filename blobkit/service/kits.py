"""Kits built by the service: one build per (source, build config), kept as a blob, reused afterwards.

The build is :func:`blobkit.builder.execute_build` + :func:`~blobkit.builder.write_kit`, as ``blobkit build``
runs it; it is byte-reproducible, so a second request for the same source and config reuses the first archive
(same sha256) instead of building again.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobkit.builder import BuildConfig, execute_build, write_kit
from trainers.episode_limit import longest_case
from world_format.canonical import canonical_json, sha256_hex
from world_format.kit import open_kit

from .records import Environment
from .sources import materialize
from .store import ServiceStore


@dataclass(frozen=True)
class BuiltKitRef:
    """A kit the service holds: its archive blob and the build record (tasks, rows, cases)."""

    sha256: str
    bytes: int
    name: str
    record: dict[str, Any]


def kit_key(source_sha256: str, build: BuildConfig) -> str:
    """The cache key: sha256 of the source's sha256, the build config and the builder version."""
    from blobkit import __version__

    return sha256_hex(canonical_json({"source": source_sha256, "build": build.model_dump(mode="json"),
                                      "builder": __version__}).encode("utf-8"))


def source_bytes(store: ServiceStore, env: Environment) -> bytes:
    """The environment's uploaded source."""
    assert env.source_sha256 is not None
    return store.blobs.existing(env.source_sha256).read_bytes()


def ensure_kit(store: ServiceStore, env: Environment, build: BuildConfig) -> BuiltKitRef:
    """The kit of ``env`` under ``build``: from the cache, or built now (minting, gate, split, replay) and kept."""
    assert env.source_sha256 is not None and env.source_form is not None
    key = kit_key(env.source_sha256, build)
    row = store.conn.execute("SELECT sha256, bytes, name, record FROM kits WHERE key = ?", (key,)).fetchone()
    if row is not None and store.blobs.path(row[0]).is_file():
        cached = store.cell(row[3], f"kit {key[:16]}", "record")
        if "longest_case_turns" in cached:  # a record from before it was kept is built again
            return BuiltKitRef(row[0], row[1], row[2], cached)
    with tempfile.TemporaryDirectory(prefix="blobkit-kit-") as tmp:
        path = materialize(source_bytes(store, env), env.source_form, Path(tmp) / "source")
        record = write_kit(execute_build(path, build), Path(tmp) / "kit")
        with open_kit(Path(record["kit"]["path"])) as kit:
            record["longest_case_turns"] = longest_case(kit)[1]
        archive = Path(record["kit"]["archive"])
        ref = store.blobs.put_file(archive)
        name = archive.name
    kept = {k: v for k, v in record.items() if k != "kit"}
    with store.write() as conn:
        conn.execute("INSERT OR IGNORE INTO blobs (sha256, bytes, created_at) VALUES (?, ?, ?)",
                     (ref.sha256, ref.bytes, time.time()))
        conn.execute("INSERT OR REPLACE INTO kits (key, sha256, bytes, name, record, created_at) VALUES "
                     "(?, ?, ?, ?, ?, ?)", (key, ref.sha256, ref.bytes, name, canonical_json(kept), time.time()))
    return BuiltKitRef(ref.sha256, ref.bytes, name, kept)
