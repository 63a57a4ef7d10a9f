"""Planning a run: validate every row against the kit's world, count tokens, estimate steps; write plan.json.

A plan is written before anything trains (and is all ``--dry-run`` does). It refuses what cannot
run at all (unknown tools, invalid arguments, rows longer than ``max_length``, a base no tool format
fits) and records what the chosen method/target cannot do (``unsupported``), so a dry run always
says where a run stands. It records where the base comes from (hub, local directory, or a registry
package converted here, with its sha256), the tool format chosen for it and why, and, when the
base's tokenizer is on this machine, the tokens per row under that format, the share of them that
is the shared prefix (system prompt and tool list, the same in every row), and an estimate of the
SFT minutes on this machine's CPU (:func:`cpu_cost`). A GRPO plan carries its rollout budget (the
most model calls its steps may make). The target adds its own part (:meth:`trainers.targets.base.Target.plan`):
``target`` (what it needs, whether it runs here and why not) and its sections: local-torch the CPU
estimate (``cost``), local-mlx its unified-memory estimate for Apple silicon (:mod:`trainers.memory`),
runpod the launch with its price (``runpod``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from world_format.canonical import file_sha256
from world_format.kit import Kit
from world_format.loaded import LoadedWorld

from .catalog import ResolvedBase, resolve_base
from .chat_format import render_row
from .config import TrainConfig
from .episode_limit import episode_limit
from .errors import ConfigError
from .formats import Choice, apply_tool_format
from .grounding import with_grounding_repeats
from .grpo import rl_cases, step_model_calls
from .memory_estimate import MemoryEstimate
from .plan_record import (
    ChosenFormat,
    CpuCost,
    NotEstimated,
    NotTokenized,
    PendingFormat,
    PlanBasis,
    PlanRecord,
    RolloutBudget,
    Tokenized,
)
from .preflight import preflight, rows_too_long
from .targets.registry import target_for
from .turn_tokens import rows_turn_tokens, turn_tokens


def validate_rows(loaded: LoadedWorld, rows: list[dict[str, Any]]) -> None:
    """Every row: well-formed roles and order, known tools, arguments valid against their schemas."""
    runtime = loaded.runtime()
    try:
        for index, row in enumerate(rows):
            problem = row_problem(runtime, row)
            if problem is not None:
                raise ConfigError(f"row {index + 1}: {problem}")
    finally:
        runtime.close()


def row_problem(runtime: Any, row: dict[str, Any]) -> str | None:
    """What makes ``row`` no training row of ``runtime``'s world (roles, order, tools, arguments), or None."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 3:
        return "needs messages (system, user, ..., assistant)"
    roles = [m.get("role") for m in messages]
    if roles[0] != "system" or roles[1] != "user" or roles[-1] != "assistant":
        return f"roles must start system, user and end with assistant, got {roles}"
    for position, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            compiled = runtime.tools.get(function.get("name"))
            if compiled is None:
                return f"message {position} calls unknown tool {function.get('name')!r}"
            errors = list(compiled.validator.iter_errors(function.get("arguments")))
            if errors:
                return f"message {position}: arguments for {function['name']} are invalid: {errors[0].message}"
        if message.get("role") == "tool" and (position == 0 or not messages[position - 1].get("tool_calls")
                                              and messages[position - 1].get("role") != "tool"):
            return f"message {position}: a tool message must follow a tool call"
    return None


CPU_LORA_TOKENS_PER_SECOND = 241.4
"""LoRA SFT (rank 16, all linear layers, batch 1, ~960-token retail rows under blobkit's format) tokens per second
on SmolLM2-135M-Instruct through ``train_sft`` on this 2-core machine when nothing else ran (1-minute load average
1.5, the run itself included; torch's two threads): ``benchmarks/cpu_train_rate.py --rows 4`` (Dec 2026). Under
other processes' load the same run fell to 13-24 tokens/s on two threads (they stall when another process holds a
core) and held 93-103 on one thread (``--threads 1``); one thread on the idle machine ran 144.5."""
CPU_FULL_TOKENS_PER_SECOND = 194.9
"""The same for full-weight SFT (every weight trained), same run: 194.9 on two threads idle, 114.1 on one thread
idle, 71.4 on one thread under load average 5."""
CPU_RATE_PARAMETERS = 134_515_008
"""Parameters of the model the rates were measured on (SmolLM2-135M-Instruct, tied embeddings)."""


NOT_ESTIMATED = NotEstimated(estimated=False,
                             reason="estimated for SFT on local-torch with a base on this machine only")
"""The ``cost`` of a tokenized plan whose target gives no estimate of its own."""


