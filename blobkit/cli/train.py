"""Training commands: ``models``, ``tiny-model``, ``train``, ``replay``.

``train``'s options are generated from :class:`trainers.config.TrainConfig` (and ``tiny-model``'s
from :class:`trainers.tiny_model.TinyModelConfig`), so the defaults ``--help`` shows are the code's.
A run's settings are layered: the config's defaults, then ``--preset``, then ``--config FILE``
(a JSON TrainConfig, as plan.json records it), then the flags given.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from blobkit.errors import ConfigError, TargetUnavailableError
from trainers.config import PRESETS, TrainConfig, read_json_object
from trainers.eval_record import RFTReport, SFTReport, TrainingReport
from trainers.paired import PairedComparison
from trainers.plan_record import CpuCost, PlanRecord, Tokenized
from trainers.tiny_model import TinyModelConfig

from .options import given, layered, model_options, with_parameters
from .output import echo_json, third_party_output, to_stderr


def models(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the accepted base models with approximate VRAM for LoRA SFT/GRPO (bf16, 4k context).

    Example: blobkit models --json
    """
    from trainers.catalog import catalog_json

    entries = catalog_json()
    if as_json:
        echo_json(entries)
        return
    for entry in entries:
        offline = f"  offline: {entry['offline']['package']}" if entry.get("offline") else ""
        typer.echo(f"{entry['id']:<36} {entry['params_b']:>5}B  SFT ~{entry['vram_sft_gb']} GB  "
                   f"GRPO ~{entry['vram_grpo_gb']} GB{offline}")


def tiny_model(kit: Path = typer.Option(..., "--kit", help="Kit whose text trains the tokenizer."),
               out: Path = typer.Option(..., "--out", help="Directory for the model."), **options: Any) -> None:
    """Build a tiny Qwen2-architecture model with random weights for offline tests and the demo.

    Example: blobkit tiny-model --kit KIT --out out/tiny
    """
    from trainers.tiny_model import build_tiny_model, row_texts
    from world_format.kit import open_kit

    with open_kit(kit) as opened:
        texts = row_texts(opened.rows())
    build_tiny_model(texts, out, TinyModelConfig(**given(options, TinyModelConfig)))
    typer.echo(f"tiny model written to {out}")


def resolve_config(preset: str | None, config_file: Path | None, flags: dict[str, Any]) -> TrainConfig:
    """The run's TrainConfig: defaults, then the preset, then the config file, then the flags given."""
    values: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown --preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
        values.update(PRESETS[preset])
    if config_file is not None:
        values = layered(values, read_json_object(config_file, "the config",
                                                  "a config file is one JSON object of TrainConfig fields"))
    values = layered(values, given(flags, TrainConfig))
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"training config: {where}: {first['msg']}") from None


def _rows(config: TrainConfig, kit: Any) -> tuple[list[dict[str, Any]], Path]:
    if config.data is None:
        return kit.rows(), kit.path("sft.jsonl")
    from world_format.errors import KitError
    from world_format.kit import read_jsonl

    try:
        return read_jsonl(config.data), config.data
    except KitError as exc:
        raise ConfigError(f"cannot read SFT rows: {exc}") from None


def _summary_line(result: TrainingReport, out: Path) -> str:
    evaluations = result.evaluations()
    rates = " -> ".join(f"{name} {record.text()}" for name, record in evaluations.items())
    stopped = f"; stopped by {result.stopped_by}" if result.stopped_by else ""
    compared: list[PairedComparison | None]
    if isinstance(result, SFTReport):
        compared = [result.sft_vs_base]
    elif isinstance(result, RFTReport):
        compared = [result.rft_minus_sft.paired]
    else:
        compared = [delta.paired for delta in (result.rl_minus_base, result.rl_minus_sft) if delta is not None]
    rates += "".join(f"; {record.text()}" for record in compared if record)
    rates += "".join(f"; {name} {record.pass_hat_k.text()}" for name, record in evaluations.items()
                     if name in ("sft", "rl", "rft") and record.pass_hat_k is not None)
    rates += "".join(f"; {name} {record.failures.text()}" for name, record in evaluations.items()
                     if name in ("sft", "rl", "rft") and record.failures is not None)
    if isinstance(result, RFTReport):
        sampling = result.sampling
        rates += (f"; RFT trained on {sampling.kept} distinct episodes ({sampling.passed} of {sampling.episodes} "
                  f"sampled passed, {sampling.duplicates} duplicates, {sampling.unusable} unusable)")
    return (f"held-out pass rates {rates}; {result.optimizer_updates} optimizer updates{stopped}; "
            f"export in {out / 'export'}")


