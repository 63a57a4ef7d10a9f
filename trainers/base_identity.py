"""A base model's identity: one sha256 that plans and exports pin, and the check that refuses any other base.

A converted registry base (:mod:`trainers.registry_base`) is identified by the sha256 of its
manifest, which lists every file's sha256 and the source GGUF's. A local model directory without
one is identified by the sha256 of its file table (each regular file's name, sha256 and size, as
canonical JSON), computed when the run is planned. A hub base is pinned by its revision instead.
Reloading a LoRA export (and continuing one with GRPO) loads its base only after this check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from world_format.canonical import canonical_bytes, file_sha256, sha256_hex

from .errors import BaseMismatchError
from .registry_base import BASE_MANIFEST, read_base_manifest

IGNORED = (".lock",)


def base_fingerprint(path: Path) -> str:
    """The sha256 identity of the model directory ``path`` (see the module docstring).

    Raises BaseMismatchError when a converted base fails its own manifest.
    """
    path = Path(path)
    if read_base_manifest(path) is not None:
        return file_sha256(path / BASE_MANIFEST)
    table = {p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size}
             for p in sorted(path.iterdir()) if p.is_file() and not p.name.endswith(IGNORED)}
    return sha256_hex(canonical_bytes(table))


def pinned_base_path(base: dict[str, Any]) -> str:
    """Where to load the base a plan or export recorded, after checking it is that very base.

    A registry base whose folder is gone (another machine) is converted again from its package and
    must come out with the same sha256. Raises BaseMismatchError naming both digests otherwise; a
    record without ``sha256`` (a hub base, or an export written before bases were pinned) is loaded
    as recorded.
    """
    pinned = base.get("sha256")
    path = str(base["name_or_path"])
    if not pinned:
        return path
    if base.get("source") == "registry" and not Path(path).is_dir():
        from .catalog import resolve_base

        path = resolve_base(str(base["id"])).name_or_path
    if not Path(path).is_dir():
        raise BaseMismatchError(f"the base {path} this model was trained on is missing")
    actual = base_fingerprint(Path(path))
    if actual != pinned:
        raise BaseMismatchError(f"{path}: this base has sha256 {actual}, but the model was trained on sha256 {pinned}; "
                                "refusing to load an adapter on a different base")
    return path
