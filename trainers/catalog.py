"""Accepted base models with approximate VRAM for LoRA at bf16 and 4k context."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError


@dataclass(frozen=True)
class BaseModel:
    """One catalog entry (VRAM figures are estimates for LoRA, bf16, 4k tokens, batch 1)."""

    id: str
    params_b: float
    vram_sft_gb: int
    vram_grpo_gb: int
    revision: str = "main"


CATALOG: tuple[BaseModel, ...] = (
    BaseModel("Qwen/Qwen2.5-0.5B-Instruct", 0.5, 4, 8),
    BaseModel("Qwen/Qwen2.5-1.5B-Instruct", 1.5, 8, 14),
    BaseModel("Qwen/Qwen2.5-7B-Instruct", 7.6, 24, 40),
    BaseModel("Qwen/Qwen3-0.6B", 0.6, 5, 9),
    BaseModel("Qwen/Qwen3-1.7B", 1.7, 9, 16),
    BaseModel("Qwen/Qwen3-4B", 4.0, 16, 28),
    BaseModel("Qwen/Qwen3-8B", 8.2, 26, 44),
    BaseModel("meta-llama/Llama-3.2-1B-Instruct", 1.2, 7, 12),
    BaseModel("meta-llama/Llama-3.2-3B-Instruct", 3.2, 14, 24),
    BaseModel("LiquidAI/LFM2-350M", 0.35, 3, 6),
    BaseModel("LiquidAI/LFM2-700M", 0.7, 5, 9),
    BaseModel("LiquidAI/LFM2-1.2B", 1.2, 7, 12),
    BaseModel("LiquidAI/LFM2-2.6B", 2.6, 12, 20),
)


def catalog_json() -> list[dict[str, Any]]:
    """The catalog as plain JSON."""
    return [asdict(entry) for entry in CATALOG]


@dataclass(frozen=True)
class ResolvedBase:
    """Where the base model comes from."""

    source: str
    name_or_path: str
    revision: str
    entry: BaseModel | None

    def vram_estimate_gb(self, method: str) -> int | None:
        """Approximate VRAM for the method, when known."""
        if self.entry is None:
            return None
        return self.entry.vram_sft_gb if method == "sft" else self.entry.vram_grpo_gb


def resolve_base(base: str, revision: str | None = None) -> ResolvedBase:
    """A catalog id or a local directory holding a model (config.json + safetensors)."""
    path = Path(base)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{base}: a local base must be a model directory with config.json")
        return ResolvedBase("local", str(path.resolve()), revision or "local", None)
    for entry in CATALOG:
        if entry.id == base:
            return ResolvedBase("hub", entry.id, revision or entry.revision, entry)
    accepted = ", ".join(entry.id for entry in CATALOG)
    raise ConfigError(f"base {base!r} is not in the catalog and is not a local model directory; accepted: {accepted}")
