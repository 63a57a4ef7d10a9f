"""`blobkit train` on local-torch: plan, validate, evaluate base, SFT, export, reload, evaluate SFT."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blobkit.canonical import atomic_write_json, file_sha256
from blobkit.errors import ConfigError, TargetUnavailableError
from blobkit.kitfiles import Kit
from world_format.loader import LoadedWorld

from .catalog import ResolvedBase, resolve_base
from .config import TrainConfig
from .grounding import with_grounding_repeats

Log = Callable[[str], None]


def check_target(config: TrainConfig) -> None:
    """Refuse method/target pairs that do not exist, clearly and without a fallback."""
    if config.target == "local-mlx" and (config.full or config.packing):
        raise TargetUnavailableError("local-mlx trains LoRA adapters without packing; drop --full/--packing or use "
                                     "--target local-torch")
    if config.target == "local-mlx" and config.method != "sft":
        raise TargetUnavailableError("GRPO does not run on local-mlx; train SFT with --target local-mlx, or run "
                                     "GRPO with --target local-torch or --target runpod")
    if config.target == "runpod" and config.method != "grpo":
        raise TargetUnavailableError("runpod runs GRPO only: train SFT locally first (--target local-torch or "
                                     "local-mlx), then pass its export with --init-adapter to --method grpo "
                                     "--target runpod")


def run_training(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: dict[str, Any],
                 log: Log, stop: Callable[[], str | None] | None = None) -> dict[str, Any]:
    """Dispatch a validated, planned run to its target; every target returns the eval.json record."""
    check_target(config)
    if config.method == "sft":
        rows = with_grounding_repeats(rows, config.grounding_repeats, config.answer_quote_repeats)
    if config.target == "runpod":
        from .runpod import train_runpod

        return train_runpod(config, kit, rows, plan_record, log, stop)
    if config.target == "local-mlx":
        from .local_mlx import train_local_mlx

        return train_local_mlx(config, kit, rows, plan_record, log, stop)
    if config.method == "grpo":
        from .grpo import train_grpo

        return train_grpo(config, kit, rows, plan_record, log, stop)
    return train_local_torch(config, kit, rows, plan_record, log, stop)


def validate_rows(loaded: LoadedWorld, rows: list[dict[str, Any]]) -> None:
    """Every row: well-formed roles and order, known tools, arguments valid against their schemas."""
    runtime = loaded.runtime()
    try:
        for index, row in enumerate(rows):
            where = f"row {index + 1}"
            messages = row.get("messages")
            if not isinstance(messages, list) or len(messages) < 3:
                raise ConfigError(f"{where}: needs messages (system, user, ..., assistant)")
            roles = [m.get("role") for m in messages]
            if roles[0] != "system" or roles[1] != "user" or roles[-1] != "assistant":
                raise ConfigError(f"{where}: roles must start system, user and end with assistant, got {roles}")
            for position, message in enumerate(messages):
                for call in message.get("tool_calls") or []:
                    function = call.get("function", {})
                    compiled = runtime.tools.get(function.get("name"))
                    if compiled is None:
                        raise ConfigError(f"{where}: message {position} calls unknown tool {function.get('name')!r}")
                    errors = list(compiled.validator.iter_errors(function.get("arguments")))
                    if errors:
                        raise ConfigError(f"{where}: message {position}: arguments for {function['name']} are "
                                          f"invalid: {errors[0].message}")
                if message.get("role") == "tool" and (position == 0 or not messages[position - 1].get("tool_calls")
                                                      and messages[position - 1].get("role") != "tool"):
                    raise ConfigError(f"{where}: message {position}: a tool message must follow a tool call")
    finally:
        runtime.close()


def _count_tokens(base: ResolvedBase, rows: list[dict[str, Any]], max_length: int) -> dict[str, Any]:
    if base.source != "local":
        return {"tokenized": False, "reason": "base tokenizer not available locally"}
    from transformers import AutoTokenizer

    from .local_torch import count_row_tokens

    tokenizer = AutoTokenizer.from_pretrained(base.name_or_path)
    counts = [count_row_tokens(tokenizer, row) for row in rows]
    too_long = [i + 1 for i, n in enumerate(counts) if n > max_length]
    return {"tokenized": True, "tokens": sum(counts), "max_row_tokens": max(counts, default=0),
            "rows_over_max_length": too_long}


def plan(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], data_path: Path) -> dict[str, Any]:
    """Validate everything and write OUT/plan.json; raise on any problem."""
    base = resolve_base(config.base, config.revision)
    validate_rows(kit.world(), rows)
    tokens = _count_tokens(base, rows, config.max_length)
    if tokens.get("rows_over_max_length"):
        raise ConfigError(f"rows {tokens['rows_over_max_length'][:10]} are longer than --max-length "
                          f"{config.max_length} tokens; raise it (rows are never dropped)")
    extra = (len(with_grounding_repeats(rows, config.grounding_repeats, config.answer_quote_repeats)) - len(rows)
             if config.method == "sft" else 0)
    steps_per_epoch = -(-(len(rows) + extra) // config.batch_size)
    result = {
        "config": json.loads(config.model_dump_json()),
        "base": {"source": base.source, "name_or_path": base.name_or_path, "revision": base.revision},
        "kit_sha256": kit.sha256, "data": str(data_path), "data_sha256": file_sha256(data_path),
        "rows": len(rows), "grounding_examples": extra, "tokens": tokens,
        "estimated_optimizer_steps": math.ceil(steps_per_epoch * config.epochs) if config.method == "sft"
        else config.steps,
        "vram_estimate_gb": base.vram_estimate_gb(config.method),
    }
    if config.target == "runpod":
        from .runpod import launch_plan

        result["runpod"] = launch_plan(config, kit, result)
    atomic_write_json(config.out / "plan.json", result)
    return result


def _evaluate(model: Any, tokenizer: Any, loaded: LoadedWorld, cases: list[dict[str, Any]], config: TrainConfig,
              log: Log, label: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from .episode import evaluate_cases, model_generator

    runtime = loaded.runtime()
    try:
        started = time.monotonic()
        summary, results = evaluate_cases(model_generator(model, tokenizer, config.max_new_tokens), runtime, cases,
                                          config.max_turns)
    finally:
        runtime.close()
    log(f"{label}: pass rate {summary['pass_rate']:.3f} on {summary['cases']} held-out cases "
        f"({time.monotonic() - started:.0f}s)")
    return summary, results


def plot_training(out: Path, series: list[tuple[int, float]], evals: dict[str, Any], *,
                  title: str = "training loss", ylabel: str = "loss") -> None:
    """A PNG with the per-step series (loss, or GRPO reward) and the held-out pass rates side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    if series:
        left.plot([s for s, _ in series], [v for _, v in series], marker="." if len(series) < 50 else None)
    left.set(title=title, xlabel="optimizer step" if ylabel == "loss" else "step", ylabel=ylabel)
    names = [n for n in ("base", "sft", "rl") if n in evals]
    right.bar(names, [evals[n]["pass_rate"] for n in names], color=["#999", "#3a7", "#37a"][: len(names)])
    right.set(title="held-out pass rate", ylim=(0, 1))
    figure.tight_layout()
    figure.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(figure)


