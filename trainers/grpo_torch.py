"""GRPO's local-torch half (:class:`~trainers.grpo.GRPOBackend`): PEFT LoRA, batched KV-cached decoding, AdamW.

The loop, rewards, advantages, budgets and records are :mod:`trainers.grpo`'s; this module only
decodes turns (:class:`~trainers.episode_decode.ModelTurns`, keeping their token ids) and applies the
policy-gradient update in torch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .base_identity import pinned_base_path
from .config import TrainConfig
from .episode_decode import ModelTurns
from .formats import apply_tool_format, format_of
from .grpo import MAX_GRAD_NORM, PolicySource, Rollout, UpdateFigures, scored_turns
from .lora import peft_lora_config
from .ranks import World, all_reduce_gradients, gather
from .sft_torch import canonicalise_adapter_config
from .vllm_turns import VLLMTurns


def policy_loss(model: Any, rollouts: list[Rollout], weights: list[float],
                total_tokens: int | None = None, start: StartPolicy | None = None,
                kl_coef: float = 0.0) -> tuple[Any, int, float | None]:
    """Backpropagate -sum(w * log p(generated tokens)) / n_tokens; return (loss, n_tokens, the k3 sum or None).

    ``total_tokens`` (the generated tokens of every rank's rollouts) replaces this process's count as the
    denominator, so the ranks' summed gradients are one process's. With ``start`` and ``kl_coef`` > 0, each
    token also adds ``kl_coef`` x k3(policy || start) / n_tokens (:func:`k3`), and the third item is the sum of
    k3 over this process's tokens (None without the term). One forward and backward per turn, so memory holds one
    sequence's activations at a time.
    """
    import torch

    device = next(model.parameters()).device
    turns, n_tokens = scored_turns(rollouts, weights)
    n_tokens = n_tokens if total_tokens is None else total_tokens
    total = torch.zeros((), device=device)
    start = start if kl_coef else None
    divergence = 0.0
    for turn, weight in turns:
        ids = torch.tensor([turn.prompt_ids + turn.new_ids], device=device)
        # the start's forward swaps weights in place: it runs before the policy's graph holds them
        reference = None if start is None else start.token_logprobs(ids, len(turn.prompt_ids))
        chosen = token_logprobs(model, ids, len(turn.prompt_ids))
        loss = -weight * chosen.sum() / n_tokens
        if reference is not None:
            apart = k3(chosen, reference).sum()
            loss = loss + kl_coef * apart / n_tokens
            divergence += float(apart.detach())
        loss.backward()
        total = total + loss.detach()
    return total, n_tokens, None if start is None else divergence


def token_logprobs(model: Any, ids: Any, prompt_length: int) -> Any:
    """log p of each token of ``ids`` (shape [1, L]) after the first ``prompt_length``: shape [L - prompt_length]."""
    import torch

    logits = model(input_ids=ids).logits[0, prompt_length - 1:-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, ids[0, prompt_length:, None])[:, 0]


def k3(policy: Any, start: Any) -> Any:
    """Per-token k3 estimate of KL(policy || start) from the sampled tokens' log-probs (equal shapes):
    exp(r) - r - 1 with r = start - policy. Non-negative, 0 where the two agree, and its gradient (through
    ``policy`` only) pulls the policy's log-probs towards the start's."""
    ratio = start - policy
    return ratio.exp() - ratio - 1


class StartPolicy:
    """The LoRA weights the policy started from, swapped in (without gradients) to score tokens under them.

    Holds a copy of every trainable parameter (the adapter: a few MB for rank 16 on a 135M base); scoring costs one
    forward without gradients, the weights swapped in and back around it.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.weights = [p.detach().clone() for p in self.params]

    def token_logprobs(self, ids: Any, prompt_length: int) -> Any:
        """:func:`token_logprobs` under the start weights (no gradient); the current weights are restored."""
        import torch

        with torch.no_grad():
            current = [p.detach().clone() for p in self.params]
            try:
                for p, weight in zip(self.params, self.weights, strict=True):
                    p.copy_(weight)
                return token_logprobs(self.model, ids, prompt_length)
            finally:
                for p, weight in zip(self.params, current, strict=True):
                    p.copy_(weight)


def load_torch_policy(source: PolicySource, config: TrainConfig) -> tuple[Any, Any]:
    """(trainable PEFT model, tokenizer): the source's adapter, or a fresh LoRA seeded with ``config.seed``.

    The tokenizer carries the tool format ``config.tool_format`` chooses (an export keeps its own under ``auto``).
    """
    import torch
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.tokenizer)
    apply_tool_format(tokenizer, config.tool_format, where=source.tokenizer)
    model = AutoModelForCausalLM.from_pretrained(pinned_base_path(source.base), use_safetensors=True,
                                                 revision=source.revision)
    if source.adapter is not None:
        return PeftModel.from_pretrained(model, source.adapter, is_trainable=True), tokenizer
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return get_peft_model(model, peft_lora_config(config.lora_rank)), tokenizer


