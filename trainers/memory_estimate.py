"""How much memory a local-torch SFT run needs, estimated from the rows it will train on, before anything loads.

plan.json's old figure was the catalog's (LoRA, bf16, 4k tokens, one sequence): 2 GB for SmolLM2-135M, while a real
retail desk's kit (rows of ~1,900 tokens, batch 4) was killed at 24.4 GB on its first step. What a step holds
scales with the tokens of its batch, not with the model: here each part is counted from the base's
``config.json`` and the measured row lengths (the ``micro_batch`` longest rows, padded to the longest):

* ``weights``: the base's parameters at their width (float32 on the CPU);
* ``trainable_state``: full-weight: a gradient and AdamW's two moments per parameter (12 bytes); LoRA: the
  adapter's weights, gradient and moments (16 bytes per adapter parameter);
* ``activations``: what backward keeps per token and layer, :data:`SAVED_PER_TOKEN` (the inputs of the norms, the
  projections and the MLP; measured below), for every token of the batch (with a shared prefix, the prefix once:
  :mod:`trainers.shared_prefix`); with gradient checkpointing, one hidden vector per token and layer plus one
  layer's whole set;
* ``logits``: float32 logits of the labelled positions, with their softmax and gradient, one chunk of
  :data:`trainers.shared_prefix.LOSS_CHUNK` positions at a time (the vocabulary, 49k for SmolLM2, makes this
  the largest part of an unchunked step);
* ``overhead``: the allocator and the framework, :data:`OVERHEAD_SHARE` of the rest (measured).

``benchmarks/sft_memory.py`` measures a step's peak beside this estimate; the constants below come from it.
The run's budget is :data:`MEMORY_SHARE` of the machine's memory (or the GPU's), or ``--memory-limit-gb``; a plan
whose estimate is over it is refused by the dry run, naming the settings that would fit
(:func:`fitting_settings`): gradient checkpointing, fewer rows per forward pass (``--max-batch-tokens``; gradient
accumulation keeps the rows per optimizer update), or both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .shared_prefix import LOSS_CHUNK

GB = 1e9
MEMORY_SHARE = 0.85
"""Share of the machine's memory (the GPU's on CUDA) a run may plan to use; the rest is the system's."""
SAVED_PER_TOKEN = {"hidden": 7.0, "kv": 3.0, "intermediate": 4.0}
"""Values backward keeps per token and decoder layer, in multiples of the hidden size, the key/value width and the
MLP width (norm inputs and outputs, query, rotated query, attention output; keys, values, rotated keys; gate, up,
activation and product), from the Llama layer's autograd graph."""
ACTIVATION_FACTOR = 1.9
"""What one step's peak held per token above the weights, over the values :data:`SAVED_PER_TOKEN` counts, measured:
SmolLM2-135M-Instruct, LoRA r16, float32, 2 cores (``benchmarks/sft_memory.py --configs 1x256 1x512 2x256 1x1024
1x2048``, Dec 2026): 0.90, 1.53, 1.55, 2.83 and 5.32 GB, about 2.45 MB per token where the count gives 1.29
(the adapter's inputs, rotary and attention intermediates, the gradients in flight during backward). The
padded length showed no quadratic term up to 2,048 tokens (sdpa does not keep the attention matrix)."""
OVERHEAD_SHARE = 0.15
"""Allocator and framework memory on top of the counted parts."""


