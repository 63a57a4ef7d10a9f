"""Company commands of the CLI: ``company inspect|train`` and ``jobs list|show|cancel|resume``.

The library (:mod:`blobkit.company`, :mod:`blobkit.jobs`) raises; these commands only translate.
"""

from __future__ import annotations

import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import typer

from .output import echo_json

company_app = typer.Typer(no_args_is_help=True, help="Inspect a company's export and train on it as a durable job.")
jobs_app = typer.Typer(no_args_is_help=True, help="List, show, cancel and resume company jobs.")

STORE_HELP = "Job store directory (SQLite job state plus the jobs' artifacts)."


def _stderr(line: str) -> None:
    typer.echo(line, err=True)


def _job_lines(job: dict[str, Any]) -> list[str]:
    """A human summary of a job record."""
    identity, usage = job["identity"], job["usage"]
    lines = [f"job {job['id']}: {job['status']}",
             f"  source {identity['source']['path']} (sha256 {identity['source']['sha256'][:16]}…)",
             f"  base model {identity['base_model']['id']} (revision {identity['base_model']['revision']})",
             f"  usage: {usage['active_seconds'] / 60:.2f} active minutes, {usage['model_calls']} model calls"
             f"{'' if usage['model_calls_exact'] else ' (upper bound)'}, {usage['optimizer_updates']} optimizer "
             f"updates, {usage['tokens']} tokens"]
    lines += [f"  stage {c['stage']}: completed {c['completed_at']}" for c in job["checkpoints"]]
    results = job["results"]
    for name in ("base", "sft", "rl"):
        if name in results:
            lines.append(f"  {name}: held-out pass rate {results[name]['pass_rate']:.3f} on "
                         f"{results[name]['cases']} cases")
    if "rl_minus_sft" in results:
        lines.append(f"  rl_minus_sft: {results['rl_minus_sft']['pass_rate']:+.3f}")
    if job["replay"]:
        lines.append(f"  replay: {job['replay']['outcome']} (case {job['replay'].get('case_id')})")
    lines += [f"  check {c['name']}: {c['status']}" + (f" — {c['detail']}" if c["detail"] else "")
              for c in job["checks"]]
    lines += [f"  error [{e['stage']}] {e['code']}: {e['message']}" for e in job["errors"]]
    if job["outcome"]:
        lines.append(f"  outcome: {job['outcome']['message']}")
    return lines


def _run_and_report(store: Any, job_id: str, as_json: bool) -> None:
    """Run a job and print its record; exit 1 unless it succeeded.

    Library and trainer chatter (TRL prints its logs to stdout) goes to stderr, keeping stdout for the result.
    """
    from blobkit.company import run_job

    _stderr(f"running {job_id} (Ctrl-C cancels at the next safe point)")
    with redirect_stdout(sys.stderr):
        job = run_job(store, job_id, _stderr)
    if as_json:
        echo_json(job)
    else:
        typer.echo("\n".join(_job_lines(job)))
    if job["status"] != "succeeded":
        raise typer.Exit(1)


# --------------------------------------------------------------------------- company


