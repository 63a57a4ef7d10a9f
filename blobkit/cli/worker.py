"""``blobkit worker``: connect to a training service, claim jobs, train them here, report back."""

from __future__ import annotations

from pathlib import Path

import typer

from .output import to_stderr


def worker(server: str = typer.Option(..., "--server", help="The service's URL (http://127.0.0.1:8000)."),
           token: str = typer.Option(..., "--token", help="The worker token from POST /api/v1/workers."),
           job_store: Path = typer.Option(Path("blobkit-worker-jobs"), "--job-store",
                                          help="Local job store: checkpoints, so a later attempt resumes here."),
           bases: list[str] | None = typer.Option(None, "--bases",
                                                  help="Bases this worker runs (repeat; default: tiny, and "
                                                       "SmolLM2-135M when its registry package is installed)."),
           supervise: bool = typer.Option(False, "--supervise", help="Keep claiming jobs one after another."),
           export: bool = typer.Option(False, "--upload-export", help="Also upload the export's files."),
           poll: float = typer.Option(2.0, "--poll", min=0.1, help="Seconds between claims while idle."),
           name: str | None = typer.Option(None, "--name", help="Name shown to people (default: the host)."),
           ) -> None:
    """Claim a queued job, run the company pipeline on it under its budgets, stream progress and upload evidence.

    Without --supervise it waits for one job, runs it and exits (0 when it succeeded).

    Example: blobkit worker --server http://127.0.0.1:8000 --token tml-… --job-store ./worker-jobs --bases tiny
    """
    from blobkit.worker import work

    code = work(server, token, job_store, bases, supervise, poll, to_stderr, export, name)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``worker`` to the CLI."""
    app.command()(worker)
