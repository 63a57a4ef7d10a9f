"""The registry of training targets: ``--target`` name -> :class:`~trainers.targets.base.Target`.

Adding a target is one module and one entry in :data:`TARGETS` (and its name in :data:`TargetName`, which a
test keeps equal to the registry's keys, as the JSON Schema needs the names). :func:`unsupported` is the one
place the method/target/option rules are asked: the rules every target shares here, each target's own in its
:meth:`~trainers.targets.base.Target.refusal`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from trainers.errors import ConfigError

from .base import Target
from .local_mlx import LocalMLX
from .local_torch import LocalTorch
from .runpod import RunPod

if TYPE_CHECKING:
    from trainers.config import TrainConfig

TargetName = Literal["local-torch", "local-mlx", "runpod"]
"""The registered targets' names (``TrainConfig.target``)."""

TARGETS: dict[str, Target] = {target.name: target for target in (LocalTorch(), LocalMLX(), RunPod())}
"""Every target by name."""


def target_for(name: str) -> Target:
    """The target called ``name``; ConfigError listing the known ones otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ConfigError(f"unknown target {name!r}; targets: {', '.join(TARGETS)}") from None


def unsupported(config: TrainConfig) -> str | None:
    """Why ``config``'s method/target/option combination cannot run (with what can), or None when it can."""
    refusal = target_for(config.target).refusal(config)
    if refusal is not None:
        return refusal
    if config.shared_prefix and config.method == "sft" and config.packing:
        return ("--shared-prefix runs SFT's shared prefix once per padded batch on local-torch; drop --packing "
                "(packed rows share no prefix) or --shared-prefix, or use --target local-torch")
    if config.shared_prefix and config.gradient_checkpointing and config.method == "sft":
        return ("--shared-prefix keeps the prefix's KV cache for the batch's rows, which gradient checkpointing "
                "would drop; use one of them (plan.json's memory says what each needs)")
    if config.decision_weight != 1 and config.method == "grpo":
        return "--decision-weight weighs the SFT loss (--method sft or rft); GRPO's loss is its advantages"
    if config.method == "rft" and config.init_adapter is None:
        return ("--method rft samples episodes from an SFT policy and trains on the passed ones: pass that SFT run's "
                "export with --init-adapter (train one first with --method sft)")
    if config.method == "sft" and config.init_adapter is not None:
        return ("--method sft trains a new adapter from --base and would ignore --init-adapter: drop it, or pass "
                "the export to --method grpo or rft, which start from it")
    if config.merge and config.full:
        return "--merge merges a LoRA adapter into its base; a --full run already exports the whole model"
    return None