def finish_sft(config: TrainConfig, kit: Kit, base_eval: dict[str, Any], sft_eval: dict[str, Any],
               sft_results: list[dict[str, Any]], result: Any) -> dict[str, Any]:
    """Write eval.json, the per-case SFT results and the plot of an SFT run (any target); return the record."""
    evals = {"base": base_eval, "sft": sft_eval}
    report = {**evals, "optimizer_updates": result.optimizer_steps, "stopped_by": result.stopped_by,
              "model_calls": base_eval["model_calls"] + sft_eval["model_calls"],
              "train_seconds": round(result.train_seconds, 1),
              "loss_history": result.loss_history, "kit_sha256": kit.sha256,
              "sft_minus_base": round(sft_eval["pass_rate"] - base_eval["pass_rate"], 4)}
    atomic_write_json(config.out / "eval.json", report)
    atomic_write_json(config.out / "eval_cases_sft.json", sft_results)
    plot_training(config.out / "training.png", result.loss_history, evals)
    return report


def train_local_torch(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: dict[str, Any],
                      log: Log, stop: Callable[[], str | None] | None = None) -> dict[str, Any]:
    """Run the whole SFT path and write eval.json, the loss plot and the export.

    ``stop`` is polled at every optimizer step (budgets, cancellation); training then ends at that
    step boundary, the partial model is still exported and evaluated, and ``stopped_by`` says why.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .export import export_model, load_export
    from .local_torch import train_sft

    loaded = kit.world()
    cases = kit.jsonl("eval_cases.jsonl")[: config.eval_limit]
    base = plan_record["base"]
    tokenizer = AutoTokenizer.from_pretrained(base["name_or_path"])
    base_model = AutoModelForCausalLM.from_pretrained(base["name_or_path"], use_safetensors=True).eval()
    base_eval, _ = _evaluate(base_model, tokenizer, loaded, cases, config, log, "base")
    del base_model
    checkpoint = config.out / "checkpoint"
    log(f"training ({'full weights' if config.full else f'LoRA rank {config.lora_rank}'}) on {len(rows)} examples")
    result = train_sft(Path(base["name_or_path"]), rows, checkpoint, epochs=config.epochs,
                       learning_rate=config.learning_rate, batch_size=config.batch_size, seed=config.seed,
                       lora=not config.full, lora_rank=config.lora_rank, max_length=config.max_length,
                       packing=config.packing, group_by_length=config.group_by_length,
                       warmup_ratio=config.warmup_ratio, stop=stop)
    config_json = json.loads(config.model_dump_json())
    atomic_write_json(checkpoint / "train_config.json", config_json)
    export = export_model(checkpoint, config.out / "export", kind=result.kind, config=config_json, base=base,
                          kit_sha256=kit.sha256)
    model, tokenizer, _ = load_export(export)
    sft_eval, sft_results = _evaluate(model, tokenizer, loaded, cases, config, log, "sft")
    return finish_sft(config, kit, base_eval, sft_eval, sft_results, result)
