"""Training commands of the CLI (heavy imports happen inside each command)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import typer

from blobkit.errors import ConfigError


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False))


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read SFT rows: {exc}") from None


def models(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the accepted base models with approximate VRAM for LoRA SFT/GRPO (bf16, 4k context).

    Example: blobkit models --json
    """
    from trainers.catalog import catalog_json

    entries = catalog_json()
    if as_json:
        _echo_json(entries)
        return
    for entry in entries:
        typer.echo(f"{entry['id']:<36} {entry['params_b']:>5}B  SFT ~{entry['vram_sft_gb']} GB  "
                   f"GRPO ~{entry['vram_grpo_gb']} GB")


def tiny_model(kit: Path = typer.Option(..., "--kit", help="Kit whose text trains the tokenizer."),
               out: Path = typer.Option(..., "--out", help="Directory for the model."),
               seed: int = typer.Option(0, help="Seed for the random weights."),
               hidden_size: int = typer.Option(64, "--hidden-size", help="Width of the model."),
               layers: int = typer.Option(4, "--layers", help="Transformer blocks."),
               heads: int = typer.Option(4, "--heads", help="Attention heads."),
               vocab_size: int = typer.Option(600, "--vocab-size",
                                              help="BPE size (small: emails stay copyable pieces).")) -> None:
    """Build a tiny Qwen2-architecture model with random weights for offline tests and the demo.

    Example: blobkit tiny-model --kit out/demo/kit/northwind-retail-train-kit --out out/demo/tiny
    """
    from blobkit.kitfiles import open_kit
    from trainers.tiny_model import build_tiny_model, row_texts

    with open_kit(kit) as opened:
        texts = row_texts(opened.jsonl("sft.jsonl"))
    build_tiny_model(texts, out, seed=seed, hidden_size=hidden_size, num_layers=layers, num_heads=heads,
                     vocab_size=vocab_size)
    typer.echo(f"tiny model written to {out}")


