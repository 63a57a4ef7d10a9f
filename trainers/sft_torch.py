"""Local supervised fine-tuning with TRL's ``SFTTrainer`` (CPU or a single CUDA device).

Rows are conversational tool-calling rows (``messages`` + ``tools``; ``metadata`` is dropped).
Loss is on assistant tokens only (the chat template carries ``{% generation %}`` markers).
Every row is token-counted before training and an over-long row is an error: TRL would
otherwise truncate it, or drop it when truncation leaves no assistant token, without a word.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from world_format.canonical import atomic_write_json
from world_format.kit import Kit

from .budget import Budget, Log, Stop
from .chat_format import render_row
from .config import TrainConfig
from .errors import ConfigError, TrainerError
from .eval_record import TrainingReport
from .evaluation import EvalSummary
from .fit import FitResult
from .formats import apply_tool_format
from .grounding import with_grounding_repeats
from .lora import peft_lora_config
from .memory_estimate import micro_batch
from .plan_record import PlanRecord
from .ranks import DDP_TIMEOUT_SECONDS, World
from .report import sft_report
from .shared_prefix import NLL

TRAINING_KEYS = ("messages", "tools")


@dataclass(frozen=True)
class SFTResult:
    """What a finished SFT run reports."""

    loss_history: list[tuple[int, float]]
    optimizer_steps: int
    train_seconds: float
    output_dir: Path
    kind: Literal["lora", "full"]
    stopped_by: str | None = None
    """Why training stopped before its planned steps (a budget or a cancellation), else None."""


def _training_row(row: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(row.get("messages"), list) or not row["messages"]:
        raise ConfigError("every training row needs a non-empty 'messages' list")
    return {"messages": row["messages"], "tools": row.get("tools") or []}


def row_ids(tokenizer: Any, row: dict[str, Any]) -> list[int]:
    """The token ids the chat template gives ``row`` (as the trainer will tokenize it).

    ToolFormatError when the template refuses the row (Llama 3.x: two calls in one turn).
    """
    return render_row(tokenizer, row).ids


def count_row_tokens(tokenizer: Any, row: dict[str, Any]) -> int:
    """Number of tokens the chat template gives ``row`` (:func:`row_ids`)."""
    return len(row_ids(tokenizer, row))


def _check_lengths(tokenizer: Any, rows: list[dict[str, Any]], max_length: int) -> list[int]:
    counts = [count_row_tokens(tokenizer, row) for row in rows]
    over = [(i, n) for i, n in enumerate(counts) if n > max_length]
    if over:
        shown = ", ".join(f"row {i}: {n}" for i, n in over[:5])
        more = f" and {len(over) - 5} more" if len(over) > 5 else ""
        raise ConfigError(
            f"{len(over)} of {len(rows)} rows exceed max_length={max_length} tokens ({shown}{more}); "
            "raise max_length or shorten the rows (no row is dropped silently)"
        )
    return counts


def rows_to_dataset(rows: list[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of the rows' ``messages`` and ``tools`` (``metadata`` dropped) as Json features.

    Arrow struct inference would unify the keys of differently-shaped tool schemas and
    tool-call arguments across rows; Json columns keep every row exactly as given.
    """
    from datasets import Dataset, Features, Json

    return Dataset.from_list(
        [_training_row(r) for r in rows], features=Features({"messages": Json(), "tools": Json()})
    )


def canonicalise_adapter_config(path: Path) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    targets = config.get("target_modules")
    if isinstance(targets, list):
        config["target_modules"] = sorted(targets)
    atomic_write_json(path, config)


def _loss_in_progress_bar(progress_callback: type) -> Any:
    """transformers' progress bar, with the latest loss in the bar instead of one printed dict per log step."""

    class LossInProgressBar(progress_callback):  # type: ignore[misc,valid-type]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if self.training_bar is not None and logs and "loss" in logs:
                self.training_bar.set_postfix(loss=f"{float(logs['loss']):.4f}", refresh=False)

    return LossInProgressBar()


