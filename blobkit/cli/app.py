"""The `blobkit` command line. It only translates: the library raises, this prints one line."""

from __future__ import annotations

import sys

import typer

from blobkit.errors import BlobkitError

from . import company, evaluate, runpod, serve, tinker, train, worker, world
from . import mcp as mcp_cli
from . import serve_model as serve_model_cli

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Turn a company's world into a verified training kit, and train small models on it.")
world.register(app)
evaluate.register(app)
train.register(app)
runpod.register(app)
company.register(app)
serve.register(app)
worker.register(app)
tinker.register(app)
serve_model_cli.register(app)
mcp_cli.register(app)


def _click_exceptions() -> tuple[type[Exception], ...]:
    """Usage-error classes: click's, and the copy of click that typer >= 0.29 vendors."""
    import click

    classes: list[type[Exception]] = [click.ClickException]
    try:
        from typer import _click as vendored

        classes.append(vendored.ClickException)
    except (ImportError, AttributeError):
        pass
    return tuple(classes)


def main() -> None:
    """Entry point: run the app, turning library errors (and the system's own OSError) into one line, exit code 2.

    Commands that finish with a verdict (not trainable, a failed job, a failed verification or
    replay) return their exit code; it is passed on to the shell.
    """
    try:
        code = app(standalone_mode=False)
    except BlobkitError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except _click_exceptions() as exc:
        exc.show()  # type: ignore[attr-defined]
        sys.exit(getattr(exc, "exit_code", 2))
    except OSError as exc:  # a write the library could not check beforehand (a disk filling up mid-run)
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
