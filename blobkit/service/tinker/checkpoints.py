"""Checkpoints on disk: content-addressed folders under the store, verified before use, exportable.

``DIR/tinker/checkpoints/ab/<sha256>/``: the saved files plus ``manifest.json``, whose sha256 is the
folder's name and the checkpoint's content address (the manifest pins every file's sha256 and size,
the kind, the base and the LoRA settings; no names or times, so identical content is stored once).
Written to a staging folder and renamed into place (:func:`world_format.manifest.write_manifested_dir`);
the database row that names it is written after, so a restart finds every checkpoint it lists. A
sampler checkpoint exports as a blobkit export (the PEFT adapter, the base's tokenizer in its tool
format, ``train_config.json`` and a manifest): what ``blobkit replay`` and ``blobkit eval --model`` load.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from blobkit.errors import ChecksumError, NotFoundError
from trainers.tinker_engine.records import LoraSettings
from world_format.canonical import canonical_bytes, file_sha256, sha256_hex
from world_format.manifest import verify_manifested_dir, write_manifested_dir

from .bases import ServedBase

ROOT = Path("tinker") / "checkpoints"
MANIFEST = "manifest.json"
FORMAT = "blobkit-tinker-checkpoint"


def checkpoints_root(store_root: Path) -> Path:
    """Where a store keeps its checkpoint folders."""
    return Path(store_root) / ROOT


def _manifest(kind: str, base: ServedBase, lora: LoraSettings, table: dict[str, Any]) -> bytes:
    return canonical_bytes({"format": FORMAT, "version": 1, "kind": kind, "base_model": base.name,
                            "base": base.record, "lora": lora.model_dump(), "files": table}) + b"\n"


def store_folder(store_root: Path, staging: Path, kind: str, base: ServedBase, lora: LoraSettings) -> tuple[str, int]:
    """Store the files of ``staging`` as a checkpoint; (its sha256, its size in bytes). Stored once per content."""
    files = {p.name: p for p in sorted(Path(staging).iterdir()) if p.is_file()}
    table: dict[str, Any] = {name: {"sha256": file_sha256(path), "bytes": path.stat().st_size}
                             for name, path in files.items()}
    manifest = _manifest(kind, base, lora, table)
    digest = sha256_hex(manifest)
    target = checkpoints_root(store_root) / digest[:2] / digest
    if not (target / MANIFEST).is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_manifested_dir(target, dict(files), MANIFEST, lambda written: _manifest(kind, base, lora, written))
    return digest, sum(int(entry["bytes"]) for entry in table.values())


def open_folder(store_root: Path, sha256: str) -> Path:
    """The verified folder of checkpoint ``sha256``; NotFoundError when missing, ChecksumError when tampered."""
    import json

    target = checkpoints_root(store_root) / sha256[:2] / sha256
    manifest_path = target / MANIFEST
    if not manifest_path.is_file():
        raise NotFoundError(f"checkpoint {sha256} is listed but its folder {target} is missing")
    data = manifest_path.read_bytes()
    if sha256_hex(data) != sha256:
        raise ChecksumError(f"{manifest_path}: its sha256 is not {sha256}; the checkpoint was changed on disk")
    verify_manifested_dir(target, json.loads(data)["files"], MANIFEST, recursive=False)
    return target


def export_sampler(folder: Path, base: ServedBase, rank: int, out: Path) -> Path:
    """A blobkit export of the adapter in ``folder`` (a LoRA export of ``base``) written to ``out``."""
    from transformers import AutoTokenizer

    from trainers.config import TrainConfig
    from trainers.export import export_model
    from trainers.formats import apply_tool_format

    tokenizer = AutoTokenizer.from_pretrained(base.path)
    apply_tool_format(tokenizer, "auto", where=base.name)
    config = TrainConfig(base=base.name, method="sft", target="local-torch", lora_rank=rank).as_json()
    with tempfile.TemporaryDirectory(prefix="blobkit-tinker-export-") as scratch:
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            (Path(scratch) / name).write_bytes((folder / name).read_bytes())
        tokenizer.save_pretrained(scratch)
        return export_model(Path(scratch), Path(out), kind="lora", config=config, base=base.record, kit_sha256=None)