def _assistant_token_loss(sft_trainer: type, shared_prefix: bool = False, decision_weight: float = 1.0) -> type:
    """``sft_trainer`` whose loss sends only the labelled (assistant) positions through the LM head.

    TRL's fused LM head scores only labelled positions on Triton devices; elsewhere it scores
    every position, padding and prompt included, in chunks, plus entropy for its metrics. On a
    CPU that head was 28% of a tiny-model step. This loss is the same quantity (summed negative
    log-likelihood of the labelled next tokens over ``num_items_in_batch``, or over their count),
    equal to TRL's to float rounding; it keeps TRL's ``mean_token_accuracy`` and ``num_tokens``
    metrics and drops ``entropy``. Logits exist for one chunk of labelled positions at a time
    (:func:`trainers.shared_prefix.labelled_nll`). ``shared_prefix``: the batch's shared prefix runs once
    (:mod:`trainers.shared_prefix`), the same loss and gradients. ``decision_weight`` above 1: the first trained
    tokens of each assistant turn weigh that much (:mod:`trainers.turn_weights`).
    """
    from .shared_prefix import shared_prefix_nll
    from .turn_weights import turn_start_weights

    class AssistantTokenLoss(sft_trainer):  # type: ignore[misc,valid-type]
        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            if return_outputs:
                return super().compute_loss(model, inputs, return_outputs=True,
                                            num_items_in_batch=num_items_in_batch)
            causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
            ids, mask, labels = inputs["input_ids"], inputs.get("attention_mask"), inputs["labels"]
            weights = turn_start_weights(labels, decision_weight) if decision_weight != 1 else None
            if "position_ids" in inputs or not shared_prefix:  # packed rows carry position ids: nothing is shared
                nll = _plain_nll(causal_lm, inputs, weights)
            else:
                nll, _ = shared_prefix_nll(causal_lm, ids, mask, labels, weights=weights)
            loss = nll.total / (max(nll.count, 1) if num_items_in_batch is None else num_items_in_batch)
            mode = "train" if model.training else "eval"
            self._metrics[mode]["mean_token_accuracy"].append(nll.correct / max(nll.count, 1))
            if mode == "train":
                self._total_train_tokens += int(mask.sum()) if mask is not None else int(ids.numel())
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return loss

    return AssistantTokenLoss


def _plain_nll(causal_lm: Any, inputs: dict[str, Any], weights: Any | None = None) -> NLL:
    """The padded (or packed) batch's :class:`~trainers.shared_prefix.NLL`, every row run whole (``weights``:
    per-position loss weights aligned with the labels, or None)."""
    from .shared_prefix import labelled_nll

    model_inputs = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
    hidden = causal_lm.base_model(**model_inputs, use_cache=False).last_hidden_state[:, :-1]
    next_tokens = inputs["labels"][:, 1:]
    labelled = next_tokens != -100
    return labelled_nll(causal_lm.get_output_embeddings(), hidden[labelled], next_tokens[labelled],
                        weights=None if weights is None else weights[:, 1:][labelled])


def _sft_arguments(config: TrainConfig, scratch: str, *, max_steps: int | None, progress: bool, log_every: int,
                   cuda: bool, bf16: bool, world: World, rows_per_pass: int | None = None) -> Any:
    """TRL's ``SFTConfig`` for ``config``: assistant-only loss, no checkpoints, CPU-friendly defaults.

    Over ``world.size`` ranks each takes ``batch_size / size`` rows a step, so the global batch (and with it
    the steps and the learning-rate schedule) is one process's; gloo on a CPU, nccl on CUDA. ``rows_per_pass``
    (:func:`trainers.memory_estimate.micro_batch`): at most this many rows per forward pass (the largest divisor
    of a rank's rows that fits), with gradient accumulation making up the rank's rows per optimizer update."""
    per_rank = config.batch_size // world.size
    micro = max(d for d in range(1, per_rank + 1) if per_rank % d == 0 and d <= (rows_per_pass or per_rank))
    from trl import SFTConfig

    return SFTConfig(
        output_dir=scratch,
        num_train_epochs=float(config.epochs),
        max_steps=max_steps if max_steps is not None else -1,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_rank // micro,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        # transformers 5 dropped ``warmup_ratio``: a float in [0, 1) for ``warmup_steps`` is a ratio.
        warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay,
        optim="adamw_torch",
        seed=config.seed,
        data_seed=config.seed,
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        # TRL defaults ``gradient_checkpointing=True``; transformers 5 renamed it, and only setting the
        # new name both turns it off and avoids the deprecation warning.
        activation_checkpointing=config.gradient_checkpointing,
        max_length=config.max_length,
        packing=config.packing,
        train_sampling_strategy="group_by_length" if config.group_by_length and not config.packing else "random",
        assistant_only_loss=True,
        logging_strategy="steps",
        logging_steps=max(1, log_every),
        logging_first_step=True,
        save_strategy="no",
        report_to="none",
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,
        dataset_num_proc=None,
        ddp_backend="gloo" if world.distributed and not cuda else None,
        ddp_timeout=DDP_TIMEOUT_SECONDS,
    )