def _shared_prefix(sequences: list[list[int]]) -> int:
    """Length of the longest token prefix every sequence starts with."""
    if not sequences:
        return 0
    first, length = sequences[0], len(sequences[0])
    for ids in sequences[1:]:
        length = min(length, len(ids))
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length


def _count_tokens(base: ResolvedBase, rows: list[dict[str, Any]], config: TrainConfig
                  ) -> tuple[Tokenized | NotTokenized, Choice | None, list[int], list[list[int]] | None]:
    """Token counts of the rows under the base's tool format (and the format, each row's count, and each row's
    assistant turn lengths), when the tokenizer is here."""
    if not base.on_disk:
        return NotTokenized(tokenized=False, reason="base tokenizer not available locally"), None, [], None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base.name_or_path)
    choice = apply_tool_format(tokenizer, config.tool_format, where=base.record().get("id", base.name_or_path))
    rendered = [render_row(tokenizer, row) for row in rows]
    ids = [row.ids for row in rendered]
    counts = [len(row) for row in ids]
    prefix = _shared_prefix(ids)
    mean = sum(counts) / len(counts) if counts else 0.0
    too_long = [i + 1 for i, n in enumerate(counts) if n > config.max_length]
    return (Tokenized(tokenized=True, tokens=sum(counts), max_row_tokens=max(counts, default=0),
                      mean_row_tokens=round(mean, 1), shared_prefix_tokens=prefix,
                      shared_prefix_share=round(prefix / mean, 4) if mean else 0.0,
                      rows_over_max_length=too_long),
            choice, counts, rows_turn_tokens(tokenizer, rows, rendered))