def _plan_line(record: PlanRecord, out: Path, refusal: str | None) -> str:
    extras = []
    if record.rollout_budget is not None:
        extras.append(f"at most {record.rollout_budget.max_model_calls} model calls in rollouts")
    if record.unified_memory is not None:
        memory = record.unified_memory
        extras.append(f"about {memory.estimate_gb:g} GB of unified memory (a Mac with "
                      f"{memory.mac_memory_gb} GB or more)")
    limit = record.episode_limit
    how = (f"derived: the longest case needs {limit.longest_case_turns}, plus {limit.slack}" if limit.derived
           else f"set; {limit.cases_over_limit} case(s) need more" if limit.cases_over_limit else "set")
    extras.append(f"episodes of at most {limit.max_turns} assistant turns ({how})")
    cap = record.turn_tokens
    if cap is not None:
        how = (f"derived: the longest turn takes {cap.longest_turn_tokens}, plus a share of {cap.slack:g}"
               if cap.slack is not None
               else f"set; {cap.turns_over_limit} training turn(s) take more" if cap.turns_over_limit else "set")
        extras.append(f"turns of at most {cap.max_new_tokens} tokens ({how})")
    head = (f"plan written to {out / 'plan.json'}: {record.rows} rows, "
            f"{record.estimated_optimizer_steps} optimizer steps" + "".join(f", {e}" for e in extras)
            + (f"; cannot run as configured: {refusal}" if refusal else ""))
    return "\n".join([head, *_base_lines(record)])


def _base_lines(record: PlanRecord) -> list[str]:
    """Where the base comes from, its tool format and what the rows cost, as the dry run prints them."""
    base, fmt, tokens, cost = record.base, record.tool_format, record.tokens, record.cost
    if base.source == "registry" and base.origin is not None:
        origin = base.origin
        lines = [f"  base: {base.id} from the registry package {origin['package']} {origin['package_version']} "
                 f"({origin['file']}, sha256 {origin['sha256']}), converted to {base.name_or_path} "
                 f"(sha256 {base.sha256})"]
    elif base.source == "local":
        lines = [f"  base: the local model {base.name_or_path} (sha256 {base.sha256})"]
    else:
        lines = [f"  base: {base.name_or_path} from the Hugging Face hub at revision {base.revision}"]
    lines.append(f"  tool format: {fmt.name} ({fmt.reason})")
    if isinstance(tokens, Tokenized):
        lines.append(f"  tokens: {tokens.mean_row_tokens:g} per row on average (longest "
                     f"{tokens.max_row_tokens}); the shared prefix (system prompt and tool list) is "
                     f"{tokens.shared_prefix_tokens} of them, "
                     f"{tokens.shared_prefix_share:.0%} of a row")
    if isinstance(cost, CpuCost) and cost.minutes is not None:
        lines.append(f"  cost: about {cost.minutes:g} minutes of training on this machine "
                     f"({cost.trained_tokens:,} tokens at {cost.tokens_per_second:g} tokens/s: {cost.how})")
    return lines


INTERRUPT_NOTICE = ("interrupted: stopping at the next step boundary, then exporting and evaluating what was "
                    "trained (again to stop at once)")