def _recorders(stop: Stop | None) -> tuple[list[Any], list[tuple[int, float]], list[str]]:
    """Callbacks that record the loss and poll ``stop`` after every step, with the lists they fill."""
    from transformers import TrainerCallback

    losses: list[tuple[int, float]] = []
    stopped: list[str] = []

    class _LossRecorder(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append((int(state.global_step), float(logs["loss"])))

    class _StopHook(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            reason = stop() if stop is not None else None
            if reason:
                stopped.append(reason)
                control.should_training_stop = True

    return [_LossRecorder(), _StopHook()], losses, stopped


def loss_log(log: Log) -> Any:
    """A callback that logs ``step N/M: loss X`` each time the trainer records the loss (as the mlx trainer
    prints it), so a job's progress events carry the loss per step while SFT runs."""
    from transformers import TrainerCallback

    class _LossLog(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                log(f"step {int(state.global_step)}/{int(state.max_steps)}: loss {float(logs['loss']):.4f}")

    return _LossLog()


def _save(trained: Any, tokenizer: Any, out_dir: Path, lora: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    trained.save_pretrained(out_dir, safe_serialization=True)
    if lora:
        adapter_config = out_dir / "adapter_config.json"
        if not (out_dir / "adapter_model.safetensors").is_file() or not adapter_config.is_file():
            raise TrainerError(f"the LoRA adapter was not written to {out_dir}")
        canonicalise_adapter_config(adapter_config)
    tokenizer.save_pretrained(out_dir)


def _check_run(rows: list[dict[str, Any]], config: TrainConfig, max_steps: int | None) -> World:
    """ConfigError for no rows, a ``max_steps`` below 1 or a batch that does not split over the ranks."""
    if not rows:
        raise ConfigError("train_sft needs at least one row")
    if max_steps is not None and max_steps < 1:
        raise ConfigError("max_steps must be >= 1 when given")
    world = World.from_env()
    if config.batch_size % world.size:
        raise ConfigError(f"--batch-size {config.batch_size} does not split over {world.size} processes")
    return world


def train_sft(
    model_dir: Path,
    rows: list[dict[str, Any]],
    out_dir: Path,
    config: TrainConfig,
    *,
    max_steps: int | None = None,
    progress: bool = True,
    log_every: int = 10,
    callbacks: Sequence[Any] = (),
    stop: Stop | None = None,
) -> SFTResult:
    """Fine-tune the model in ``model_dir`` on ``rows`` as ``config`` says; save the result to ``out_dir``.

    ``config.full`` false trains and saves a LoRA adapter (``adapter_model.safetensors`` + canonical
    ``adapter_config.json``); true trains all weights and saves the full model with safetensors. The
    tokenizer is always saved next to it. The recipe comes from ``config`` alone (epochs, learning
    rate and schedule, batch size, seed, rank, max length, packing, grouping); the keyword
    arguments only observe or shorten the run: ``max_steps`` (when given) overrides the epochs,
    ``progress`` shows transformers' bar with the loss in it, ``log_every`` is the loss-recording
    interval, ``callbacks`` are extra ``transformers.TrainerCallback`` objects. ``stop`` is polled
    after every optimizer step; when it returns a reason, training ends at that step boundary,
    the model trained so far is saved, and the reason is ``SFTResult.stopped_by``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_run(rows, config, max_steps)
    lora, model_dir = not config.full, Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    apply_tool_format(tokenizer, config.tool_format, where=str(model_dir))
    counts = _check_lengths(tokenizer, rows, config.max_length)
    bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, use_safetensors=True, dtype=torch.bfloat16 if bf16 and lora else torch.float32)
    return _fit(model, tokenizer, rows, counts, Path(out_dir), config, lora=lora,
                peft_config=peft_lora_config(config.lora_rank) if lora else None, max_steps=max_steps,
                progress=progress, log_every=log_every, callbacks=callbacks, stop=stop)


def fit_rows(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    out_dir: Path,
    config: TrainConfig,
    *,
    max_steps: int | None = None,
    progress: bool = True,
    log_every: int = 10,
    callbacks: Sequence[Any] = (),
    stop: Stop | None = None,
) -> SFTResult:
    """:func:`train_sft`'s training on a model already loaded: a PEFT model goes on training its adapter (RFT from an
    SFT export's adapter), a plain model trains every weight. ``tokenizer`` carries the tool format the rows are
    rendered in; the recipe and the keyword arguments are :func:`train_sft`'s, and so are the checks and the save."""
    from peft import PeftModel

    _check_run(rows, config, max_steps)
    counts = _check_lengths(tokenizer, rows, config.max_length)
    return _fit(model, tokenizer, rows, counts, Path(out_dir), config, lora=isinstance(model, PeftModel),
                peft_config=None, max_steps=max_steps, progress=progress, log_every=log_every, callbacks=callbacks,
                stop=stop)


def _fit(model: Any, tokenizer: Any, rows: list[dict[str, Any]], counts: list[int], out_dir: Path,
         config: TrainConfig, *, lora: bool, peft_config: Any, max_steps: int | None, progress: bool, log_every: int,
         callbacks: Sequence[Any], stop: Stop | None) -> SFTResult:
    """TRL's SFTTrainer on checked rows (``counts``: their tokens); the result saved to ``out_dir`` by rank 0."""
    import torch
    from transformers.trainer_callback import ProgressCallback
    from trl import SFTTrainer

    world, cuda = World.from_env(), torch.cuda.is_available()
    bf16 = bool(cuda and torch.cuda.is_bf16_supported())
    recorders, losses, stopped = _recorders(stop)
    with tempfile.TemporaryDirectory(prefix="blobkit-sft-") as scratch:
        args = _sft_arguments(config, scratch, max_steps=max_steps, progress=progress, log_every=log_every,
                              cuda=cuda, bf16=bf16, world=world,
                              rows_per_pass=micro_batch(config.batch_size, max(counts), config.max_batch_tokens))
        # On CUDA, TRL's own fused head already scores only labelled positions (Triton) and avoids
        # materialising vocabulary-wide logits; on a CPU the compact loss is ~1.4x faster per step. Over several
        # ranks the forward must go through DDP's wrapper (its gradient hooks), which the compact loss bypasses
        # (local-torch refuses --shared-prefix with --processes).
        if world.distributed:
            trainer_class = SFTTrainer
        else:
            custom = config.shared_prefix or config.decision_weight != 1 or not cuda
            trainer_class = (_assistant_token_loss(SFTTrainer, config.shared_prefix, config.decision_weight) if custom
                             else SFTTrainer)
        trainer = trainer_class(model=model, args=args, train_dataset=rows_to_dataset(rows), processing_class=tokenizer,
                                peft_config=peft_config, callbacks=[*recorders, *callbacks])
        if progress:
            trainer.remove_callback(ProgressCallback)
            trainer.add_callback(_loss_in_progress_bar(ProgressCallback))
        if not config.packing and len(trainer.train_dataset) != len(rows):
            raise TrainerError(f"the trainer kept {len(trainer.train_dataset)} of {len(rows)} rows after preparation")
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    if world.is_main:
        _save(trainer.model, tokenizer, out_dir, lora)
    return SFTResult(loss_history=losses, optimizer_steps=int(trainer.state.global_step), train_seconds=seconds,
                     output_dir=out_dir, kind="lora" if lora else "full", stopped_by=stopped[0] if stopped else None)


class TorchSFTTrainer:
    """SFT on local-torch for the run skeleton: the base is the start policy, :func:`train_sft` the fit."""

    start_label, end_label = "base", "sft"

    def __init__(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: PlanRecord) -> None:
        self.config, self.kit, self.base = config, kit, plan_record.base.to_json()
        self.rows = with_grounding_repeats(rows, config.grounding_repeats, config.answer_quote_repeats)

    def start_policy(self) -> tuple[Any, Any]:
        """The base model and its tokenizer."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = self.base["name_or_path"]
        tokenizer = AutoTokenizer.from_pretrained(path)
        apply_tool_format(tokenizer, self.config.tool_format, where=path)
        return AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval(), tokenizer

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """Train every weight or a LoRA adapter; the checkpoint also holds the resolved config."""
        config = self.config
        log(f"training ({'full weights' if config.full else f'LoRA rank {config.lora_rank}'}) on "
            f"{len(self.rows)} examples")
        checkpoint = config.out / "checkpoint"
        result = train_sft(Path(self.base["name_or_path"]), self.rows, checkpoint, config, stop=budget.step_stop,
                           callbacks=[loss_log(log)])
        if World.from_env().is_main:
            atomic_write_json(checkpoint / "train_config.json", config.as_json())
        return FitResult(checkpoint, result.kind, self.base, result.optimizer_steps, result.train_seconds,
                         result.loss_history, result.stopped_by)

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> TrainingReport:
        """Base and SFT on the same held-out cases."""
        return sft_report(start, end, fit, self.kit.sha256)
