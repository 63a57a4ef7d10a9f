"""Company commands of the CLI: ``company inspect|train`` and ``jobs list|show|cancel|resume``.

The library (:mod:`blobkit.company`) raises; these commands only translate. ``company train``'s options
are generated from the parts of :class:`~blobkit.company.CompanyConfig` (the build, the SFT and RL
TrainConfigs, the tiny model, the budgets), so their help is the fields' docstrings and their shown
defaults are the recipe's own, for a real base and for ``--base-model tiny``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from inspect import Parameter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from blobkit.builder.coverage import coverage_lines
from blobkit.errors import ConfigError
from trainers.intervals import rate_text

from .options import given, model_options, with_parameters
from .output import echo_json

if TYPE_CHECKING:
    from blobkit.company import CompanyConfig

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
            lines.append(f"  {name}: held-out pass rate {rate_text(results[name])}")
    if "rl_minus_sft" in results:
        lines.append(f"  rl_minus_sft: {results['rl_minus_sft']['pass_rate']:+.3f}")
    if "too_small" in results.get("held_out", {}):
        lines.append(f"  held-out: {results['held_out']['too_small']}")
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

BUILD_OPTIONS = ("seed", "max_tasks", "train_cases_per_task", "eval_cases_per_task", "eval_percent", "scan_limit")
"""BuildConfig fields that are options of ``company inspect`` and ``company train`` (``--seed`` also seeds training)."""
TRAINING_OPTIONS = ("full", "lora_rank", "learning_rate", "weight_decay", "max_length", "max_turns", "short_episodes",
                    "max_new_tokens", "eval_limit")
"""TrainConfig fields both stages use: one unprefixed flag sets the SFT and the RL value."""
SFT_OPTIONS = ("epochs", "batch_size", "lr_scheduler", "warmup_ratio", "packing", "group_by_length",
               "grounding_repeats", "answer_quote_repeats")
"""TrainConfig fields of the SFT stage only: ``--sft-*``."""
RL_OPTIONS = ("steps", "group_size", "batch_size", "temperature")
"""TrainConfig fields of the RL (GRPO) stage only: ``--rl-*``."""
TINY_OPTIONS = ("seed", "hidden_size", "num_layers", "num_heads", "vocab_size")
"""TinyModelConfig fields: ``--tiny-*`` (used with ``--base-model tiny`` only)."""
SPELLED = {"full": ("--full/--lora",)}
SFT_SPELLED = {"batch_size": ("--sft-batch-size", "--batch-size")}
RL_SPELLED = {"group_size": ("--group-size", "--rl-group-size")}
"""Flags kept as the company CLI has always spelled them (by field name, per group)."""
SEED_HELP = "Seed for minting, wording and the split, and for SFT and GRPO (data order, initialisation, sampling)."


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


def _defaults(part: str, names: tuple[str, ...]) -> dict[str, str]:
    """The default of each field for a real base, and for --base-model tiny where that differs."""
    from blobkit.company import TINY, CompanyConfig

    real, tiny = CompanyConfig(), CompanyConfig.for_base(TINY)
    shown = {}
    for name in names:
        values = [_text(getattr(getattr(config, part), name)) for config in (real, tiny)]
        shown[name] = values[0] if values[0] == values[1] else f"{values[0]}; --base-model tiny: {values[1]}"
    return shown


def _train_options() -> list[Parameter]:
    """``company train``'s options, generated from the parts of CompanyConfig (help: each field's docstring)."""
    from blobkit.builder import BuildConfig
    from blobkit.company import CompanyBudgets
    from trainers.config import TrainConfig
    from trainers.tiny_model import TinyModelConfig

    return [
        *model_options(BuildConfig, only=BUILD_OPTIONS, defaults=_defaults("build", BUILD_OPTIONS),
                       helps={"seed": SEED_HELP}),
        *model_options(TrainConfig, only=TRAINING_OPTIONS, defaults=_defaults("sft", TRAINING_OPTIONS),
                       flags=SPELLED, helps={"eval_limit": "Evaluate at most this many held-out cases (none: all)."}),
        *model_options(TrainConfig, only=SFT_OPTIONS, prefix="sft_", defaults=_defaults("sft", SFT_OPTIONS),
                       flags=SFT_SPELLED, helps={"batch_size": "Rows per SFT optimizer step."}),
        *model_options(TrainConfig, only=RL_OPTIONS, prefix="rl_", defaults=_defaults("rl", RL_OPTIONS),
                       flags=RL_SPELLED,
                       helps={"batch_size": "Episodes per GRPO step (batch_size // group_size prompts); default: "
                                            "one prompt per step."}),
        *model_options(TinyModelConfig, only=TINY_OPTIONS, prefix="tiny_", defaults=_defaults("tiny", TINY_OPTIONS)),
        *model_options(CompanyBudgets, defaults=_defaults("budgets", tuple(CompanyBudgets.model_fields))),
    ]


@contextmanager
def _config_errors() -> Iterator[None]:
    """A config the options make invalid is a ConfigError naming the field (one line, exit 2)."""
    from pydantic import ValidationError

    try:
        yield
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ConfigError(f"{exc.title}: {where + ': ' if where else ''}{first['msg']}") from None


def company_config(base_model: str, options: dict[str, Any], allow_small_held_out: bool = False) -> CompanyConfig:
    """The job's CompanyConfig: the recipe for ``base_model``, then the options given."""
    from blobkit.builder import BuildConfig
    from blobkit.company import CompanyBudgets, CompanyConfig
    from trainers.config import TrainConfig
    from trainers.tiny_model import TinyModelConfig

    training = {**given(options, BuildConfig, only=("seed",)), **given(options, TrainConfig, only=TRAINING_OPTIONS)}
    with _config_errors():
        return CompanyConfig.for_base(
            base_model, build=given(options, BuildConfig, only=BUILD_OPTIONS),
            sft={**training, **given(options, TrainConfig, only=SFT_OPTIONS, prefix="sft_")},
            rl={**training, **given(options, TrainConfig, only=RL_OPTIONS, prefix="rl_")},
            tiny=given(options, TinyModelConfig, only=TINY_OPTIONS, prefix="tiny_"),
            budgets=given(options, CompanyBudgets), allow_small_held_out=allow_small_held_out)