def _parameters(base: ResolvedBase) -> int:
    """Parameters of a base on disk, from its safetensors headers."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(base.name_or_path).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 - safe_open is not a mapping
                total += math.prod(weights.get_slice(name).get_shape())
    return total


def cpu_cost(base: ResolvedBase, config: TrainConfig, trained_tokens: int) -> CpuCost | NotEstimated:
    """Estimated minutes of SFT on this machine's CPU: trained tokens over a measured rate, scaled to the base's size.

    The rate is :data:`CPU_LORA_TOKENS_PER_SECOND` (or the full-weight one) measured on SmolLM2-135M here;
    for another base it is scaled by parameters (SmolLM2's count / the base's), which is rough for a
    base of very different shape. Only SFT is estimated (the local-torch target asks for it).
    """
    if config.method != "sft" or not base.on_disk:
        return NOT_ESTIMATED
    rate = CPU_FULL_TOKENS_PER_SECOND if config.full else CPU_LORA_TOKENS_PER_SECOND
    parameters = _parameters(base)
    scaled = rate * CPU_RATE_PARAMETERS / max(parameters, 1)
    kind = "full-weight" if config.full else "LoRA"
    return CpuCost(
        estimated=True, trained_tokens=trained_tokens, tokens_per_second=round(scaled, 2),
        minutes=round(trained_tokens / scaled / 60, 1) if scaled else None, base_parameters=parameters,
        how=(f"rows x epochs tokens over the {kind} SFT rate measured on SmolLM2-135M-Instruct on this "
                    "2-core machine with nothing else running (trainers/plan.py, benchmarks/cpu_train_rate.py); "
                    "other processes on the cores slow torch's two threads up to 10x"
                    + ("" if parameters == CPU_RATE_PARAMETERS else f", scaled by {CPU_RATE_PARAMETERS:,} / "
                       f"{parameters:,} parameters")))


def trained_tokens(basis: PlanBasis, tokens: Tokenized, config: TrainConfig) -> int:
    """Tokens SFT trains on: the rows' tokens plus the grounding examples' (each counted at the mean row length,
    an upper bound: they are prefixes of their rows), times the epochs (``tokens``: the plan's counts)."""
    return round((tokens.tokens + basis.grounding_examples * tokens.mean_row_tokens) * config.epochs)


def sft_memory(base: ResolvedBase, config: TrainConfig, counts: list[int],
               prefix: int) -> MemoryEstimate | NotEstimated:
    """plan.json's ``memory`` (:mod:`trainers.memory_estimate`); ConfigError naming what would fit when it does not."""
    import torch

    from .memory_estimate import sft_memory_estimate

    try:
        estimate = sft_memory_estimate(Path(base.name_or_path), _parameters(base), counts, config, prefix,
                                       "cuda" if torch.cuda.is_available() else "cpu")
    except (OSError, ValueError) as exc:
        return NotEstimated(estimated=False, reason=f"the base's config.json cannot be read: {exc}")
    if not estimate.fits:
        would = ("; these would fit: " + "; ".join(estimate.fitting)) if estimate.fitting else (
            "; nothing fits at one row per pass with --gradient-checkpointing: shorten the rows or use a machine "
            "with more memory")
        raise ConfigError(f"the plan needs about {estimate.estimate_gb} GB ({estimate.micro_batch} rows of up to "
                          f"{estimate.longest_row_tokens} tokens per pass; "
                          + ", ".join(f"{k} {v:.1f}" for k, v in estimate.parts_gb.items())
                          + f" GB) but {estimate.limit_gb} GB is available on {estimate.device}{would}")
    return estimate


def rollout_budget(config: TrainConfig) -> RolloutBudget:
    """The most model calls GRPO's planned steps may make (each step starts only if its worst case fits)."""
    per_step = step_model_calls(config)
    return RolloutBudget(max_model_calls=config.steps * per_step, per_step=per_step,
                         how=("steps x prompts per step (batch_size // group_size) x group_size x max_turns"
                              " x (1 + resample_rounds)"),
                         limit=config.max_model_calls)


def rft_case_ids(kit: Kit, rows: list[dict[str, Any]]) -> set[str]:
    """The training cases RFT samples (:func:`trainers.rft.rft_cases`, counted here without loading it)."""
    return {case.case_id for case in rl_cases(kit, rows)}


def rft_budget(config: TrainConfig, cases: int) -> RolloutBudget:
    """The most model calls RFT's sampling may make: every training case's k episodes at the turn cap."""
    per_case = config.rft_samples * config.turn_cap
    return RolloutBudget(max_model_calls=cases * per_case, per_step=per_case,
                         how="per training case (a step here): rft_samples x max_turns; training cases x that in all",
                         limit=config.max_model_calls)


def _optimizer_steps(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], steps_per_epoch: int) -> int:
    """SFT: batches per epoch x epochs; GRPO: its steps; RFT: the most, when every sampled episode is kept."""
    if config.method == "sft":
        return math.ceil(steps_per_epoch * config.epochs)
    if config.method == "rft":
        kept = len(rft_case_ids(kit, rows)) * config.rft_samples
        return math.ceil(-(-kept // config.batch_size) * config.epochs)
    return config.steps


def plan(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], data_path: Path) -> PlanRecord:
    """Validate everything and write OUT/plan.json (:class:`~trainers.plan_record.PlanRecord`); raise on any
    problem, writing nothing (a ``max_turns`` below what a case needs is one, :mod:`trainers.episode_limit`).
    plan.json records the config with its turn cap resolved.

    The :mod:`trainers.preflight` checks run first (the output folder can be written, the base can be
    loaded without downloading anything here), so a run that cannot start fails before any work.
    """
    config, limit = episode_limit(config, kit)
    preflight(config, target_for(config.target).preflight_skips(config))
    base = resolve_base(config.base, config.revision)
    validate_rows(kit.world(), rows)
    tokens, choice, counts, row_turns = _count_tokens(base, rows, config)
    if isinstance(tokens, Tokenized) and tokens.rows_over_max_length:
        raise rows_too_long(config, tokens.rows_over_max_length, tokens.max_row_tokens)
    token_cap = None
    if row_turns is not None:
        config, token_cap = turn_tokens(config, row_turns)
    extra = (len(with_grounding_repeats(rows, config.grounding_repeats, config.answer_quote_repeats)) - len(rows)
             if config.method == "sft" else 0)
    steps_per_epoch = -(-(len(rows) + extra) // config.batch_size)
    basis = PlanBasis(
        config=config, base=base.record(),
        tool_format=ChosenFormat.model_validate(choice.to_json()) if choice else PendingFormat(
            name=config.tool_format, reason="chosen when the base's tokenizer is loaded"),
        kit_sha256=kit.sha256, data=str(data_path), data_sha256=file_sha256(data_path),
        rows=len(rows), grounding_examples=extra, tokens=tokens,
        estimated_optimizer_steps=_optimizer_steps(config, kit, rows, steps_per_epoch),
        vram_estimate_gb=base.vram_estimate_gb(config.method), episode_limit=limit, turn_tokens=token_cap,
        rollout_budget=rollout_budget(config) if config.method == "grpo"
        else rft_budget(config, len(rft_case_ids(kit, rows))) if config.method == "rft" else None)
    refusal = config.unsupported() or None
    target = target_for(config.target).plan(config, kit, base, basis, counts)
    sections = target.sections
    if isinstance(tokens, Tokenized) and sections.cost is None:
        sections = sections.model_copy(update={"cost": NOT_ESTIMATED})
    result = PlanRecord(**dict(basis), **dict(sections), target=target.record(),
                        unsupported=refusal)
    result.write(config.out / "plan.json")
    return result
