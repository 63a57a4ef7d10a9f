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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from blobkit.canonical import atomic_write_json
from blobkit.errors import ConfigError, TrainerError

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


def count_row_tokens(tokenizer: Any, row: dict[str, Any]) -> int:
    """Number of tokens the chat template gives ``row`` (as the trainer will tokenize it)."""
    clean = _training_row(row)
    ids = tokenizer.apply_chat_template(
        clean["messages"], tools=clean["tools"] or None, tokenize=True, return_dict=False
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)


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


def _canonicalise_adapter_config(path: Path) -> None:
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


def _assistant_token_loss(sft_trainer: type) -> type:
    """``sft_trainer`` whose loss sends only the labelled (assistant) positions through the LM head.

    TRL's fused LM head scores only labelled positions on Triton devices; elsewhere it scores
    every position, padding and prompt included, in chunks, plus entropy for its metrics. On a
    CPU that head was 28% of a tiny-model step. This loss is the same quantity (summed negative
    log-likelihood of the labelled next tokens over ``num_items_in_batch``, or over their count),
    equal to TRL's to float rounding; it keeps TRL's ``mean_token_accuracy`` and ``num_tokens``
    metrics and drops ``entropy``. It materialises ``labelled tokens x vocabulary`` logits, so it
    is meant for CPU runs (small models), not for a 150k vocabulary on a GPU.
    """
    import torch
    import torch.nn.functional as F

    class AssistantTokenLoss(sft_trainer):  # type: ignore[misc,valid-type]
        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            if return_outputs:
                return super().compute_loss(model, inputs, return_outputs=True,
                                            num_items_in_batch=num_items_in_batch)
            causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
            model_inputs = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
            hidden = causal_lm.base_model(**model_inputs, use_cache=False).last_hidden_state[:, :-1]
            next_tokens = inputs["labels"][:, 1:]
            labelled = next_tokens != -100
            logits = causal_lm.get_output_embeddings()(hidden[labelled]).float()
            targets = next_tokens[labelled]
            count = labelled.sum()
            loss = F.cross_entropy(logits, targets, reduction="sum") / (
                count.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            )
            mode = "train" if model.training else "eval"
            with torch.no_grad():
                correct = (logits.argmax(-1) == targets).sum()
                self._metrics[mode]["mean_token_accuracy"].append(float(correct) / max(int(count), 1))
            if mode == "train":
                mask = inputs.get("attention_mask")
                self._total_train_tokens += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return loss

    return AssistantTokenLoss


