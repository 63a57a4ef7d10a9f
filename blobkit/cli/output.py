"""How commands print: one JSON document on stdout, or lines for people; progress on stderr only."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import typer

ProgressFn = Callable[[str, int, int], None]
STAGE_LABELS = {"load": "load world", "mint": "mint tasks", "gate": "gate tasks", "split": "split cases",
                "replay": "replay cases", "rename": "renamed replays", "renamed rows": "replay renamed rows",
                "write": "write kit", "probes": "re-run probes", "case probes": "probe cases"}


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON with sorted keys (one document on stdout)."""
    typer.echo(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False))


def to_stderr(line: str) -> None:
    """Print a progress line on stderr (stdout stays for the result)."""
    typer.echo(line, err=True)


def show_progress(as_json: bool) -> bool:
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
def progress(enabled: bool) -> Iterator[ProgressFn]:
    """The library's progress callback rendered on stderr: rich if installed, else a plain counter."""
    if not enabled:
        yield _silent
    elif importlib.util.find_spec("rich") is None:
        with _plain_counter(sys.stderr) as update:
            yield update
    else:
        with _rich_bar() as update:
            yield update


@contextmanager
def third_party_output(log: Path, verbose: bool) -> Iterator[None]:
    """Unless ``verbose``: the Hugging Face libraries' progress bars off (hub, transformers, datasets), and Python
    warnings and transformers' log records appended to ``log`` (created when the first arrives) instead of the
    terminal. Everything is restored afterwards. blobkit's own progress (the loss bar, stage lines) is untouched."""
    if verbose:
        yield
        return
    import logging
    import warnings

    import datasets
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    def append(text: str) -> None:
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError:  # the log cannot be written (the preflight says why): the terminal gets it instead
            sys.stderr.write(text)

    def write(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:
        append(warnings.formatwarning(message, category, filename, lineno, line))

    class _LazyFile(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            append(self.format(record) + "\n")

    bars = (hub.are_progress_bars_disabled(), hf_logging.is_progress_bar_enabled(),
            datasets.is_progress_bar_enabled())
    hub.disable_progress_bars()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    handler = _LazyFile()
    hf_logging.disable_default_handler()
    hf_logging.add_handler(handler)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = write
            yield
    finally:
        hf_logging.remove_handler(handler)
        hf_logging.enable_default_handler()
        if not bars[0]:
            hub.enable_progress_bars()
        if bars[1]:
            hf_logging.enable_progress_bar()
        if bars[2]:
            datasets.enable_progress_bars()
