"""The records that cross into and out of the engine: LoRA and optimizer settings, examples, results, samples.

Shapes follow Tinker's conventions (https://tinker-docs.thinkingmachines.ai/losses): an example is
``T`` input tokens, and every loss input is a per-position vector of length ``T`` (position ``i``
predicts ``target_tokens[i]``). Losses are sums over tokens and examples, never means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class LoraSettings(BaseModel):
    """Which layers a LoRA adapter adapts, its rank and the seed of its initialisation (the SDK's ``lora_config``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    rank: int = Field(ge=1, le=512)
    """LoRA rank r; alpha is ``trainers.lora.ALPHA_PER_RANK * r``, as in every blobkit adapter."""
    seed: int = 0
    """Seed of the adapter's initialisation (PEFT: A Kaiming-uniform, B zero)."""
    train_attn: bool = True
    """Adapt the attention projections of every block."""
    train_mlp: bool = True
    """Adapt the MLP projections of every block."""
    train_unembed: bool = True
    """Adapt the output (unembedding) layer."""


class AdamSettings(BaseModel):
    """One AdamW step's hyperparameters (the SDK's ``AdamParams``; decoupled weight decay)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    learning_rate: float = Field(1e-4, ge=0)
    """Step size."""
    beta1: float = Field(0.9, ge=0, lt=1)
    """Decay of the running mean of gradients."""
    beta2: float = Field(0.95, ge=0, lt=1)
    """Decay of the running mean of squared gradients."""
    eps: float = Field(1e-12, gt=0)
    """Added to the denominator."""
    weight_decay: float = Field(0.0, ge=0)
    """Decoupled weight decay (the parameter shrinks by ``learning_rate * weight_decay`` per step)."""
    grad_clip_norm: float = Field(0.0, ge=0)
    """Clip the global gradient norm to this value before the step; 0 turns clipping off."""


@dataclass(frozen=True)
class Example:
    """One training example (a Tinker ``Datum``): input tokens and the loss's per-position inputs."""

    tokens: np.ndarray
    """int64, shape ``(T,)``: the model input."""
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    """Loss inputs by name, each shape ``(T,)``: ``target_tokens`` (int64), ``weights``, ``logprobs``,
    ``advantages`` (float32)."""

    @property
    def length(self) -> int:
        """``T``, the number of input tokens."""
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class ForwardResult:
    """What one forward (or forward/backward) call returns."""

    outputs: list[dict[str, np.ndarray]]
    """Per example: ``logprobs`` (float32, ``(T,)``: log p(target_tokens[i])) and ``elementwise_loss`` (float32,
    ``(T,)``: each position's term of the loss)."""
    metrics: dict[str, float]
    """``name:reduction`` keys (Tinker's convention): ``loss:sum`` (the summed loss) and ``tokens:sum`` (positions
    with a non-zero loss weight)."""
    tokens: int
    """Input tokens run through the model."""


class SamplingSettings(BaseModel):
    """How to sample (the SDK's ``SamplingParams``, stop sequences already tokenized)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_tokens: int = Field(ge=1)
    """Most tokens to generate per sequence."""
    temperature: float = Field(1.0, ge=0)
    """Softmax temperature; 0 is greedy."""
    top_k: int = -1
    """Keep only the k most likely tokens (-1 or 0: all)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Keep the smallest set of tokens whose probability reaches p (1: all)."""
    stop: tuple[tuple[int, ...], ...] = ()
    """Token sequences that end a sequence (included in its tokens)."""
    seed: int | None = None
    """Seed of the sampling RNG (sequence i uses seed + i); None: seeded from the request."""


@dataclass(frozen=True)
class SampledSequence:
    """One sampled continuation."""

    tokens: list[int]
    """Generated token ids, the stop sequence included when one ended it."""
    logprobs: list[float]
    """log q(token) of each generated token under the distribution it was sampled from (temperature applied,
    before top-k/top-p truncation)."""
    stop_reason: Literal["stop", "length"]
    """``stop``: a stop sequence or the end-of-sequence token ended it; ``length``: ``max_tokens`` did."""


@dataclass(frozen=True)
class SampleResult:
    """What one sampling call returns."""

    sequences: list[SampledSequence]
    prompt_logprobs: list[float] | None = None
    """log p(prompt[i] | prompt[:i]) for i >= 1, NaN at position 0; None when not asked for."""