@dataclass(frozen=True)
class Arch:
    """The sizes of a decoder-only transformer that set its memory (from ``config.json``)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def read(cls, model_dir: Path) -> Arch:
        """The sizes in ``model_dir/config.json``; ValueError naming the missing key when it lacks one."""
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        config = config.get("text_config", config)
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            return cls(int(config["num_hidden_layers"]), hidden, int(config["intermediate_size"]), heads,
                       int(config.get("num_key_value_heads") or heads), int(config.get("head_dim") or hidden // heads),
                       int(config["vocab_size"]))
        except KeyError as exc:
            raise ValueError(f"{model_dir}/config.json has no {exc.args[0]}") from None

    @property
    def kv(self) -> int:
        """Width of one token's keys (or values) in a layer."""
        return self.kv_heads * self.head_dim

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters of a rank-``rank`` LoRA on every linear layer of every block."""
        q_width = self.heads * self.head_dim
        per_layer = ((self.hidden + q_width) * 2 + (self.hidden + self.kv) * 2
                     + (self.hidden + self.intermediate) * 3)
        return rank * per_layer * self.layers


def step_parts(arch: Arch, rows: int, length: int, *, checkpointing: bool, prefix: int = 0,
               labelled: int | None = None, width: int = 4) -> dict[str, float]:
    """Bytes one forward and backward over ``rows`` rows padded to ``length`` tokens holds at its peak, by part.

    ``prefix``: tokens every row shares and the shared-prefix loss runs once (0: none); ``labelled``: positions
    that carry loss (default every position); ``width``: bytes per activation value.
    """
    tokens = prefix + rows * (length - prefix)
    per_token = width * (SAVED_PER_TOKEN["hidden"] * arch.hidden + SAVED_PER_TOKEN["kv"] * arch.kv
                         + SAVED_PER_TOKEN["intermediate"] * arch.intermediate)
    cache_copies = 2 * width * arch.kv * rows * prefix * arch.layers  # the prefix cache, concatenated per row
    if checkpointing:
        activations = tokens * arch.layers * arch.hidden * width + ACTIVATION_FACTOR * tokens * per_token
    else:
        activations = ACTIVATION_FACTOR * tokens * arch.layers * per_token
    activations += cache_copies
    scored = rows * length if labelled is None else labelled
    logits = min(scored, LOSS_CHUNK) * arch.vocab * 4 * 3
    return {"activations": activations, "logits": logits}


class MemoryEstimate(BaseModel):
    """plan.json's ``memory``: what the run's worst step will hold, against what the machine can give it."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    device: str
    """Where it trains: ``cpu`` or ``cuda``."""
    limit_gb: float
    """Memory the run may use: --memory-limit-gb, else MEMORY_SHARE of the machine's (the GPU's)."""
    estimate_gb: float
    """The estimated peak of the worst step (the longest rows in one forward pass)."""
    parts_gb: dict[str, float]
    """The estimate by part (weights, trainable_state, activations, logits, overhead)."""
    fits: bool
    """estimate_gb <= limit_gb."""
    micro_batch: int
    """Rows per forward and backward pass (a divisor of batch_size; --max-batch-tokens bounds it)."""
    gradient_accumulation: int
    """Forward passes per optimizer update (batch_size / micro_batch)."""
    gradient_checkpointing: bool
    """Whether activations are recomputed in backward instead of kept."""
    longest_row_tokens: int
    """The longest row, the length the worst batch is padded to."""
    shared_prefix_tokens: int
    """Tokens the worst batch runs once for all its rows (0 without --shared-prefix)."""
    fitting: list[str]
    """Settings that would fit (empty when the plan fits), cheapest first."""
    how: str
    """How it was estimated."""