def train_sft(
    model_dir: Path,
    rows: list[dict[str, Any]],
    out_dir: Path,
    *,
    epochs: float,
    learning_rate: float,
    batch_size: int,
    seed: int,
    lora: bool,
    lora_rank: int,
    lora_alpha: int | None = None,
    max_length: int = 1024,
    packing: bool = False,
    group_by_length: bool = False,
    max_steps: int | None = None,
    progress: bool = True,
    log_every: int = 10,
    lr_scheduler_type: str = "linear",
    warmup_ratio: float = 0.0,
    weight_decay: float = 0.0,
    callbacks: Sequence[Any] = (),
    stop: Callable[[], str | None] | None = None,
) -> SFTResult:
    """Fine-tune the model in ``model_dir`` on ``rows`` and save the result to ``out_dir``.

    ``lora=True`` trains and saves a LoRA adapter (``adapter_model.safetensors`` +
    canonical ``adapter_config.json``); ``lora=False`` trains all weights and saves the full
    model with safetensors. The tokenizer is always saved next to it. ``max_steps`` (when
    given) overrides ``epochs``. ``group_by_length`` (ignored when packing) batches rows of
    similar token length together — seeded megabatches of 50 batches, sorted within — so a batch
    pads to little more than its own rows. ``callbacks`` are extra ``transformers.TrainerCallback`` objects.
    ``stop`` is polled after every optimizer step; when it returns a reason, training ends at that
    step boundary, the model trained so far is saved, and the reason is ``SFTResult.stopped_by``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import ProgressCallback
    from trl import SFTConfig, SFTTrainer

    if not rows:
        raise ConfigError("train_sft needs at least one row")
    if batch_size < 1 or learning_rate <= 0 or (max_steps is None and epochs <= 0):
        raise ConfigError("batch_size must be >= 1, learning_rate > 0, and epochs > 0 unless max_steps is set")
    if max_steps is not None and max_steps < 1:
        raise ConfigError("max_steps must be >= 1 when given")
    if not 0.0 <= warmup_ratio < 1.0:
        raise ConfigError("warmup_ratio must be in [0, 1)")
    if lora and lora_rank < 1:
        raise ConfigError("lora_rank must be >= 1")
    model_dir = Path(model_dir)
    out_dir = Path(out_dir)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not tokenizer.chat_template:
        raise ConfigError(f"the tokenizer in {model_dir} has no chat template")
    _check_lengths(tokenizer, rows, max_length)
    dataset = rows_to_dataset(rows)

    cuda = torch.cuda.is_available()
    bf16 = bool(cuda and torch.cuda.is_bf16_supported())
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, use_safetensors=True, dtype=torch.bfloat16 if bf16 and lora else torch.float32
    )

    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=lora_rank,
            lora_alpha=lora_alpha if lora_alpha is not None else 2 * lora_rank,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
            lora_dropout=0.0,
        )

    losses: list[tuple[int, float]] = []

    class _LossRecorder(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append((int(state.global_step), float(logs["loss"])))

    stopped: list[str] = []

    class _StopHook(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            reason = stop() if stop is not None else None
            if reason:
                stopped.append(reason)
                control.should_training_stop = True

    with tempfile.TemporaryDirectory(prefix="blobkit-sft-") as scratch:
        args = SFTConfig(
            output_dir=scratch,
            num_train_epochs=float(epochs),
            max_steps=max_steps if max_steps is not None else -1,
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=1,
            learning_rate=learning_rate,
            lr_scheduler_type=lr_scheduler_type,
            # transformers 5 dropped ``warmup_ratio``: a float in [0, 1) for ``warmup_steps`` is a ratio.
            warmup_steps=warmup_ratio,
            weight_decay=weight_decay,
            optim="adamw_torch",
            seed=seed,
            data_seed=seed,
            bf16=bf16,
            fp16=False,
            use_cpu=not cuda,
            # TRL defaults ``gradient_checkpointing=True``; transformers 5 renamed it, and only setting the
            # new name both turns it off and avoids the deprecation warning.
            activation_checkpointing=False,
            max_length=max_length,
            packing=packing,
            train_sampling_strategy="group_by_length" if group_by_length and not packing else "random",
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
        )
        # On CUDA, TRL's own fused head already scores only labelled positions (Triton) and avoids
        # materialising vocabulary-wide logits; on a CPU the compact loss is ~1.4x faster per step.
        trainer_class = SFTTrainer if cuda else _assistant_token_loss(SFTTrainer)
        trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[_LossRecorder(), _StopHook(), *callbacks],
        )
        if progress:
            trainer.remove_callback(ProgressCallback)
            trainer.add_callback(_loss_in_progress_bar(ProgressCallback))
        if not packing and len(trainer.train_dataset) != len(rows):
            raise TrainerError(
                f"the trainer kept {len(trainer.train_dataset)} of {len(rows)} rows after preparation"
            )
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        steps = int(trainer.state.global_step)

    out_dir.mkdir(parents=True, exist_ok=True)
    trained = trainer.model
    if lora:
        trained.save_pretrained(out_dir, safe_serialization=True)
        adapter_config = out_dir / "adapter_config.json"
        if not (out_dir / "adapter_model.safetensors").is_file() or not adapter_config.is_file():
            raise TrainerError(f"the LoRA adapter was not written to {out_dir}")
        _canonicalise_adapter_config(adapter_config)
    else:
        trained.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return SFTResult(
        loss_history=losses,
        optimizer_steps=steps,
        train_seconds=seconds,
        output_dir=out_dir,
        kind="lora" if lora else "full",
        stopped_by=stopped[0] if stopped else None,
    )