def _inspect_options() -> list[Parameter]:
    from blobkit.builder import BuildConfig
    from blobkit.company import CompanyConfig

    shown = {name: _text(getattr(CompanyConfig().build, name)) for name in BUILD_OPTIONS}
    return model_options(BuildConfig, only=BUILD_OPTIONS, defaults=shown,
                         helps={"seed": "Seed for minting, wording and the split."})


def inspect(source: Path = typer.Option(..., "--source", help="The export: world.json or a packaged world."),
            as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."), **options: Any) -> None:
    """Compile and qualify an export without training or writing anything; say whether it can be trained.

    Exits 1 when it cannot. The kit is built in memory with the company's build settings for a real base.

    Example: blobkit company inspect --source examples/retail_desk/world.json --json
    """
    from blobkit.builder import BuildConfig
    from blobkit.company import CompanyConfig, inspect_source

    with _config_errors():
        build = BuildConfig(**{**CompanyConfig().build.model_dump(), **given(options, BuildConfig)})
    report = inspect_source(source, CompanyConfig(build=build))
    if as_json:
        echo_json(report)
    else:
        typer.echo("\n".join(_report_lines(source, report)))
    if not report["trainable"]:
        raise typer.Exit(1)


def _report_lines(source: Path, report: dict[str, Any]) -> list[str]:
    """A human summary of an inspection report."""
    lines = [f"{source}: {report['verdict']}"]
    if report["valid"]:
        state = report["state"]
        lines.append(f"  world {report['world']['id']}: {report['policies']} policies, {len(report['tools'])} tools, "
                     f"tables {state['tables']}, anchor rows {state['anchor_rows']}")
    if "admission" in report:
        admission = report["admission"]
        lines.append(f"  minting and gating admit {admission['tasks_admitted']} tasks ({admission['tasks_rejected']} "
                     f"rejected): {admission['train_cases']} training and {admission['eval_cases']} held-out cases, "
                     f"{admission['sft_rows']} SFT rows")
        lines += coverage_lines(admission["tool_coverage"])
    return lines + [f"  reason: {reason}" for reason in report["reasons"]]


def _refuse_untrainable(source: Path, config: CompanyConfig) -> None:
    """NotTrainableError (one line, nothing written) unless inspection finds the source trainable or the only
    fault is a held-out set below the minimum and the config waives it."""
    from blobkit.company import inspect_source
    from blobkit.errors import NotTrainableError

    report = inspect_source(source, config)
    if report["trainable"] or report.get("held_out_minimum_waived"):
        return
    hint = ("; or pass --allow-small-held-out to train anyway (its results are then marked held-out too small "
            "to mean anything)" if report.get("held_out_too_small") else "")
    raise NotTrainableError(f"{source}: {report['verdict']}: {'; '.join(report['reasons'])}{hint}; see blobkit "
                            f"company inspect --source {source}")


def train(source: Path = typer.Option(..., "--source", help="The export: world.json or a packaged world."),
          base_model: str = typer.Option(..., "--base-model",
                                         help="Catalog id (blobkit models), a local model directory, or 'tiny': "
                                              "build a tiny random-weight model from the kit (offline, CPU)."),
          job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
          run: bool = typer.Option(False, "--run", help="Run the pipeline now (otherwise the job is only queued)."),
          revision: str | None = typer.Option(None, "--revision", help="Pinned revision of a hub base."),
          as_json: bool = typer.Option(False, "--json", help="Print the job record as JSON."),
          allow_small_held_out: bool = typer.Option(
              False, "--allow-small-held-out",
              help="Train even when the held-out cases concern fewer independent entities than company inspect's "
                   "minimum; the job's record and results then say held-out too small to mean anything."),
          **options: Any) -> None:
    """Create a company job: qualify → kit → SFT → RL → evaluate → export → replay in a fresh process.

    The source is inspected first: one company inspect calls not trainable is refused before any job
    is created. Without --run the job is queued (run it later with jobs resume). --base-model tiny builds a tiny
    random-weight model from the kit, so the whole pipeline runs offline on a CPU. Training settings
    start from a TrainConfig preset (tiny for --base-model tiny, as the demo; lora for a real base)
    with the company's own choices on top; each default below names both where they differ. Training
    flags without a prefix set both stages; --sft-* and --rl-* set one.

    Example: blobkit company train --source examples/retail_desk/world.json --base-model tiny
    --job-store ./company-jobs --run
    """
    from blobkit.company import JobStore, create_job

    config = company_config(base_model, options, allow_small_held_out)
    _refuse_untrainable(source, config)
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


SERVER_HELP = "A training service's URL (blobkit serve) instead of a local --job-store."
TOKEN_HELP = "The service's API key or worker token (with --server)."


def _where(job_store: Path | None, server: str | None, token: str | None) -> Path | None:
    """The local store, or None for a server; ConfigError unless exactly one is given (a server with a token)."""
    if (job_store is None) == (server is None):
        raise ConfigError("pass either --job-store DIR or --server URL --token T")
    if server is not None and not token:
        raise ConfigError("--server needs --token (an API key of the workspace, or a worker token)")
    return job_store


def _remote_lines(job: Any) -> list[str]:
    """A human summary of a service job (:class:`blobkit.service.records.TrainingJob`)."""
    lines = [f"job {job.job_id}: {job.status} ({job.launch}, base {job.base_model}, environment {job.env_id})"]
    if job.progress is not None:
        p = job.progress
        lines.append(f"  progress: stage {p.stage}, {p.model_calls}/{p.max_model_calls} model calls, "
                     f"{p.active_minutes:.2f}/{p.max_minutes} active minutes")
    results = job.results
    for name in ("base", "sft", "rl"):
        rate = getattr(results, name, None) if results else None
        if rate is not None:
            lines.append(f"  {name}: held-out pass rate {rate_text(rate.model_dump())}")
    if results is not None and results.rl_minus_sft is not None:
        lines.append(f"  rl_minus_sft: {results.rl_minus_sft.pass_rate:+.3f}")
    if job.replay is not None:
        lines.append(f"  replay: {job.replay.outcome} (case {job.replay.case_id})")
    lines += [f"  check {c.name}: {c.status}" + (f" — {c.detail}" if c.detail else "") for c in job.checks]
    lines += [f"  attempt {a.number}: {a.status} (worker {a.worker_id})" for a in job.attempts]
    if job.outcome is not None:
        lines.append(f"  outcome: {job.outcome.message}")
    return lines


@jobs_app.command("list")
def list_jobs(job_store: Path | None = typer.Option(None, "--job-store", help=STORE_HELP),
              server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
              token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
              as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the jobs of a store (or of a training service's workspace), oldest first.

    Example: blobkit jobs list --job-store ./company-jobs --json
    """
    from blobkit.company import JobStore

    if _where(job_store, server, token) is None:
        from blobkit.service.remote import RemoteJobs

        with RemoteJobs(str(server), str(token)) as remote:
            listed = remote.list()
        if as_json:
            echo_json(listed.model_dump(mode="json"))
        for remote_job in [] if as_json else listed.jobs:
            typer.echo(f"{remote_job.job_id}  {remote_job.status:<9}  {remote_job.launch:<6}  "
                       f"{remote_job.base_model}  {remote_job.env_id}")
        return
    assert job_store is not None
    with JobStore(job_store, create=False) as store:
        jobs = store.list_jobs()
    if as_json:
        echo_json(jobs)
        return
    for job in jobs:
        tail = f"DAMAGED: {job['damaged']}" if job.get("damaged") else f"{job['base_model']}  {job['source']}"
        typer.echo(f"{job['id']}  {job['status']:<9}  last stage {job['last_completed_stage'] or '-':<8}  {tail}")


@jobs_app.command()
def show(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
         job_store: Path | None = typer.Option(None, "--job-store", help=STORE_HELP),
         server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
         token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
         as_json: bool = typer.Option(False, "--json", help="Print the whole record as JSON.")) -> None:
    """Show a job: identity, status, checkpoints, usage, measured results, replay, checks and errors.

    Example: blobkit jobs show job-0123456789ab --job-store ./company-jobs --json
    """
    from blobkit.company import JobStore

    if _where(job_store, server, token) is None:
        from blobkit.service.remote import RemoteJobs

        with RemoteJobs(str(server), str(token)) as remote:
            record = remote.get(job_id)
        if as_json:
            echo_json(record.model_dump(mode="json"))
        else:
            typer.echo("\n".join(_remote_lines(record)))
        return
    assert job_store is not None

    with JobStore(job_store, create=False) as store:
        job = store.get(job_id)
    if as_json:
        echo_json(job)
    else:
        typer.echo("\n".join(_job_lines(job)))


@jobs_app.command()
def cancel(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
           job_store: Path | None = typer.Option(None, "--job-store", help=STORE_HELP),
           server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
           token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
           reason: str = typer.Option("requested with jobs cancel", "--reason", help="Recorded with the job.")) -> None:
    """Cancel a job: at once when queued (or its worker is gone), at the worker's next safe point when running.

    Example: blobkit jobs cancel job-0123456789ab --job-store ./company-jobs
    """
    from blobkit.company import JobStore

    if _where(job_store, server, token) is None:
        from blobkit.service.remote import RemoteJobs

        with RemoteJobs(str(server), str(token)) as remote:
            record = remote.cancel(job_id)
        done = record.status == "cancelled"
        typer.echo(f"{job_id} is cancelled" if done else
                   f"cancel requested: {job_id} stops at its worker's next safe point")
        return
    assert job_store is not None

    with JobStore(job_store, create=False) as store:
        status = store.request_cancel(job_id, reason)
    if status == "running":
        typer.echo(f"cancel requested: {job_id} stops at its worker's next safe point")
    else:
        typer.echo(f"{job_id} is {status}")


@jobs_app.command()
def resume(job_id: str = typer.Argument(..., help="Job id (see jobs list)."),
           job_store: Path = typer.Option(..., "--job-store", help=STORE_HELP),
           max_minutes: float | None = typer.Option(None, "--max-minutes", min=0, help="Raise the job's active-minutes "
                                                    "budget to this (a job a budget stopped continues)."),
           max_model_calls: int | None = typer.Option(None, "--max-model-calls", min=1, help="Raise the job's "
                                                      "model-call budget to this."),
           as_json: bool = typer.Option(False, "--json", help="Print the job record as JSON.")) -> None:
    """Run a queued job, or continue a failed, cancelled or killed one from its last completed stage.

    --max-minutes and --max-model-calls raise the job's budgets first (recorded in the job's budgets.raised), so a
    job that ran out of one continues.

    Example: blobkit jobs resume job-0123456789ab --job-store ./company-jobs
    """
    from blobkit.company import JobStore

    with JobStore(job_store, create=False) as store:
        if max_minutes is not None or max_model_calls is not None:
            store.raise_budgets(job_id, max_minutes, max_model_calls)
        _run_and_report(store, job_id, as_json)


def register(app: typer.Typer) -> None:
    """Add the company and jobs command groups to the CLI."""
    company_app.command()(with_parameters(inspect, _inspect_options()))
    company_app.command()(with_parameters(train, _train_options()))
    app.add_typer(company_app, name="company")
    app.add_typer(jobs_app, name="jobs")
