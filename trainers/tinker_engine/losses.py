"""The loss functions of the Tinker API, by name (one registry; a loss is one function plus one line here).

Each takes the target-token log-probabilities under the current weights (``(T,)``, with grad) and
the example's loss inputs, and returns the per-position loss terms ``(T,)``; the example's loss is
their sum, and a batch's loss is the sum over its examples (Tinker's convention: no mean). Formulas
as Tinker documents them (https://tinker-docs.thinkingmachines.ai/losses):

- ``cross_entropy``: ``-weights * logp`` (inputs ``target_tokens``, ``weights``);
- ``importance_sampling``: ``-exp(logp - sampler_logp) * advantages`` (inputs ``target_tokens``,
  ``logprobs`` from the sampler, ``advantages``);
- ``ppo``: ``-min(ratio * A, clip(ratio, low, high) * A)`` with ``ratio = exp(logp - sampler_logp)``
  and ``low``/``high`` from ``loss_fn_config`` (``clip_low_threshold`` 0.8, ``clip_high_threshold`` 1.2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainers.errors import ConfigError

LossFn = Callable[[Any, Mapping[str, Any], Mapping[str, float]], Any]
"""(logp ``(T,)``, loss inputs as torch tensors ``(T,)``, loss config) → per-position loss ``(T,)``."""

REQUIRED: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens",),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}
"""Loss inputs each loss needs (``weights`` defaults to ones for cross_entropy)."""

PPO_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


def cross_entropy(logp: Any, inputs: Mapping[str, Any], config: Mapping[str, float]) -> Any:
    """``-weights * logp`` (weights default to 1 at every position)."""
    import torch

    weights = inputs.get("weights")
    return -(logp * (weights if weights is not None else torch.ones_like(logp)))


def importance_sampling(logp: Any, inputs: Mapping[str, Any], config: Mapping[str, float]) -> Any:
    """``-exp(logp - sampler_logp) * advantages``: REINFORCE corrected for the sampler's distribution."""
    import torch

    return -(torch.exp(logp - inputs["logprobs"]) * inputs["advantages"])


def ppo(logp: Any, inputs: Mapping[str, Any], config: Mapping[str, float]) -> Any:
    """The clipped surrogate, token-wise, with the ratio clipped to [clip_low_threshold, clip_high_threshold]."""
    import torch

    low = float(config.get("clip_low_threshold", PPO_DEFAULTS["clip_low_threshold"]))
    high = float(config.get("clip_high_threshold", PPO_DEFAULTS["clip_high_threshold"]))
    if not 0 < low <= 1 <= high:
        raise ConfigError(f"ppo needs 0 < clip_low_threshold <= 1 <= clip_high_threshold, got {low} and {high}")
    ratio = torch.exp(logp - inputs["logprobs"])
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, torch.clamp(ratio, low, high) * advantages)


LOSSES: dict[str, LossFn] = {"cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo}
"""Every loss the engine runs, by its Tinker name."""
