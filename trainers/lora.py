"""The LoRA adapter every target trains: all linear layers of every block, alpha twice the rank, no dropout.

PEFT (local-torch, GRPO) and mlx-lm (local-mlx) build it from these constants, so an adapter
trained on one target means the same on the other (see :mod:`trainers.mlx_adapter`).
"""

from __future__ import annotations

from typing import Any

ALPHA_PER_RANK = 2
"""``lora_alpha = ALPHA_PER_RANK * r``: the update is scaled by alpha / r = 2 (mlx-lm calls it ``scale``)."""
MLX_SCALE = float(ALPHA_PER_RANK)
"""mlx-lm's ``scale`` for the same adapter (``lora_alpha / r``)."""


def peft_lora_config(rank: int) -> Any:
    """The ``peft.LoraConfig`` of a blobkit adapter of rank ``rank`` (PEFT's ``all-linear`` targets)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=ALPHA_PER_RANK * rank, target_modules="all-linear", task_type="CAUSAL_LM",
                      lora_dropout=0.0)


def mlx_lora_parameters(rank: int) -> dict[str, Any]:
    """mlx-lm's ``lora_parameters`` for the same adapter."""
    return {"rank": rank, "scale": MLX_SCALE, "dropout": 0.0}
