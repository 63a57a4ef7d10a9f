"""Exported models: files with a sha256 manifest, refused on reload when anything was tampered with."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from blobkit.canonical import atomic_write_json, file_sha256, replace_dir, staging_dir
from blobkit.errors import ChecksumError, TrainerError

MANIFEST = "manifest.json"
WEIGHT_SUFFIXES = (".safetensors",)
REFUSED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def export_model(trained: Path, out: Path, *, kind: str, config: dict[str, Any], base: dict[str, Any],
                 kit_sha256: str) -> Path:
    """Copy the trained files (safetensors only) plus config and manifest into ``out`` atomically."""
    staging = staging_dir(out)
    try:
        for path in sorted(Path(trained).iterdir()):
            if path.is_file() and not path.name.endswith(REFUSED_SUFFIXES) and path.name != MANIFEST:
                shutil.copyfile(path, staging / path.name)
        if not any(p.name.endswith(WEIGHT_SUFFIXES) for p in staging.iterdir()):
            raise TrainerError(f"{trained}: no safetensors weights to export")
        atomic_write_json(staging / "train_config.json", config)
        files = {p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size} for p in sorted(staging.iterdir())}
        atomic_write_json(staging / MANIFEST, {"format": "blobkit-export", "version": 1, "kind": kind,
                                               "base": base, "kit_sha256": kit_sha256, "files": files})
        replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out


def verify_export(export: Path) -> dict[str, Any]:
    """Check every file against the manifest (all-or-nothing, no unlisted files); return the manifest."""
    manifest_path = Path(export) / MANIFEST
    if not manifest_path.is_file():
        raise TrainerError(f"{export}: no {MANIFEST}: not a blobkit export")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    listed: dict[str, Any] = manifest.get("files", {})
    present = {entry.name for entry in os.scandir(export) if entry.name != MANIFEST}
    for name in sorted(present | set(listed)):
        path = Path(export) / name
        if name not in listed:
            raise ChecksumError(f"{path}: not listed in {MANIFEST}")
        if name not in present or path.is_symlink() or not path.is_file():
            raise ChecksumError(f"{path}: listed in {MANIFEST} but missing or not a regular file")
        if file_sha256(path) != listed[name]["sha256"] or path.stat().st_size != listed[name]["bytes"]:
            raise ChecksumError(f"{path}: sha256 does not match {MANIFEST}; refusing to load it")
    return dict(manifest)


def load_export(export: Path) -> tuple[Any, Any, dict[str, Any]]:
    """Verify then load (model, tokenizer, manifest) from safetensors only, in this process, fresh."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = verify_export(export)
    tokenizer = AutoTokenizer.from_pretrained(export)
    if manifest["kind"] == "full":
        model = AutoModelForCausalLM.from_pretrained(export, use_safetensors=True)
    else:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(manifest["base"]["name_or_path"], use_safetensors=True,
                                                    revision=None if manifest["base"]["source"] == "local"
                                                    else manifest["base"]["revision"])
        model = PeftModel.from_pretrained(base, export)
    model.eval()
    return model, tokenizer, manifest

