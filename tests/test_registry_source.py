"""The converted offline base is checked against its pinned source, not only the manifest beside it (issue 24.6).

A folder whose files match its own manifest can still be wrong: converted from another file, or
edited together with its manifest. Resolving it compares the manifest with the pinned registry
file and every file's recomputed sha256 with the pinned result of a conversion.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from trainers.catalog import SMOLLM2_135M_GGUF
from trainers.errors import BaseMismatchError
from trainers.registry_base import BASE_MANIFEST, converted_base, read_base_manifest, verify_against_source
from world_format.canonical import canonical_bytes
from world_format.manifest import write_manifested_dir

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _folder(root: Path, files: dict[str, bytes], source: dict[str, str], transformers: str) -> Path:
    target = root / "base"

    def render(table: dict[str, object]) -> bytes:
        return canonical_bytes({"format": "blobkit-base", "version": 1, "id": SMOLLM2, "source": source,
                                "converted_with": {"transformers": transformers}, "files": table}) + b"\n"

    write_manifested_dir(target, files, BASE_MANIFEST, render)
    return target


def _pinned_source() -> dict[str, str]:
    return {"package": SMOLLM2_135M_GGUF.package, "package_version": "0.1.2", "file": SMOLLM2_135M_GGUF.path,
            "sha256": SMOLLM2_135M_GGUF.sha256}


def test_a_folder_consistent_with_its_own_manifest_but_not_with_the_pinned_conversion_is_refused(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path, {name: b"edited" for name, _ in SMOLLM2_135M_GGUF.converted}, _pinned_source(),
                     SMOLLM2_135M_GGUF.converted_with or "")
    manifest = read_base_manifest(folder)  # its own manifest is satisfied
    assert manifest is not None
    with pytest.raises(BaseMismatchError, match="does not match its pinned source.*converting the pinned file gives"):
        verify_against_source(folder, manifest, SMOLLM2_135M_GGUF, Path("unused.gguf"))


@pytest.mark.parametrize("key", ["package", "file", "sha256"])
def test_a_manifest_naming_another_source_is_refused(tmp_path: Path, key: str) -> None:
    folder = _folder(tmp_path, {"config.json": b"{}"}, {**_pinned_source(), key: "something else"}, "5.24.0")
    manifest = read_base_manifest(folder)
    assert manifest is not None
    with pytest.raises(BaseMismatchError, match=f"its manifest names {key} 'something else'"):
        verify_against_source(folder, manifest, SMOLLM2_135M_GGUF, Path("unused.gguf"))


@pytest.mark.slow
def test_a_converted_smollm2_edited_with_its_manifest_is_refused_on_resolve(tmp_path: Path) -> None:
    """Converts SmolLM2 (about a minute), then edits a copy's tokenizer config and rewrites its manifest to match."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    good = converted_base(SMOLLM2, SMOLLM2_135M_GGUF, root=tmp_path / "bases")
    assert good.converted_now is True  # and verified against the pinned conversion on the way
    assert converted_base(SMOLLM2, SMOLLM2_135M_GGUF, root=tmp_path / "bases").converted_now is False
    copy_root = tmp_path / "copy"
    copy = copy_root / good.path.name
    copy.mkdir(parents=True)
    for path in good.path.iterdir():
        os.link(path, copy / path.name) if path.name == "model.safetensors" else shutil.copy(path, copy / path.name)
    (copy / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    manifest = json.loads((copy / BASE_MANIFEST).read_text(encoding="utf-8"))
    manifest["files"]["tokenizer_config.json"] = {"bytes": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}
    (copy / BASE_MANIFEST).write_bytes(canonical_bytes(manifest) + b"\n")
    assert read_base_manifest(copy) is not None  # the manifest beside it is satisfied
    with pytest.raises(BaseMismatchError, match="tokenizer_config.json has sha256"):
        converted_base(SMOLLM2, SMOLLM2_135M_GGUF, root=copy_root)
