"""GRPO's local-mlx half (:class:`~trainers.grpo.GRPOBackend`): mlx LoRA, a KV-cached mlx decode loop, mlx AdamW.

The loop, rewards, advantages, budgets and records are :mod:`trainers.grpo`'s, shared with
local-torch. Here:

* the policy is the base loaded by mlx-lm with LoRA on every linear layer of every block: a
  fresh, seeded adapter of ``--lora-rank``, or the warm-start export's PEFT adapter converted by
  :func:`~trainers.mlx_adapter.peft_to_mlx` (an SFT made by either target; a full export is a base
  that gets a fresh adapter);
* a turn is decoded by a small KV-cached loop (mlx-lm's prompt cache) that returns the exact token
  ids; sampling draws from an explicit ``mx.random`` key seeded with ``--seed``, never the global one;
* the update is the shared loss on those ids, one forward and backward per turn (as local-torch,
  so memory holds one sequence's activations), gradients summed, clipped at 1.0, then AdamW with
  bias correction (torch's AdamW; mlx's default leaves it off);
* the adapter is saved in mlx-lm's format (``OUT/mlx-adapter``) and as a PEFT checkpoint
  (:func:`~trainers.mlx_adapter.mlx_to_peft`), which the run skeleton exports, reloads and
  evaluates with torch, like every target. The start policy is evaluated on torch too.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .config import TrainConfig
from .formats import apply_tool_format, format_of
from .generation import Decoded, prompt_ids, stop_ids, turn_text
from .grpo import MAX_GRAD_NORM, PolicySource, Rollout, SerialPolicy, UpdateFigures, scored_turns
from .lora import mlx_lora_parameters
from .mlx_adapter import ADAPTER_CONFIG, mlx_to_peft, peft_to_mlx
from .sft_mlx import import_mlx, load_mlx_model, local_model_dir, lora_mlx_model, save_mlx_adapter


def mlx_decode(model: Any, prompt: list[int], end_ids: list[int], *, max_new_tokens: int, temperature: float,
               key: Any) -> tuple[Decoded, Any]:
    """Greedy (``temperature == 0``) or sampled decoding with a KV cache; return the turn and the next key."""
    from mlx_lm.models.cache import make_prompt_cache

    mx, _, _ = import_mlx()
    cache = make_prompt_cache(model)
    logits = model(mx.array([prompt]), cache=cache)[0, -1].astype(mx.float32)
    new_ids: list[int] = []
    finished = False
    for _ in range(max_new_tokens):
        if temperature > 0:
            key, draw = mx.random.split(key)
            token = int(mx.random.categorical(logits / temperature, key=draw).item())
        else:
            token = int(mx.argmax(logits).item())
        new_ids.append(token)
        if token in end_ids:
            finished = True
            break
        logits = model(mx.array([[token]]), cache=cache)[0, -1].astype(mx.float32)
    return Decoded(prompt_ids=list(prompt), new_ids=new_ids, finished=finished), key


class MLXSampler(SerialPolicy):
    """A sampling policy over an mlx model that keeps the exact token ids of every turn, one turn at a time.

    Each turn prefills its whole prompt (as local-torch's per-turn path did): mlx runs on Apple silicon, whose
    prefill is fast, and its CPU backend here only serves the tests.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int, temperature: float, seed: int) -> None:
        super().__init__()
        mx, _, _ = import_mlx()
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.key = mx.random.key(seed)
        self.tool_format = format_of(tokenizer)
        self.end_ids = stop_ids(tokenizer, self.tool_format)

    def turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, Decoded]:
        """Decode one turn after the whole rendered prompt, advancing the sampler's key."""
        decoded, self.key = mlx_decode(self.model, prompt_ids(self.tokenizer, messages, tools), self.end_ids,
                                       max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                       key=self.key)
        return turn_text(self.tokenizer, decoded.new_ids, self.tool_format), decoded


def load_mlx_policy(source: PolicySource, config: TrainConfig) -> tuple[Any, dict[str, Any]]:
    """(mlx model with trainable LoRA layers, its mlx-lm ``lora_parameters``) for ``source``.

    Only the LoRA matrices are trainable. A warm-start adapter keeps its own rank and scale.
    """
    from mlx_lm.tuner.utils import load_adapters

    model_dir = local_model_dir(source.base)
    if source.adapter is None:
        return lora_mlx_model(model_dir, config.seed, config.lora_rank), mlx_lora_parameters(config.lora_rank)
    model = load_mlx_model(model_dir)
    model.freeze()
    with tempfile.TemporaryDirectory(prefix="blobkit-grpo-mlx-") as scratch:
        converted = peft_to_mlx(source.adapter, Path(scratch))
        parameters = json.loads((converted / ADAPTER_CONFIG).read_text(encoding="utf-8"))["lora_parameters"]
        load_adapters(model, str(converted))
    return model, {key: value for key, value in parameters.items() if key != "keys"}


