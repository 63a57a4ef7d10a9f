"""Exported models: files with a sha256 manifest, refused on reload when anything was tampered with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.base_identity import pinned_base_path
from trainers.errors import TrainerError
from world_format.canonical import canonical_bytes
from world_format.manifest import Content, FileTable, verify_manifested_dir, write_manifested_dir

MANIFEST = "manifest.json"
EXPORT_FORMAT = "blobkit-export"
WEIGHT_SUFFIXES = (".safetensors",)
REFUSED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def export_model(trained: Path, out: Path, *, kind: str, config: dict[str, Any], base: dict[str, Any],
                 kit_sha256: str | None) -> Path:
    """Copy the trained files (safetensors only) plus config and manifest into ``out`` atomically.

    ``kit_sha256`` is the kit the model was trained on; None when it was trained elsewhere (a Tinker checkpoint).
    """
    files: dict[str, Content] = {path.name: path for path in sorted(Path(trained).iterdir())
                                 if path.is_file() and not path.name.endswith(REFUSED_SUFFIXES)
                                 and path.name != MANIFEST}
    if not any(name.endswith(WEIGHT_SUFFIXES) for name in files):
        raise TrainerError(f"{trained}: no safetensors weights to export")
    files["train_config.json"] = canonical_bytes(config) + b"\n"

    def render(table: FileTable) -> bytes:
        return canonical_bytes({"format": EXPORT_FORMAT, "version": 1, "kind": kind, "base": base,
                                "kit_sha256": kit_sha256, "files": table}) + b"\n"

    write_manifested_dir(out, files, MANIFEST, render)
    return out


def read_export_manifest(export: Path) -> dict[str, Any]:
    """The export's manifest.json, shape-checked (not yet compared with the files)."""
    manifest_path = Path(export) / MANIFEST
    if not manifest_path.is_file():
        raise TrainerError(f"{export}: no {MANIFEST}: not a blobkit export")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainerError(f"{manifest_path}: not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT or not isinstance(
            manifest.get("files"), dict):
        raise TrainerError(f"{manifest_path}: not a {EXPORT_FORMAT} manifest")
    return manifest


def verify_export(export: Path) -> dict[str, Any]:
    """Check every file against the manifest (all-or-nothing, no unlisted files); return the manifest."""
    manifest = read_export_manifest(export)
    verify_manifested_dir(Path(export), manifest["files"], MANIFEST, recursive=False)
    return manifest


def load_export(export: Path) -> tuple[Any, Any, dict[str, Any]]:
    """Verify then load (model, tokenizer, manifest) from safetensors only, in this process, fresh.

    A LoRA export's base must be the one it pinned (BaseMismatchError otherwise, before anything loads).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = verify_export(export)
    recorded = manifest["base"]
    base_path = pinned_base_path(recorded) if manifest["kind"] != "full" else None
    tokenizer = AutoTokenizer.from_pretrained(export)
    if base_path is None:
        model = AutoModelForCausalLM.from_pretrained(export, use_safetensors=True)
    else:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_path, use_safetensors=True,
                                                    revision=recorded["revision"] if recorded["source"] == "hub"
                                                    else None)
        model = PeftModel.from_pretrained(base, export)
    model.eval()
    return model, tokenizer, manifest



def merge_export(export: Path, out: Path) -> Path:
    """The base with a LoRA export's adapter merged in, exported as a full model (manifest and all) to ``out``.

    The merged weights are what ``PeftModel.merge_and_unload`` computes (W + (alpha / r) B A per
    adapted layer); the manifest records the same base and kit as the adapter's, and its
    ``train_config.json`` is the adapter's.
    """
    import tempfile

    manifest = verify_export(export)
    if manifest["kind"] != "lora":
        raise TrainerError(f"{export}: only a LoRA export can be merged (this one is {manifest['kind']!r})")
    model, tokenizer, _ = load_export(export)
    merged = model.merge_and_unload()
    config = json.loads((Path(export) / "train_config.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="blobkit-merge-") as scratch:
        merged.save_pretrained(scratch, safe_serialization=True)
        tokenizer.save_pretrained(scratch)
        return export_model(Path(scratch), out, kind="full", config=config, base=manifest["base"],
                            kit_sha256=manifest["kit_sha256"])