def micro_batch(batch_size: int, longest: int, max_batch_tokens: int | None) -> int:
    """The largest divisor of ``batch_size`` whose rows of ``longest`` tokens stay within ``max_batch_tokens``."""
    if max_batch_tokens is None:
        return batch_size
    bound = max(1, max_batch_tokens // max(longest, 1))
    return max(d for d in range(1, batch_size + 1) if batch_size % d == 0 and d <= bound)


def estimate_bytes(arch: Arch, parameters: int, counts: list[int], *, batch: int, full: bool, rank: int,
                   checkpointing: bool, prefix: int, width: int = 4) -> dict[str, float]:
    """The parts (bytes) of the worst step: the ``batch`` longest rows, padded to the longest."""
    longest = sorted(counts, reverse=True)[:batch]
    length = longest[0] if longest else 0
    parts = {"weights": parameters * width,
             "trainable_state": parameters * 12 if full else arch.lora_parameters(rank) * 16,
             **step_parts(arch, len(longest), length, checkpointing=checkpointing, prefix=min(prefix, length - 1)
                          if prefix and len(longest) > 1 else 0, width=width)}
    parts["overhead"] = OVERHEAD_SHARE * sum(parts.values())
    return parts


def machine_limit_gb(device: str) -> float:
    """MEMORY_SHARE of this machine's memory (the first GPU's on cuda), in GB."""
    if device == "cuda":
        import torch

        return MEMORY_SHARE * torch.cuda.get_device_properties(0).total_memory / GB
    import psutil

    return MEMORY_SHARE * psutil.virtual_memory().total / GB


def fitting_settings(arch: Arch, parameters: int, counts: list[int], config: Any, prefix: int,
                     limit_gb: float) -> list[str]:
    """Flags that bring the estimate under ``limit_gb``, cheapest first (checkpointing alone, fewer rows per pass,
    both); empty when even one row per pass with checkpointing does not fit."""
    longest = max(counts, default=1)
    found = []
    for checkpointing in (False, True):
        for rows in sorted((d for d in range(1, config.batch_size + 1) if config.batch_size % d == 0),
                           reverse=True):
            parts = estimate_bytes(arch, parameters, counts, batch=rows, full=config.full, rank=config.lora_rank,
                                   checkpointing=checkpointing, prefix=prefix if rows > 1 else 0)
            if sum(parts.values()) / GB <= limit_gb:
                flags = (["--gradient-checkpointing"] if checkpointing else []) + (
                    [f"--max-batch-tokens {rows * longest}"] if rows < config.batch_size else [])
                if flags:
                    found.append(f"{' '.join(flags)} (estimated {sum(parts.values()) / GB:.1f} GB; {rows} rows "
                                 f"per pass, {config.batch_size // rows} passes per update)")
                break
    return found


def sft_memory_estimate(model_dir: Path, parameters: int, counts: list[int], config: Any, prefix: int,
                        device: str) -> MemoryEstimate:
    """plan.json's ``memory`` for an SFT run of ``config`` on ``counts`` (tokens per row) with the base in
    ``model_dir``; ``prefix``: tokens every row shares (run once per batch under --shared-prefix)."""
    arch = Arch.read(model_dir)
    longest = max(counts, default=0)
    rows = micro_batch(config.batch_size, longest, config.max_batch_tokens)
    shared = prefix if config.shared_prefix and rows > 1 else 0
    limit = config.memory_limit_gb if config.memory_limit_gb is not None else round(machine_limit_gb(device), 2)
    parts = estimate_bytes(arch, parameters, counts, batch=rows, full=config.full, rank=config.lora_rank,
                           checkpointing=config.gradient_checkpointing, prefix=shared)
    estimate = sum(parts.values()) / GB
    fits = estimate <= limit
    return MemoryEstimate(
        device=device, limit_gb=round(limit, 2), estimate_gb=round(estimate, 2),
        parts_gb={name: round(value / GB, 3) for name, value in parts.items()}, fits=fits, micro_batch=rows,
        gradient_accumulation=config.batch_size // rows, gradient_checkpointing=config.gradient_checkpointing,
        longest_row_tokens=longest, shared_prefix_tokens=shared,
        fitting=[] if fits else fitting_settings(arch, parameters, counts, config, prefix if config.shared_prefix
                                                 else 0, limit),
        how=(f"the {rows} longest rows padded to {longest} tokens through {arch.layers} layers (hidden "
             f"{arch.hidden}, MLP {arch.intermediate}), logits of {min(LOSS_CHUNK, rows * longest)} positions x "
             f"{arch.vocab:,} vocabulary at a time, weights and optimizer state, plus {OVERHEAD_SHARE:.0%} overhead "
             "(trainers/memory_estimate.py; benchmarks/sft_memory.py measures it)"))
