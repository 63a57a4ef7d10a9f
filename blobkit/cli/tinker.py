"""``blobkit tinker …`` (train jobs, checkpoints, usage of the Tinker-compatible API) and the administrator's
``blobkit serve policy set`` and ``blobkit serve bases add``.

Each reads or writes the service store directly with the library functions the routes call
(:mod:`blobkit.service.tinker.tables`), so the CLI and ``GET /tinker/api/v1/train_jobs`` print the
same records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .output import echo_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from blobkit.service import ServiceStore

tinker_app = typer.Typer(no_args_is_help=True, help="Train jobs, checkpoints and usage of the Tinker-compatible API.")
jobs_app = typer.Typer(no_args_is_help=True, help="Train jobs (one per SDK session).")
checkpoints_app = typer.Typer(no_args_is_help=True, help="Saved checkpoints (training state and sampler weights).")
policy_app = typer.Typer(no_args_is_help=True, help="Administrator policies of the Tinker-compatible API.")
bases_app = typer.Typer(no_args_is_help=True, help="Local model directories the Tinker-compatible API may load.")

STORE = typer.Option(..., "--store", help="Service store directory (as given to blobkit serve).")
WORKSPACE = typer.Option(..., "--workspace", help="Workspace whose records to show.")
JSON = typer.Option(False, "--json", help="Print JSON.")


def _store(path: Path) -> ServiceStore:
    from blobkit.service import ServiceStore

    return ServiceStore(path, create=False)


def _echo_records(records: Sequence[BaseModel], as_json: bool, line: Callable[[Any], str]) -> None:
    """``records`` as one JSON list with ``--json``, else ``line(record)`` for each."""
    if as_json:
        echo_json([record.model_dump(mode="json") for record in records])
        return
    for record in records:
        typer.echo(line(record))


@jobs_app.command("list")
def jobs_list(store: Path = STORE, workspace: str = WORKSPACE, as_json: bool = JSON) -> None:
    """The workspace's train jobs, newest first.

    Example: blobkit tinker jobs list --store ./service --workspace acme
    """
    from blobkit.service.tinker import tables

    with _store(store) as opened:
        jobs = tables.list_jobs(opened, workspace)
    _echo_records(jobs, as_json, lambda job: f"{job.train_job_id}  {job.status:<11} {job.base_model or '-':<24} "
                  f"owner {job.owner}  steps {job.usage.optimizer_steps}  last {job.last_checkpoint or '-'}")


@jobs_app.command("status")
def jobs_status(job_id: str = typer.Argument(..., help="Train job id (tj-…, the SDK's session id)."),
                store: Path = STORE, workspace: str = WORKSPACE, as_json: bool = JSON) -> None:
    """One train job: status, owner, base, last checkpoint and usage.

    Example: blobkit tinker jobs status tj-0123456789abcdef --store ./service --workspace acme
    """
    from blobkit.service.tinker import tables

    with _store(store) as opened:
        job = tables.get_job(opened, workspace, job_id)
    if as_json:
        echo_json(job.model_dump(mode="json"))
        return
    for key, value in job.model_dump(mode="json").items():
        typer.echo(f"{key}: {value}")


@checkpoints_app.command("list")
def checkpoints_list(store: Path = STORE, workspace: str = WORKSPACE,
                     run: str | None = typer.Option(None, "--run", help="Only this training run (SESSION:train:N)."),
                     as_json: bool = JSON) -> None:
    """The workspace's checkpoints, newest first: kind, owner, purpose, sha256.

    Example: blobkit tinker checkpoints list --store ./service --workspace acme
    """
    from blobkit.service.tinker import tables

    with _store(store) as opened:
        checkpoints = tables.list_checkpoints(opened, workspace, run)
    _echo_records(checkpoints, as_json, lambda c: f"{c.tinker_path}  {c.kind:<8} {c.purpose:<16} owner {c.owner}  "
                  f"sha256 {c.sha256[:16]}  {c.bytes} bytes")


@checkpoints_app.command("export")
def checkpoints_export(path: str = typer.Argument(..., help="tinker:// path of a checkpoint."),
                       out: Path = typer.Option(..., "--out", help="Export directory to write."),
                       store: Path = STORE, workspace: str = WORKSPACE) -> None:
    """Export a checkpoint's adapter as a blobkit export (what blobkit replay and blobkit eval --model load).

    Example: blobkit tinker checkpoints export tinker://tj-…:train:0/sampler_weights/final --out ./export
    --store ./service --workspace acme
    """
    from blobkit.service.tinker.export import export_checkpoint

    with _store(store) as opened:
        written = export_checkpoint(opened, workspace, path, out)
    typer.echo(str(written))


@tinker_app.command("usage")
def usage(store: Path = STORE, workspace: str = WORKSPACE, as_json: bool = JSON) -> None:
    """Usage per train job: forward/backward tokens, sampled tokens, optimizer steps, wall seconds.

    Example: blobkit tinker usage --store ./service --workspace acme
    """
    from blobkit.service.tinker import tables

    with _store(store) as opened:
        jobs = tables.list_jobs(opened, workspace)
    if as_json:
        echo_json([{"train_job_id": job.train_job_id, **job.usage.model_dump()} for job in jobs])
        return
    for job in jobs:
        u = job.usage
        typer.echo(f"{job.train_job_id}  forward/backward tokens {u.forward_backward_tokens}  sampled tokens "
                   f"{u.sampled_tokens}  optimizer steps {u.optimizer_steps}  wall {u.wall_seconds:.1f} s")


@policy_app.command("set")
def policy_set(store: Path = typer.Option(..., "--store", help="Service store directory."),
               workspace: str = typer.Option(..., "--workspace", help="Workspace the policy binds."),
               user: str | None = typer.Option(None, "--user", help="Bind one key (its id: the 16 hex digits after "
                                                                   "tml-); default: every key of the workspace."),
               models: list[str] = typer.Option(..., "--models", help="Permitted base model (repeat for several)."),
               max_lora_rank: int = typer.Option(32, "--max-lora-rank", min=1, help="Largest LoRA rank."),
               max_tokens: int | None = typer.Option(None, "--max-tokens", min=1,
                                                     help="Token budget (forward/backward plus sampled)."),
               deadline: str | None = typer.Option(None, "--deadline", help="ISO 8601 time after which every "
                                                                           "operation is refused (UTC if no zone)."),
               as_json: bool = JSON) -> None:
    """Set the policy of a workspace (or of one key), replacing the one it had.

    Example: blobkit serve policy set --store ./service --workspace acme --models tiny --max-lora-rank 16
    --max-tokens 1000000 --deadline 2027-01-31T00:00:00Z
    """
    from blobkit.errors import ConfigError
    from blobkit.service.tinker import tables
    from blobkit.service.tinker.policies import parse_deadline
    from blobkit.service.tinker.records import Policy

    try:
        when = parse_deadline(deadline) if deadline else None
    except ValueError:
        raise ConfigError(f"--deadline {deadline!r} is not an ISO 8601 time (2027-01-31T00:00:00Z)") from None
    from blobkit.service import ServiceStore

    policy = Policy(workspace=workspace, user=user, models=list(models), max_lora_rank=max_lora_rank,
                    max_tokens=max_tokens, deadline=when, created_at=time.time())
    with ServiceStore(store) as opened:
        tables.set_policy(opened, policy)
    if as_json:
        echo_json(policy.model_dump(mode="json"))
    else:
        typer.echo(f"policy of workspace {workspace} ({'key ' + user if user else 'every key'}) set: models "
                   f"{', '.join(models)}; max LoRA rank {max_lora_rank}; max tokens {max_tokens or 'unlimited'}; "
                   f"deadline {deadline or 'none'}")


@policy_app.command("list")
def policy_list(store: Path = typer.Option(..., "--store", help="Service store directory."),
                workspace: str | None = typer.Option(None, "--workspace", help="Only this workspace."),
                as_json: bool = JSON) -> None:
    """Every policy.

    Example: blobkit serve policy list --store ./service
    """
    from blobkit.service.tinker import tables

    with _store(store) as opened:
        found = tables.list_policies(opened, workspace)
    _echo_records(found, as_json, lambda p: f"{p.workspace}  {p.user or '*':<16}  models {', '.join(p.models)}  "
                  f"rank <= {p.max_lora_rank}  tokens {p.max_tokens or 'unlimited'}  deadline {p.deadline or 'none'}")


@bases_app.command("add")
def bases_add(name: str = typer.Argument(..., help="Name scripts pass as base_model."),
              path: Path = typer.Argument(..., help="Model directory (config.json, safetensors, tokenizer)."),
              store: Path = typer.Option(..., "--store", help="Service store directory."),
              as_json: bool = JSON) -> None:
    """Register a local model directory as a base the Tinker-compatible API may load.

    Example: blobkit serve bases add --store ./service tiny ./out/tiny
    """
    from blobkit.service import ServiceStore
    from blobkit.service.tinker.bases import register_base

    with ServiceStore(store) as opened:
        added = register_base(opened, name, path)
    if as_json:
        echo_json(added.model_dump(mode="json"))
    else:
        typer.echo(f"base {added.name}: {added.path} (sha256 {added.sha256[:16]})")


def register(app: typer.Typer) -> None:
    """Add ``tinker`` and the ``serve policy``/``serve bases`` groups."""
    from .serve import serve_app

    tinker_app.add_typer(jobs_app, name="jobs")
    tinker_app.add_typer(checkpoints_app, name="checkpoints")
    app.add_typer(tinker_app, name="tinker")
    serve_app.add_typer(policy_app, name="policy")
    serve_app.add_typer(bases_app, name="bases")
