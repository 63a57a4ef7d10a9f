"""The one training configuration object, resolved from defaults plus flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainConfig(BaseModel):
    """Everything a training run needs; written to plan.json and beside every checkpoint and export."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kit: Path
    """Kit directory or archive."""
    data: Path | None = None
    """SFT rows (defaults to the kit's sft.jsonl)."""
    base: str = "Qwen/Qwen3-8B"
    """Catalog id or local model directory."""
    revision: str | None = None
    """Pinned revision of a hub base."""
    method: Literal["sft", "grpo"] = "grpo"
    """Training method."""
    target: Literal["local-torch", "local-mlx", "runpod"] = "local-mlx"
    """Where training runs."""
    out: Path = Path("out/train")
    """Output directory."""
    dry_run: bool = False
    """Plan only: validate, count tokens, write plan.json."""
    full: bool = False
    """Train all weights instead of a LoRA adapter."""
    lora_rank: int = Field(16, ge=1, le=512)
    """LoRA rank."""
    epochs: float = Field(8, gt=0)
    """SFT epochs."""
    steps: int = Field(100, ge=1)
    """GRPO steps."""
    seed: int = 42
    """Seed for data order, initialisation and sampling."""
    learning_rate: float = Field(2e-4, gt=0)
    """Peak learning rate."""
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    """Share of SFT optimizer steps spent warming the learning rate up (then linear decay)."""
    batch_size: int = Field(8, ge=1)
    """Rows per optimizer step."""
    max_length: int = Field(1024, ge=64)
    """Longest row in tokens; longer rows are an error, never dropped."""
    packing: bool = False
    """Pack rows (padding-free, no cross-example attention)."""
    group_by_length: bool = False
    """SFT without packing: batch rows of similar length together (seeded), so little compute goes to padding.
    Faster, but batches of one length are batches of one task shape: from scratch at a high learning rate it
    learned far worse (see README)."""
    grounding_repeats: int = Field(0, ge=0, le=16)
    """SFT: add every grounding turn (a tool call whose text argument quotes the user, such as the email address
    a customer gave) this many extra times as its own example: the executed conversation up to that call.
    0 turns it off."""
    answer_quote_repeats: int = Field(0, ge=0, le=16)
    """SFT: add every assistant answer that quotes a figure from a tool observation (such as an order total) this
    many extra times as its own example: the executed conversation up to that answer. 0 turns it off."""
    merge: bool = False
    """Also export the merged model."""
    max_turns: int = Field(6, ge=1)
    """Turn cap of an evaluation episode."""
    max_new_tokens: int = Field(128, ge=8)
    """Tokens per generated assistant turn."""
    eval_limit: int | None = Field(None, ge=1)
    """Evaluate at most this many held-out cases (default: all)."""
    init_adapter: Path | None = None
    """An export (``OUT/export`` of an SFT run) that GRPO warm-starts from."""
    group_size: int = Field(2, ge=2)
    """GRPO attempts per prompt (the company worker default is 2)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of GRPO rollouts."""
    max_model_calls: int | None = Field(None, ge=1)
    """Stop GRPO cleanly at a step boundary after this many model calls (generate turns)."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop training cleanly at a step boundary after this many active minutes."""
    confirm_spend: bool = False
    """Allow a paid target (runpod) to create resources that cost money."""
    max_hours: float = Field(2.0, gt=0)
    """runpod: the pod terminates itself (and the host terminates it) after this many hours."""
    gpu_type: str = "NVIDIA GeForce RTX 4090"
    """runpod: GPU type id from RunPod's catalog."""
    gpu_count: int = Field(1, ge=1, le=8)
    """runpod: GPUs per pod."""