def train(config_file: Path | None = typer.Option(None, "--config", help="A JSON file of TrainConfig fields (what "
                                                                          "plan.json records under config)."),
          preset: str | None = typer.Option(None, "--preset", help=f"Start from a named recipe: "
                                                                   f"{', '.join(sorted(PRESETS))}."),
          as_json: bool = typer.Option(False, "--json", help="Print the plan or the result as JSON."),
          verbose: bool = typer.Option(False, "--verbose", help="Show the Hugging Face libraries' progress bars and "
                                       "warnings (by default the warnings go to OUT/train.log)."),
          **options: Any) -> None:
    """Train a model on a kit (SFT, GRPO or RFT; local-torch, local-mlx or runpod), evaluate on held-out cases, export.

    Example: blobkit train --world KIT --base out/tiny --method sft --target local-torch --preset tiny --out out/run

    SIGINT or SIGTERM stops training at the next step boundary; what was trained is exported and evaluated,
    eval.json records stopped_by: interrupt, and the exit code is 130.
    """
    from trainers.plan import plan
    from trainers.run import run_training
    from world_format.interrupts import deferred_interrupts
    from world_format.kit import open_kit

    config = resolve_config(preset, config_file, options)
    if config.kit is None:
        raise ConfigError("--world KIT is required: the kit directory or archive to train on")
    refusal = config.unsupported()
    if refusal and not config.dry_run:
        raise TargetUnavailableError(refusal)
    if not config.dry_run:
        import os

        from trainers.targets.registry import target_for

        target_for(config.target).gate(config, os.environ)  # a refusal writes nothing, not even plan.json
    with deferred_interrupts(to_stderr, INTERRUPT_NOTICE) as interrupts, \
            third_party_output(config.out / "train.log", verbose), open_kit(config.kit) as opened:
        rows, data_path = _rows(config, opened)
        record = plan(config, opened, rows, data_path)
        result: PlanRecord | TrainingReport = record
        if not config.dry_run:
            interrupts.check("planning", written="only plan.json was written")
            # TRL and transformers print progress dicts on stdout; keep stdout for the result alone
            with contextlib.redirect_stdout(sys.stderr):
                result = run_training(config, opened, rows, record, to_stderr, stop=interrupts.reason)
    if as_json:
        echo_json(result.to_json())
    elif isinstance(result, PlanRecord):
        typer.echo(_plan_line(result, config.out, refusal))
    else:
        typer.echo(_summary_line(result, config.out))
    if interrupts.received:
        raise typer.Exit(130)  # everything was written; the exit code says the run did not go as far as asked


def replay(model: Path = typer.Option(..., "--model", help="An export directory."),
           kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
           case: str | None = typer.Option(None, "--case", help="Held-out case id (default: the first)."),
           max_turns: int | None = typer.Option(None, "--max-turns", help="Turn cap (default: the export's own)."),
           harness: str | None = typer.Option(None, "--harness", help="Replay inside an agent harness instead of "
                                                                     "blobkit's loop: codex (the Codex CLI on PATH, "
                                                                     "shadow mode)."),
           decoding: str | None = typer.Option(None, "--decoding", help="free, constrained or grounded decoding "
                                               "(default: the export's own)."),
           as_json: bool = typer.Option(False, "--json", help="Print the episode as JSON.")) -> None:
    """Load an exported model fresh and replay one held-out workflow; exit 1 when its verifier fails it.

    Example: blobkit replay --model out/run/export --kit KIT --json
    """
    from trainers.replay import replay_case, replay_record, trained_decoding
    from world_format.kit import open_kit

    used = decoding or trained_decoding(model)
    with open_kit(kit) as opened:
        if harness is not None:
            from blobkit.harness.cli import harness_replay

            result, manifest = harness_replay(harness, model, opened, case)
        else:
            result, manifest = replay_case(model, opened, case, max_turns=max_turns, decoding=used)
        prompt = next(c for c in opened.cases("eval") if c.case_id == result.case_id).task.instruction
    if as_json:
        echo_json(replay_record(result, manifest, used))
    else:
        typer.echo(f"case {result.case_id} ({result.template}): {prompt}")
        for event in result.trace:
            typer.echo(f"  call {event.tool}({json.dumps(event.arguments)}) -> {json.dumps(event.observation)}")
        typer.echo(f"  answer: {result.answer}")
        typer.echo(f"  verdict: {result.verdict.outcome} {result.verdict.reason}")
    if not result.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the training commands to the CLI."""
    app.command()(models)
    app.command(name="tiny-model")(with_parameters(tiny_model, model_options(
        TinyModelConfig, only=("seed", "hidden_size", "num_layers", "num_heads", "vocab_size"))))
    app.command()(with_parameters(train, model_options(TrainConfig)))
    app.command()(replay)
