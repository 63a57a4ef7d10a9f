"""`blobkit train --target local-mlx`: LoRA SFT with mlx / mlx-lm, exported in PEFT format.

mlx runs on Apple silicon (Metal) and, through the ``mlx[cpu]`` wheels, on Linux CPUs, which is
how this path is tested. The base is loaded from its Hugging Face directory with mlx-lm's
``load_model``; LoRA layers come from mlx-lm's tuner (``linear_to_lora_layers``: every linear layer
of every block, like PEFT's ``all-linear``). The loop itself is ours rather than mlx-lm's
``tuner.trainer.train`` because that one cannot stop at a step boundary, draws batches from the
global numpy RNG, prints a progress UI on stdout, and its ``mask_prompt`` keeps only the *last*
message in the loss: here the loss covers every assistant turn (the chat template's
``{% generation %}`` mask), as local-torch's ``assistant_only_loss`` does.

The adapter is converted to PEFT (:mod:`trainers.mlx_adapter`), exported with a manifest, reloaded
with PEFT on the torch base, and both base and adapter are evaluated by the same torch harness as
local-torch, so the two targets' numbers compare.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world_format.canonical import atomic_write_json
from world_format.kit import Kit

from .base_identity import pinned_base_path
from .budget import Budget, Log, Stop
from .chat_format import render_row
from .config import TrainConfig
from .errors import ConfigError, TargetUnavailableError, TrainerError
from .eval_record import TrainingReport
from .evaluation import EvalSummary
from .fit import FitResult
from .formats import apply_tool_format
from .grounding import with_grounding_repeats
from .lora import mlx_lora_parameters
from .mlx_adapter import ADAPTER_CONFIG, MLX_WEIGHTS, block_module, mlx_to_peft
from .plan_record import PlanRecord
from .report import sft_report

MAX_GRAD_NORM = 1.0
"""Gradient clipping, as transformers' Trainer does by default."""
PAD_MULTIPLE = 32
"""Batches are padded to a multiple of this length so the compiled step sees few shapes."""
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer.model"]


@dataclass(frozen=True)
class MLXResult:
    """What a finished mlx LoRA run reports."""

    loss_history: list[tuple[int, float]]
    optimizer_steps: int
    train_seconds: float
    adapter_dir: Path
    stopped_by: str | None = None
    """Why training stopped before its planned steps (a budget or a cancellation), else None."""


@dataclass(frozen=True)
class EncodedRow:
    """One chat row as token ids plus a 0/1 loss mask over its assistant tokens."""

    ids: list[int]
    mask: list[int]


def import_mlx() -> tuple[Any, Any, Any]:
    """``(mlx.core, mlx.nn, mlx.optimizers)`` after checking mlx computes here, else TargetUnavailableError."""
    try:
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim
        import mlx_lm  # noqa: F401
    except (ImportError, OSError) as exc:
        raise TargetUnavailableError(
            f"local-mlx needs mlx and mlx-lm, which cannot be imported here ({exc}); install them with "
            "pip install 'blobkit[mlx]' (mlx[cpu] on Linux), or train with --target local-torch") from None
    try:
        mx.eval(mx.ones((2,)) + 1)
    except (RuntimeError, ValueError, OSError) as exc:
        raise TargetUnavailableError(f"mlx cannot compute on {mx.default_device()} ({exc}); train with "
                                     "--target local-torch") from None
    return mx, nn, optim