def policy_loss_and_grads(model: Any, rollouts: list[Rollout], weights: list[float]) -> tuple[float, Any, int]:
    """(loss, gradients of the LoRA matrices, n_tokens) of -sum(w * log p(generated tokens)) / n_tokens.

    The same loss as local-torch's :func:`~trainers.grpo_torch.policy_loss`, on the same token ids.
    """
    from mlx.utils import tree_map

    mx, nn, _ = import_mlx()
    turns, n_tokens = scored_turns(rollouts, weights)

    def turn_loss(model: Any, ids: Any, targets: Any, start: int, scale: float) -> Any:
        logits = model(ids[None])[0, start:].astype(mx.float32)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return -scale * mx.take_along_axis(logp, targets[:, None], axis=1).sum()

    value_and_grad = nn.value_and_grad(model, turn_loss)
    total, grads = 0.0, None
    for turn, weight in turns:
        ids = mx.array(turn.prompt_ids + turn.new_ids[:-1])
        loss, turn_grads = value_and_grad(model, ids, mx.array(turn.new_ids), len(turn.prompt_ids) - 1,
                                          weight / n_tokens)
        grads = turn_grads if grads is None else tree_map(lambda a, b: a + b, grads, turn_grads)
        mx.eval(loss, grads)
        total += float(loss.item())
    return total, grads, n_tokens


class MLXGRPOBackend:
    """Decoding and updates in mlx; the start policy is loaded on torch for the shared evaluation harness."""

    def __init__(self, config: TrainConfig, source: PolicySource) -> None:
        from transformers import AutoTokenizer

        import_mlx()
        self.config, self.source = config, source
        self.tokenizer = AutoTokenizer.from_pretrained(source.tokenizer)
        apply_tool_format(self.tokenizer, config.tool_format, where=source.tokenizer)
        self.model: Any = None
        self.parameters: dict[str, Any] = {}
        self.optimizer: Any = None

    def start_policy(self) -> tuple[Any, Any]:
        """The same start on torch (the base with the warm-start adapter, or a fresh adapter: the base itself)."""
        from .grpo_torch import load_torch_policy

        return load_torch_policy(self.source, self.config)

    def _policy(self) -> Any:
        """The mlx model, loaded on first use (after the start evaluation has let go of its torch copy)."""
        if self.model is None:
            self.model, self.parameters = load_mlx_policy(self.source, self.config)
        return self.model

    def sampler(self) -> MLXSampler:
        """Sampling at the config's temperature from an mlx key seeded with ``config.seed``."""
        config = self.config
        return MLXSampler(self._policy(), self.tokenizer, config.token_cap, config.temperature, config.seed)

    def update(self, rollouts: list[Rollout], weights: list[float]) -> UpdateFigures:
        """The policy loss's gradients, clipped at 1.0, then one AdamW step (bias-corrected, as torch's)."""
        mx, _, optim = import_mlx()
        model = self._policy()
        if self.optimizer is None:
            self.optimizer = optim.AdamW(learning_rate=self.config.learning_rate,
                                         weight_decay=self.config.weight_decay, bias_correction=True)
        loss, grads, _ = policy_loss_and_grads(model, rollouts, weights)
        if grads is None:
            return UpdateFigures(loss, None)
        grads, _ = optim.clip_grad_norm(grads, MAX_GRAD_NORM)
        self.optimizer.update(model, grads)
        mx.eval(model.trainable_parameters(), self.optimizer.state)
        return UpdateFigures(loss, None)

    def save(self, checkpoint: Path) -> None:
        """The mlx adapter in ``OUT/mlx-adapter``, converted to PEFT in ``checkpoint`` with the tokenizer."""
        native = save_mlx_adapter(self._policy(), self.config.out / "mlx-adapter",
                                  int(self.parameters["rank"]), parameters=self.parameters)
        mlx_to_peft(native, checkpoint, base_model_name_or_path=self.source.base["name_or_path"])
        self.tokenizer.save_pretrained(checkpoint)
        self.model = None