class TorchGRPOBackend:
    """Decoding and updates in torch on one PEFT model, which is also the start policy."""

    def __init__(self, config: TrainConfig, source: PolicySource) -> None:
        self.config, self.source = config, source
        self.model, self.tokenizer = load_torch_policy(source, config)
        self.optimizer: Any = None
        self.vllm: VLLMTurns | None = None
        self.start = StartPolicy(self.model) if config.kl_coef else None
        self.scratch: tempfile.TemporaryDirectory[str] | None = None

    def start_policy(self) -> tuple[Any, Any]:
        """The model GRPO trains, before any update."""
        return self.model, self.tokenizer

    def sampler(self) -> ModelTurns | VLLMTurns:
        """Sampling at the config's temperature from a torch generator seeded with ``config.seed``; a step's
        episodes are decoded ``config.episode_batch`` at a time. With ``--generator vllm``, vLLM writes the turns
        (:class:`~trainers.vllm_turns.VLLMTurns`) with the adapter as it stands, reloaded after every update."""
        import torch

        config = self.config
        if config.local_torch.generator == "vllm":
            return self._vllm_sampler()
        # every rank samples its own episodes: one seed each (rank 0's is a single process's)
        seed = config.seed + World.from_env().rank
        return ModelTurns(self.model, self.tokenizer, config.token_cap, config.temperature,
                          torch.Generator().manual_seed(seed), slots=config.episode_batch,
                          tool_format=format_of(self.tokenizer))

    def update(self, rollouts: list[Rollout], weights: list[float]) -> UpdateFigures:
        """Zero the gradients, backpropagate the policy loss (with ``kl_coef``'s penalty towards the start policy),
        clip at 1.0, one AdamW step.

        Over several ranks the loss is over every rank's generated tokens and the gradients are summed before
        the clip, so every rank applies the same step; the loss returned is the whole step's, the KL its mean k3
        per generated token over every rank's tokens (None without ``kl_coef``)."""
        import torch

        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(trainable, lr=self.config.learning_rate,
                                               weight_decay=self.config.weight_decay)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(gather(scored_turns(rollouts, weights)[1]))
        loss, _, divergence = policy_loss(self.model, rollouts, weights, total, self.start, self.config.kl_coef)
        all_reduce_gradients(trainable)
        torch.nn.utils.clip_grad_norm_(trainable, MAX_GRAD_NORM)
        self.optimizer.step()
        if self.vllm is not None:
            self.vllm.load_adapter(self._adapter_snapshot())
        kl = None if divergence is None else sum(gather(divergence)) / total
        return UpdateFigures(float(sum(gather(float(loss)))), kl)

    def _adapter_snapshot(self) -> Path:
        """The adapter as it stands, saved for vLLM to load (a new folder per update)."""
        if self.scratch is None:
            self.scratch = tempfile.TemporaryDirectory(prefix="blobkit-vllm-adapter-")
        path = Path(self.scratch.name) / f"update-{self.vllm.adapter_loads if self.vllm else 0}"
        self.model.save_pretrained(path, safe_serialization=True)
        return path

    def _vllm_sampler(self) -> VLLMTurns:
        """vLLM's engine over the policy's base, generating with the adapter the policy starts from."""
        from .base_identity import pinned_base_path

        config = self.config
        self.vllm = VLLMTurns(str(pinned_base_path(self.source.base)), self.tokenizer,
                              max_new_tokens=config.token_cap, temperature=config.temperature,
                              seed=config.seed, slots=config.episode_batch,
                              max_lora_rank=int(self.model.peft_config["default"].r))
        self.vllm.load_adapter(self._adapter_snapshot())
        return self.vllm

    def save(self, checkpoint: Path) -> None:
        """The PEFT adapter (target modules sorted) and the tokenizer; the model is released afterwards."""
        self.model.save_pretrained(checkpoint, safe_serialization=True)
        canonicalise_adapter_config(checkpoint / "adapter_config.json")
        self.tokenizer.save_pretrained(checkpoint)
        del self.model
