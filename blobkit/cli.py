"""The `blobkit` command line. It only translates: the library raises, this prints one line."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import typer

from blobkit import cli_company, cli_runpod, cli_train
from blobkit.errors import BlobkitError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Turn a company's world into a verified training kit, and train small models on it.")


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False))


ProgressFn = Callable[[str, int, int], None]
STAGE_LABELS = {"load": "load world", "mint": "mint tasks", "gate": "gate tasks", "split": "split cases",
                "replay": "replay cases", "write": "write kit", "probes": "re-run probes"}


def _show_progress(as_json: bool) -> bool:
    """Progress goes to stderr only on a terminal, and never while --json output is piped."""
    if not sys.stderr.isatty():
        return False
    return not (as_json and not sys.stdout.isatty())


def _silent(stage: str, done: int, total: int) -> None:
    return None


@contextmanager
def _plain_counter(stream: TextIO) -> Iterator[ProgressFn]:
    """A one-line ``stage done/total`` counter, rewritten in place and cleared at the end."""

    def update(stage: str, done: int, total: int) -> None:
        stream.write(f"\r\x1b[K{STAGE_LABELS.get(stage, stage)} {done}/{total}")
        stream.flush()

    try:
        yield update
    finally:
        stream.write("\r\x1b[K")
        stream.flush()


@contextmanager
def _rich_bar() -> Iterator[ProgressFn]:
    """One rich progress bar per stage on stderr, removed when the command ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<13}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(STAGE_LABELS.get(stage, stage), total=max(total, 1))
            bar.update(tasks[stage], completed=done, total=max(total, 1))

        yield update


@contextmanager
def _progress(enabled: bool) -> Iterator[ProgressFn]:
    """The library's progress callback rendered on stderr: rich if installed, else a plain counter."""
    if not enabled:
        yield _silent
    elif importlib.util.find_spec("rich") is None:
        with _plain_counter(sys.stderr) as update:
            yield update
    else:
        with _rich_bar() as update:
            yield update


# --------------------------------------------------------------------------- world commands


@app.command()
def info(path: Path = typer.Argument(..., help="A world directory, a world.json, a kit directory or a kit archive."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Describe and verify a world or a kit.

    Example: blobkit info examples/retail_desk --json
    """
    from blobkit.describe import describe

    summary, human = describe(path)
    if as_json:
        _print_json(summary)
    else:
        typer.echo(human)


@app.command()
def pack(source: Path = typer.Option(..., "--source", help="Single-file world.json (rows inline)."),
         out: Path = typer.Option(..., "--out", help="Directory to write the packaged world to.")) -> None:
    """Turn a single-file world export into a packaged world directory (deterministic).

    Example: blobkit pack --source examples/retail_desk/world.json --out build/retail-world
    """
    from world_format.loader import load_world
    from world_format.pack import write_package

    loaded = load_world(source)
    write_package(loaded, out)
    typer.echo(f"packaged {loaded.world.identity.id} into {out} (world sha256 {loaded.sha256})")


@app.command()
def build(world: Path = typer.Option(..., "--world", help="World directory or world.json."),
          out: Path = typer.Option(..., "--out", help="Directory that receives the kit and its archive."),
          seed: int = typer.Option(42, help="Seed for minting, wording and the split."),
          max_tasks: int = typer.Option(12, "--max-tasks", min=1, max=12, help="Most tasks in the kit."),
          train_cases: int = typer.Option(48, "--train-cases", min=1, help="Training cases per task."),
          eval_cases: int = typer.Option(6, "--eval-cases", min=1, help="Held-out cases per task."),
          as_json: bool = typer.Option(False, "--json", help="Print the build record as JSON.")) -> None:
    """Build a verified, byte-reproducible training kit from a world.

    Example: blobkit build --world examples/retail_desk --out build/ --json
    """
    from blobkit.build import BuildConfig, build_kit

    config = BuildConfig(seed=seed, max_tasks=max_tasks, train_cases_per_task=train_cases,
                         eval_cases_per_task=eval_cases)
    with _progress(_show_progress(as_json)) as progress:
        record = build_kit(world, out, config, progress)
    if as_json:
        _print_json(record)
    else:
        typer.echo(f"kit ready: {record['kit']['path']}\n  archive {record['kit']['archive']} "
                   f"({record['kit']['bytes']} bytes, sha256 {record['kit']['sha256']})\n"
                   f"  tasks {record['tasks_count']} admitted, {record['tasks_rejected']} rejected; "
                   f"{record['sft_rows']} SFT rows; {record['eval_cases']} held-out cases")


@app.command()
def verify(kit: Path = typer.Argument(..., help="Kit directory or .tar.zst archive."),
           as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Re-execute every probe and SFT replay of a kit and compare with what it stores.

    Example: blobkit verify build/northwind-retail-train-kit.tar.zst
    """
    from blobkit.kitfiles import open_kit
    from blobkit.verify import verify_kit

    with open_kit(kit) as opened, _progress(_show_progress(as_json)) as progress:
        report = verify_kit(opened, progress)
    if as_json:
        _print_json(report)
    else:
        status = "verified" if report["verified"] else "NOT reproduced"
        typer.echo(f"{status}: {report['tasks_checked']} probe matrices, {report['train_cases_replayed']} replays, "
                   f"{report['eval_cases_checked']} held-out cases")
        for mismatch in report["mismatches"]:
            typer.echo(f"  mismatch: {mismatch}")
    if not report["verified"]:
        raise typer.Exit(1)


cli_train.register(app)
cli_runpod.register(app)
cli_company.register(app)


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
    """Entry point: run the app, turning library errors into one line and exit code 2.

    Commands that finish with a verdict (not trainable, a failed job, a failed verification)
    return their exit code; it is passed on to the shell.
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
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
