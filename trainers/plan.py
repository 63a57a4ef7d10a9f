"""Planning a run: validate every row against the kit's world, count tokens, estimate steps; write plan.json.

A plan is written before anything trains (and is all ``--dry-run`` does). It refuses what cannot
run at all (unknown tools, invalid arguments, rows longer than ``max_length``) and records what
the chosen method/target cannot do (``unsupported``), so a dry run always says where a run stands.
A GRPO plan carries its rollout budget (the most model calls its steps may make); a local-mlx plan
its unified-memory estimate for Apple silicon (:mod:`trainers.memory`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from world_format.canonical import atomic_write_json, file_sha256
from world_format.kit import Kit
from world_format.loaded import LoadedWorld

from .catalog import ResolvedBase, resolve_base
from .config import TrainConfig
from .errors import ConfigError
from .grounding import with_grounding_repeats
from .grpo import step_model_calls
from .memory import unified_memory_estimate


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

    from .sft_torch import count_row_tokens

    tokenizer = AutoTokenizer.from_pretrained(base.name_or_path)
    counts = [count_row_tokens(tokenizer, row) for row in rows]
    too_long = [i + 1 for i, n in enumerate(counts) if n > max_length]
    return {"tokenized": True, "tokens": sum(counts), "max_row_tokens": max(counts, default=0),
            "rows_over_max_length": too_long}


def rollout_budget(config: TrainConfig) -> dict[str, Any]:
    """The most model calls GRPO's planned steps may make (each step starts only if its worst case fits)."""
    per_step = step_model_calls(config)
    return {"max_model_calls": config.steps * per_step, "per_step": per_step,
            "how": "steps x prompts per step (batch_size // group_size) x group_size x max_turns",
            "limit": config.max_model_calls}


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
        "config": config.as_json(),
        "base": {"source": base.source, "name_or_path": base.name_or_path, "revision": base.revision},
        "kit_sha256": kit.sha256, "data": str(data_path), "data_sha256": file_sha256(data_path),
        "rows": len(rows), "grounding_examples": extra, "tokens": tokens,
        "estimated_optimizer_steps": math.ceil(steps_per_epoch * config.epochs) if config.method == "sft"
        else config.steps,
        "vram_estimate_gb": base.vram_estimate_gb(config.method),
    }
    if config.method == "grpo":
        result["rollout_budget"] = rollout_budget(config)
    if config.target == "local-mlx":
        result["unified_memory"] = unified_memory_estimate(base, config)
    refusal = config.unsupported()
    if refusal:
        result["unsupported"] = refusal
    elif config.target == "runpod":
        from .runpod import launch_plan

        result["runpod"] = launch_plan(config, kit, result)
    atomic_write_json(config.out / "plan.json", result)
    return result
