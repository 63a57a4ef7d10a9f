"""The ``blobkit runpod`` commands: manage the RunPod pods blobkit created (the library does the work)."""

from __future__ import annotations

import json
import os

import typer

runpod_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Manage RunPod pods created by `blobkit train --target runpod`.")


@runpod_app.command()
def sweep(yes: bool = typer.Option(False, "--yes", help="Terminate the listed pods (default: only list them)."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List pods named blobkit-* that no running job owns; with --yes, terminate them.

    Needs RUNPOD_API_KEY. Jobs hold a lease in BLOBKIT_RUNPOD_STATE_DIR while they run; their pods are left alone.

    Example: blobkit runpod sweep --yes
    """
    from trainers.runpod import sweep_from_env

    found = sweep_from_env(os.environ, confirm=yes)
    if as_json:
        typer.echo(json.dumps(found, indent=1, sort_keys=True))
        return
    if not found:
        typer.echo("no unowned blobkit pods")
        return
    for pod in found:
        state = "terminated" if pod["terminated"] else pod.get("error", "left running")
        typer.echo(f"{pod['id']}  {pod['name']}  {pod['status']}  ${pod['cost_per_hour']}/h  {state}")
    if not yes:
        typer.echo("run again with --yes to terminate these pods")


def register(app: typer.Typer) -> None:
    """Add the ``runpod`` command group to the CLI."""
    app.add_typer(runpod_app, name="runpod")