def train(kit: Path = typer.Option(..., "--world", "--kit", help="Kit directory or archive."),
          data: Path | None = typer.Option(None, "--data", help="SFT rows (default: the kit's sft.jsonl)."),
          base: str = typer.Option("Qwen/Qwen3-8B", "--base", help="Catalog id or local model directory."),
          method: str = typer.Option("grpo", "--method", help="sft or grpo."),
          target: str = typer.Option("local-mlx", "--target", help="local-torch, local-mlx or runpod."),
          out: Path = typer.Option(Path("out/train"), "--out", help="Output directory."),
          dry_run: bool = typer.Option(False, "--dry-run", help="Validate and write plan.json only."),
          full: bool = typer.Option(False, "--full", help="Train all weights instead of LoRA."),
          lora_rank: int = typer.Option(16, "--lora-rank"),
          epochs: float = typer.Option(8, "--epochs"),
          steps: int = typer.Option(100, "--steps"),
          seed: int = typer.Option(42, "--seed"),
          learning_rate: float = typer.Option(2e-4, "--lr"),
          batch_size: int = typer.Option(8, "--batch-size"),
          max_length: int = typer.Option(1024, "--max-length"),
          packing: bool = typer.Option(False, "--packing"),
          group_by_length: bool = typer.Option(False, "--group-by-length",
                                               help="SFT: batch rows of similar length (less padding)."),
          warmup_ratio: float = typer.Option(0.03, "--warmup-ratio", help="SFT: share of steps warming up the LR."),
          grounding_repeats: int = typer.Option(0, "--grounding-repeats",
                                                help="SFT: extra examples of each tool call that quotes the user."),
          answer_quote_repeats: int = typer.Option(0, "--answer-quote-repeats",
                                                   help="SFT: extra examples of each answer quoting an observed "
                                                        "figure."),
          eval_limit: int | None = typer.Option(None, "--eval-limit", help="Evaluate at most N held-out cases."),
          max_turns: int = typer.Option(6, "--max-turns", help="Turn cap of an episode."),
          max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per generated turn."),
          init_adapter: Path | None = typer.Option(None, "--init-adapter", help="GRPO: warm-start from this export."),
          group_size: int = typer.Option(2, "--group-size", help="GRPO: attempts per prompt."),
          temperature: float = typer.Option(1.0, "--temperature", help="GRPO: rollout sampling temperature."),
          max_model_calls: int | None = typer.Option(None, "--max-model-calls", help="GRPO: model-call budget."),
          max_minutes: float | None = typer.Option(None, "--max-minutes", help="Active-minutes budget."),
          confirm_spend: bool = typer.Option(False, "--confirm-spend", help="runpod: allow paid resources."),
          max_hours: float = typer.Option(2.0, "--max-hours", help="runpod: hard limit on pod lifetime."),
          gpu_type: str = typer.Option("NVIDIA GeForce RTX 4090", "--gpu-type", help="runpod: GPU type id."),
          gpu_count: int = typer.Option(1, "--gpu-count", help="runpod: GPUs per pod."),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Train a model on a kit (SFT or GRPO; local-torch, local-mlx or runpod), evaluate on held-out cases, export.

    Example: blobkit train --world KIT --base out/tiny --method sft --target local-torch --full --out out/run
    """
    from blobkit.kitfiles import open_kit
    from trainers.config import TrainConfig
    from trainers.pipeline import check_target, plan, run_training

    config = TrainConfig(kit=kit, data=data, base=base, method=method, target=target, out=out, dry_run=dry_run,
                         full=full, lora_rank=lora_rank, epochs=epochs, steps=steps, seed=seed,
                         learning_rate=learning_rate, batch_size=batch_size, max_length=max_length, packing=packing,
                         group_by_length=group_by_length, warmup_ratio=warmup_ratio,
                         grounding_repeats=grounding_repeats, answer_quote_repeats=answer_quote_repeats,
                         eval_limit=eval_limit, max_turns=max_turns, max_new_tokens=max_new_tokens,
                         init_adapter=init_adapter, group_size=group_size, temperature=temperature,
                         max_model_calls=max_model_calls, max_minutes=max_minutes, confirm_spend=confirm_spend,
                         max_hours=max_hours, gpu_type=gpu_type, gpu_count=gpu_count)
    check_target(config)
    if target == "runpod" and not dry_run:
        import os

        from trainers.runpod import gate_spend

        gate_spend(config, os.environ)  # a refusal writes nothing, not even plan.json
    with open_kit(kit) as opened:
        data_path = data or opened.path("sft.jsonl")
        rows = _rows(data_path)
        record = plan(config, opened, rows, data_path)
        if dry_run:
            result: dict[str, Any] = record
        else:
            # TRL and transformers print progress dicts on stdout; keep stdout for the result alone
            with contextlib.redirect_stdout(sys.stderr):
                result = run_training(config, opened, rows, record, lambda line: typer.echo(line, err=True))
    if as_json:
        _echo_json(result)
    elif dry_run:
        typer.echo(f"plan written to {out / 'plan.json'}: {record['rows']} rows, "
                   f"{record['estimated_optimizer_steps']} optimizer steps")
    else:
        rates = " -> ".join(f"{name} {result[name]['pass_rate']:.3f}" for name in ("base", "sft", "rl")
                            if name in result)
        cases = next(result[name]["cases"] for name in ("rl", "sft", "base") if name in result)
        typer.echo(f"{rates} on {cases} held-out cases; {result['optimizer_updates']} optimizer updates; "
                   f"export in {out / 'export'}")


def replay(model: Path = typer.Option(..., "--model", help="An export directory."),
           kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
           case: str | None = typer.Option(None, "--case", help="Held-out case id (default: the first)."),
           max_turns: int = typer.Option(6, "--max-turns"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Load an exported model fresh and replay one held-out workflow, printing the trace and verdict.

    Example: blobkit replay --model out/run/export --kit KIT --json
    """
    from blobkit.kitfiles import open_kit
    from trainers.episode import model_generator, run_episode
    from trainers.export import load_export

    loaded_model, tokenizer, manifest = load_export(model)
    with open_kit(kit) as opened:
        cases = opened.jsonl("eval_cases.jsonl")
        chosen = next((c for c in cases if case is None or c["case_id"] == case), None)
        if chosen is None:
            raise ConfigError(f"no held-out case {case!r} in {kit}")
        runtime = opened.world().runtime()
        try:
            result = run_episode(model_generator(loaded_model, tokenizer, 128), runtime, chosen, max_turns)
        finally:
            runtime.close()
    result["model_kind"] = manifest["kind"]
    if as_json:
        _echo_json(result)
        return
    typer.echo(f"case {result['case_id']} ({result['template']}): {chosen['prompt']['messages'][1]['content']}")
    for event in result["trace"]:
        typer.echo(f"  call {event['tool']}({json.dumps(event['arguments'])}) -> {json.dumps(event['observation'])}")
    typer.echo(f"  answer: {result['answer']}")
    typer.echo(f"  verdict: {result['verdict']['outcome']} {result['verdict']['reason']}")


def register(app: typer.Typer) -> None:
    """Add the training commands to the CLI."""
    app.command()(models)
    app.command(name="tiny-model")(tiny_model)
    app.command()(train)
    app.command()(replay)