def mlx_config_overrides(config: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys mlx-lm reads that a transformers-5 ``config.json`` keeps under ``rope_parameters``.

    mlx-lm 0.32's Qwen2/Llama read ``rope_theta`` (default 1e6) and ``rope_scaling``, not
    ``rope_parameters``: without this a model saved by transformers 5 loads with the wrong RoPE.
    """
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict) or "rope_theta" in config or "rope_theta" not in rope:
        return {}
    overrides: dict[str, Any] = {"rope_theta": float(rope["rope_theta"])}
    if rope.get("rope_type", "default") != "default" and "rope_scaling" not in config:
        overrides["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    return overrides


def load_mlx_model(model_dir: Path) -> Any:
    """The base in a Hugging Face directory (config.json + safetensors) as an mlx-lm model."""
    from mlx_lm.utils import load_model

    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    try:
        model, _ = load_model(Path(model_dir), model_config=mlx_config_overrides(config))
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"{model_dir}: mlx-lm cannot load this base ({exc}); try --target local-torch") from None
    return model


def local_model_dir(base: dict[str, Any]) -> Path:
    """The base's directory on disk: a local or registry base as is (after its sha256 check), a hub base from the
    Hugging Face cache/download."""
    if base["source"] in ("local", "registry"):
        return Path(pinned_base_path(base))
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(base["name_or_path"], revision=base.get("revision"), allow_patterns=HUB_PATTERNS))


def training_tokenizer(model_dir: Path, tool_format: str = "auto") -> Any:
    """The base tokenizer carrying its tool format's training chat template (``{% generation %}`` markers).

    ``tool_format`` is ``TrainConfig.tool_format`` (see :func:`trainers.formats.apply_tool_format`);
    ToolFormatError when no format fits the base.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    apply_tool_format(tokenizer, tool_format, where=str(model_dir))
    return tokenizer


def encode_row(tokenizer: Any, row: dict[str, Any]) -> EncodedRow:
    """Token ids of the rendered row and the template's assistant-token mask (:func:`render_row`)."""
    rendered = render_row(tokenizer, row)
    return EncodedRow(ids=rendered.ids, mask=rendered.assistant)


def encode_rows(tokenizer: Any, rows: list[dict[str, Any]], max_length: int) -> list[EncodedRow]:
    """Encode every row; an over-long row or one without assistant tokens is an error (none is dropped)."""
    encoded = [encode_row(tokenizer, row) for row in rows]
    over = [(i + 1, len(e.ids)) for i, e in enumerate(encoded) if len(e.ids) > max_length]
    if over:
        shown = ", ".join(f"row {i}: {n}" for i, n in over[:5])
        raise ConfigError(f"{len(over)} of {len(rows)} rows exceed max_length={max_length} tokens ({shown}); "
                          "raise --max-length or shorten the rows (no row is dropped silently)")
    empty = [i + 1 for i, e in enumerate(encoded) if not any(e.mask[1:])]
    if empty:
        raise ConfigError(f"rows {empty[:10]} have no assistant tokens to train on")
    return encoded


def planned_steps(rows: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps for ``epochs`` passes (last batch of an epoch may be short), as transformers counts them."""
    return max(1, math.ceil(epochs * -(-rows // batch_size)))


def batch_order(rows: int, batch_size: int, steps: int, seed: int) -> Iterator[list[int]]:
    """Row indices of each step: a fresh seeded shuffle per epoch, cut into batches."""
    rng = random.Random(seed)
    produced = 0
    while True:
        order = list(range(rows))
        rng.shuffle(order)
        for start in range(0, rows, batch_size):
            if produced == steps:
                return
            produced += 1
            yield order[start:start + batch_size]


def pad_batch(encoded: list[EncodedRow], pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Right-pad ids (with ``pad_id``) and masks (with 0) to a multiple of :data:`PAD_MULTIPLE`."""
    width = -(-max(len(e.ids) for e in encoded) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = [e.ids + [pad_id] * (width - len(e.ids)) for e in encoded]
    masks = [e.mask + [0] * (width - len(e.mask)) for e in encoded]
    return ids, masks


def _step_function(model: Any, optimizer: Any) -> Callable[[Any, Any], tuple[Any, Any]]:
    """A compiled step: masked mean cross-entropy over assistant tokens, clipped AdamW update."""
    from functools import partial

    mx, nn, optim = import_mlx()

    def loss_fn(model: Any, tokens: Any, mask: Any) -> tuple[Any, Any]:
        logits = model(tokens[:, :-1])
        weights = mask[:, 1:]
        ce = nn.losses.cross_entropy(logits, tokens[:, 1:]) * weights
        count = weights.sum()
        return ce.astype(mx.float32).sum() / count, count

    value_and_grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, optimizer.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(tokens: Any, mask: Any) -> tuple[Any, Any]:
        (loss, count), grads = value_and_grad(model, tokens, mask)
        grads, _ = optim.clip_grad_norm(grads, MAX_GRAD_NORM)
        optimizer.update(model, grads)
        return loss, count

    return step


def lora_mlx_model(model_dir: Path, seed: int, lora_rank: int) -> Any:
    """The frozen base with seeded LoRA layers on every linear layer of every block."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    mx, _, _ = import_mlx()
    model = load_mlx_model(model_dir)
    model.freeze()
    mx.random.seed(seed)
    linear_to_lora_layers(model, len(model.layers), mlx_lora_parameters(lora_rank))
    return model


def save_mlx_adapter(model: Any, out_dir: Path, lora_rank: int, *, parameters: dict[str, Any] | None = None) -> Path:
    """Write the trainable LoRA tensors and an mlx-lm adapter_config.json (loadable by ``mlx_lm.load``).

    ``parameters`` are the adapter's mlx-lm ``lora_parameters`` (rank, scale, dropout) when they are not
    blobkit's own for ``lora_rank`` (a warm-started adapter keeps its scale).
    """
    from mlx.utils import tree_flatten

    mx, _, _ = import_mlx()
    weights = dict(tree_flatten(model.trainable_parameters()))
    if not weights:
        raise TrainerError("the mlx model has no trainable LoRA tensors to save")
    keys = sorted({block_module(name.rsplit(".", 1)[0], out_dir)[1] for name in weights})
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    mx.save_safetensors(str(out_dir / MLX_WEIGHTS), weights, metadata={"format": "mlx"})
    atomic_write_json(out_dir / ADAPTER_CONFIG, {"fine_tune_type": "lora", "num_layers": -1, "lora_parameters": {
        **(parameters or mlx_lora_parameters(lora_rank)), "keys": keys}})
    return out_dir


def learning_rate_schedule(config: TrainConfig, steps: int) -> Any:
    """The learning rate per step as transformers' Trainer computes it for ``config``: linear warm-up from 0
    over ``warmup_ratio`` of the steps, then linear or cosine decay to 0, or constant."""
    _, _, optim = import_mlx()
    warmup = math.ceil(config.warmup_ratio * steps)
    rest = max(1, steps - warmup)
    if config.lr_scheduler == "linear":
        decay = optim.linear_schedule(config.learning_rate, 0.0, rest)
    elif config.lr_scheduler == "cosine":
        decay = optim.cosine_decay(config.learning_rate, rest)
    else:
        decay = lambda step: config.learning_rate  # noqa: E731 - mlx schedules are callables of the step
    if not warmup:
        return decay
    return optim.join_schedules([optim.linear_schedule(0.0, config.learning_rate, warmup), decay], [warmup])


def train_lora_mlx(model_dir: Path, rows: list[dict[str, Any]], adapter_dir: Path, config: TrainConfig, *,
                   log_every: int = 10, stop: Stop | None = None, log: Log | None = None) -> MLXResult:
    """LoRA-train the base in ``model_dir`` on ``rows`` with mlx and save the mlx adapter to ``adapter_dir``.

    The recipe is ``config``'s (epochs, learning rate, schedule and warm-up, weight decay, batch size,
    seed, rank, max length), as local-torch reads it; gradients are clipped at 1.0 as transformers'
    Trainer does. ``stop`` is polled after every optimizer step; a reason ends training at that
    boundary, the adapter trained so far is saved and the reason is ``MLXResult.stopped_by``.
    The loss history holds the mean loss of step 1 and of every ``log_every`` steps.
    """
    mx, _, optim = import_mlx()
    if not rows:
        raise ConfigError("local-mlx needs at least one training row")
    tokenizer = training_tokenizer(model_dir, config.tool_format)
    encoded = encode_rows(tokenizer, rows, config.max_length)
    model = lora_mlx_model(model_dir, config.seed, config.lora_rank)
    steps = planned_steps(len(rows), config.batch_size, config.epochs)
    optimizer = optim.AdamW(learning_rate=learning_rate_schedule(config, steps), weight_decay=config.weight_decay)
    step_fn = _step_function(model, optimizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    history: list[tuple[int, float]] = []
    window: list[float] = []
    stopped_by, done = None, 0
    model.train()
    started = time.perf_counter()
    for done, indices in enumerate(batch_order(len(rows), config.batch_size, steps, config.seed), start=1):
        ids, masks = pad_batch([encoded[i] for i in indices], pad_id)
        loss, _ = step_fn(mx.array(ids), mx.array(masks, dtype=mx.float32))
        mx.eval(model.state, optimizer.state, loss)
        window.append(float(loss.item()))
        stopped_by = stop() if stop is not None else None
        if done == 1 or done % log_every == 0 or done == steps or stopped_by:
            history.append((done, round(sum(window) / len(window), 6)))
            window = []
            if log is not None:
                log(f"step {done}/{steps}: loss {history[-1][1]:.4f}")
        if stopped_by:
            break
    seconds = time.perf_counter() - started
    save_mlx_adapter(model, adapter_dir, config.lora_rank)
    return MLXResult(loss_history=history, optimizer_steps=done, train_seconds=seconds, adapter_dir=adapter_dir,
                     stopped_by=stopped_by)


def _torch_base(model_dir: Path, tool_format: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    tokenizer = training_tokenizer(model_dir, tool_format)
    return AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True).eval(), tokenizer


def write_peft_checkpoint(result: MLXResult, checkpoint: Path, model_dir: Path, base: dict[str, Any],
                          config_json: dict[str, Any]) -> Path:
    """The PEFT adapter, the training tokenizer and the run config in ``checkpoint`` (what gets exported)."""
    if checkpoint.exists():
        shutil.rmtree(checkpoint)
    mlx_to_peft(result.adapter_dir, checkpoint, base_model_name_or_path=base["name_or_path"])
    training_tokenizer(model_dir, config_json.get("tool_format", "auto")).save_pretrained(checkpoint)
    atomic_write_json(checkpoint / "train_config.json", config_json)
    return checkpoint


class MLXSFTTrainer:
    """LoRA SFT with mlx for the run skeleton; the adapter is converted to PEFT and evaluated with torch.

    Writes the same files as local-torch plus the native adapter in ``OUT/mlx-adapter/`` (usable
    with ``mlx_lm.generate --adapter-path``).
    """

    start_label, end_label = "base", "sft"

    def __init__(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: PlanRecord) -> None:
        import_mlx()
        self.config, self.kit, self.base = config, kit, plan_record.base.to_json()
        self.rows = with_grounding_repeats(rows, config.grounding_repeats, config.answer_quote_repeats)
        self.model_dir = local_model_dir(self.base)

    def start_policy(self) -> tuple[Any, Any]:
        """The torch base (evaluated by the same harness as every target)."""
        return _torch_base(self.model_dir, self.config.tool_format)

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """mlx LoRA training, then the adapter converted to a PEFT checkpoint."""
        config = self.config
        log(f"training (mlx LoRA rank {config.lora_rank}) on {len(self.rows)} rows")
        result = train_lora_mlx(self.model_dir, self.rows, config.out / "mlx-adapter", config, stop=budget.step_stop,
                                log=log)
        checkpoint = write_peft_checkpoint(result, config.out / "checkpoint", self.model_dir, self.base,
                                           config.as_json())
        return FitResult(checkpoint, "lora", self.base, result.optimizer_steps, result.train_seconds,
                         result.loss_history, result.stopped_by)

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> TrainingReport:
        """Base and SFT on the same held-out cases (the same record as local-torch's)."""
        return sft_report(start, end, fit, self.kit.sha256)
