"""How much unified memory a local-mlx run needs on Apple silicon, estimated before anything loads (plan.json).

mlx keeps everything in the Mac's unified memory: the base weights in the dtype they are stored
in, the LoRA matrices with their gradients and AdamW moments (float32), and the working memory of
one step. GRPO decodes one turn at a time (a KV cache of up to ``max_length`` tokens) and
backpropagates one turn at a time (:mod:`trainers.grpo_mlx`); SFT backpropagates a batch.

* A catalog base: the catalog's figure for the method (LoRA, bf16, 4k tokens, one sequence), which
  counts the same weights, activations and LoRA state.
* A local base: its safetensors bytes, plus a count from its ``config.json`` at ``max_length``
  tokens: the KV cache (GRPO), saved activations of the backward pass (8 x hidden + 3 x
  intermediate values per token and layer), float32 logits with their log-softmax and gradient
  (3 x vocab per token), and 16 bytes per LoRA parameter.

Both are estimates (no framework overhead, no other apps); ``mac_memory_gb`` leaves 30% of the
machine to macOS and everything else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .catalog import ResolvedBase
from .config import TrainConfig
from .plan_record import UnifiedMemory

MAC_SHARE = 0.7
"""Plan to use at most this share of a Mac's unified memory for training."""
GB = 1e9
_HALF = {"bfloat16", "float16"}


def _local_parts(model_dir: Path, config: TrainConfig) -> dict[str, float]:
    """The estimate's parts (GB) for a local base, from its files and ``config.json``."""
    weights = sum(path.stat().st_size for path in model_dir.glob("*.safetensors"))
    try:
        arch = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        layers, hidden, inter = arch["num_hidden_layers"], arch["hidden_size"], arch["intermediate_size"]
        heads, vocab = arch["num_attention_heads"], arch["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return {"weights": weights / GB, "working (unknown architecture: half the weights)": weights / 2 / GB}
    kv_heads = arch.get("num_key_value_heads") or heads
    head_dim = arch.get("head_dim") or hidden // heads
    width = 2 if str(arch.get("dtype") or arch.get("torch_dtype")) in _HALF else 4
    tokens, sequences = config.max_length, 1 if config.method == "grpo" else config.batch_size
    lora_per_layer = (2 * (hidden + heads * head_dim) + 2 * (hidden + kv_heads * head_dim) + 3 * (hidden + inter))
    return {
        "weights": weights / GB,
        "kv_cache": (2 * layers * kv_heads * head_dim * tokens * width / GB) if config.method == "grpo" else 0.0,
        "activations": sequences * layers * tokens * (8 * hidden + 3 * inter) * width / GB,
        "logits": sequences * tokens * vocab * 4 * 3 / GB,
        "lora_state": 16 * config.lora_rank * layers * lora_per_layer / GB,
    }


def unified_memory_estimate(base: ResolvedBase, config: TrainConfig) -> UnifiedMemory:
    """plan.json's ``unified_memory``: the estimate, the Mac it suggests, and how it was estimated."""
    if base.entry is not None:
        estimate = float(base.vram_estimate_gb(config.method) or 0)
        how = (f"the catalog's figure for LoRA {config.method.upper()} on {base.entry.id} (bf16 weights, 4k tokens, "
               "one sequence per forward and backward): mlx holds the same weights, activations and LoRA state in "
               "unified memory")
        parts: dict[str, float] = {}
    else:
        parts = _local_parts(Path(base.name_or_path), config)
        estimate = sum(parts.values())
        how = (f"the base's safetensors plus, at max_length {config.max_length} tokens, the KV cache, saved "
               "activations, float32 logits and the LoRA state (see trainers/memory.py)")
    return UnifiedMemory(
        estimate_gb=round(estimate, 2), mac_memory_gb=max(8, math.ceil(estimate / MAC_SHARE)),
        how=how + f"; mac_memory_gb keeps the estimate under {MAC_SHARE:.0%} of the Mac (8 GB at least)",
        parts_gb={name: round(value, 3) for name, value in parts.items()} if parts else None)