@company_app.command()
def inspect(source: Path = typer.Option(..., "--source", help="The export: world.json or a packaged world."),
            seed: int = typer.Option(42, "--seed", help="Seed for minting and the split."),
            eval_cases: int = typer.Option(1, "--eval-cases", min=1, help="Held-out cases per task."),
            as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Compile and qualify an export without training; say whether it can be trained (exit 1 if not).

    Example: blobkit company inspect --source examples/retail_desk/world.json --json
    """
    from blobkit.company import CompanyConfig, inspect_source

    report = inspect_source(source, CompanyConfig(seed=seed, eval_cases=eval_cases))
    if as_json:
        echo_json(report)
    else:
        typer.echo(f"{source}: {report['verdict']}")
        if report["valid"]:
            state = report["state"]
            typer.echo(f"  world {report['world']['id']}: {report['policies']} policies, "
                       f"{len(report['tools'])} tools, tables {state['tables']}, anchor rows {state['anchor_rows']}")
        if "admission" in report:
            admission = report["admission"]
            typer.echo(f"  minting and gating admit {admission['tasks_admitted']} tasks "
                       f"({admission['tasks_rejected']} rejected): {admission['train_cases']} training and "
                       f"{admission['eval_cases']} held-out cases, {admission['sft_rows']} SFT rows")
        for reason in report["reasons"]:
            typer.echo(f"  reason: {reason}")
    if not report["trainable"]:
        raise typer.Exit(1)


@company_app.command()
def train(source: Path = typer.Option(..., "--source", help="The export: world.json or a packaged world."),
          base_model: str = typer.Option(..., "--base-model",
                                         help="Catalog id (blobkit models), a local model directory, or 'tiny': "
                                              "build a tiny random-weight model from the kit (offline, CPU)."),
          job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
          run: bool = typer.Option(False, "--run", help="Run the pipeline now (otherwise the job is only queued)."),
          revision: str | None = typer.Option(None, "--revision", help="Pinned revision of a hub base."),
          seed: int | None = typer.Option(None, "--seed"),
          train_cases: int | None = typer.Option(None, "--train-cases", help="Training cases per task (48)."),
          eval_cases: int | None = typer.Option(None, "--eval-cases", help="Held-out cases per task (1)."),
          sft_epochs: float | None = typer.Option(None, "--sft-epochs", help="SFT epochs (5)."),
          rl_steps: int | None = typer.Option(None, "--rl-steps", help="GRPO steps (4)."),
          group_size: int | None = typer.Option(None, "--group-size", help="GRPO attempts per prompt (2)."),
          full: bool | None = typer.Option(None, "--full/--lora", help="All weights or LoRA (tiny: --full)."),
          lora_rank: int | None = typer.Option(None, "--lora-rank"),
          learning_rate: float | None = typer.Option(None, "--lr", help="2e-4 (tiny: 2e-3)."),
          batch_size: int | None = typer.Option(None, "--batch-size"),
          max_length: int | None = typer.Option(None, "--max-length"),
          eval_limit: int | None = typer.Option(None, "--eval-limit", help="Held-out cases per model (10)."),
          max_turns: int | None = typer.Option(None, "--max-turns", help="Turn cap of an episode (4)."),
          max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", help="Tokens per turn (128)."),
          max_minutes: float | None = typer.Option(None, "--max-minutes", help="Budget: active minutes (30)."),
          max_model_calls: int | None = typer.Option(None, "--max-model-calls", help="Budget: model calls (200)."),
          tiny_hidden_size: int | None = typer.Option(None, "--tiny-hidden-size", help="tiny: hidden size (128)."),
          tiny_layers: int | None = typer.Option(None, "--tiny-layers", help="tiny: layers (4)."),
          tiny_vocab_size: int | None = typer.Option(None, "--tiny-vocab-size", help="tiny: vocabulary (2048)."),
          as_json: bool = typer.Option(False, "--json", help="Print the job record as JSON.")) -> None:
    """Create a company job: qualify → kit → SFT → RL → evaluate → export → replay in a fresh process.

    Without --run the job is queued (run it later with jobs resume). --base-model tiny builds a tiny
    random-weight model from the kit, so the whole pipeline runs offline on a CPU.

    Example: blobkit company train --source examples/retail_desk/world.json --base-model tiny
    --job-store ./company-jobs --run
    """
    from blobkit.company import CompanyConfig, create_job
    from blobkit.jobs import JobStore

    config = CompanyConfig.for_base(
        base_model, seed=seed, train_cases=train_cases, eval_cases=eval_cases, sft_epochs=sft_epochs,
        rl_steps=rl_steps, group_size=group_size, full=full, lora_rank=lora_rank, learning_rate=learning_rate,
        batch_size=batch_size, max_length=max_length, eval_limit=eval_limit, max_turns=max_turns,
        max_new_tokens=max_new_tokens, max_minutes=max_minutes, max_model_calls=max_model_calls,
        tiny_hidden_size=tiny_hidden_size, tiny_layers=tiny_layers, tiny_vocab_size=tiny_vocab_size)
    with JobStore(job_store) as store:
        job_id = create_job(store, source, base_model, config, revision)
        if not run:
            job = store.get(job_id)
            if as_json:
                echo_json(job)
            else:
                typer.echo(f"queued {job_id}; run it with: blobkit jobs resume {job_id} --job-store {job_store}")
            return
        _run_and_report(store, job_id, as_json)


# --------------------------------------------------------------------------- jobs


@jobs_app.command("list")
def list_jobs(job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
              as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the jobs of a store, oldest first.

    Example: blobkit jobs list --job-store ./company-jobs --json
    """
    from blobkit.jobs import JobStore

    with JobStore(job_store, create=False) as store:
        jobs = store.list_jobs()
    if as_json:
        echo_json(jobs)
        return
    for job in jobs:
        typer.echo(f"{job['id']}  {job['status']:<9}  last stage {job['last_completed_stage'] or '-':<8}  "
                   f"{job['base_model']}  {job['source']}")


@jobs_app.command()
def show(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
         job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
         as_json: bool = typer.Option(False, "--json", help="Print the whole record as JSON.")) -> None:
    """Show a job: identity, status, checkpoints, usage, measured results, replay, checks and errors.

    Example: blobkit jobs show job-0123456789ab --job-store ./company-jobs --json
    """
    from blobkit.jobs import JobStore

    with JobStore(job_store, create=False) as store:
        job = store.get(job_id)
    if as_json:
        echo_json(job)
    else:
        typer.echo("\n".join(_job_lines(job)))


@jobs_app.command()
def cancel(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
           job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
           reason: str = typer.Option("requested with jobs cancel", "--reason", help="Recorded with the job.")) -> None:
    """Cancel a job: at once when queued, at the worker's next safe point when running.

    Example: blobkit jobs cancel job-0123456789ab --job-store ./company-jobs
    """
    from blobkit.jobs import JobStore

    with JobStore(job_store, create=False) as store:
        status = store.request_cancel(job_id, reason)
    if status == "running":
        typer.echo(f"cancel requested: {job_id} stops at its worker's next safe point")
    else:
        typer.echo(f"{job_id} is {status}")


@jobs_app.command()
def resume(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
           job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print the job record as JSON.")) -> None:
    """Run a queued job, or continue a failed, cancelled or killed one from its last completed stage.

    Example: blobkit jobs resume job-0123456789ab --job-store ./company-jobs
    """
    from blobkit.jobs import JobStore

    with JobStore(job_store, create=False) as store:
        _run_and_report(store, job_id, as_json)


def register(app: typer.Typer) -> None:
    """Add the company and jobs command groups to the CLI."""
    app.add_typer(company_app, name="company")
    app.add_typer(jobs_app, name="jobs")
