"""Build progress: the library reports stages through a callback; only the CLI renders them."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import output as cli

STAGES = ["load", "mint", "gate", "split", "replay", "write"]


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_build_reports_every_stage_in_order_and_finishes_each(small_world_file: Path, tmp_path: Path) -> None:
    reports: list[tuple[str, int, int]] = []
    build_kit(small_world_file, tmp_path / "out", BuildConfig(train_cases_per_task=2, eval_cases_per_task=1),
              lambda stage, done, total: reports.append((stage, done, total)))
    order = [stage for index, (stage, _, _) in enumerate(reports) if index == 0 or reports[index - 1][0] != stage]
    assert order == STAGES
    for stage in STAGES:
        last = [report for report in reports if report[0] == stage][-1]
        assert last[1] == last[2] > 0, last
    gate = [report for report in reports if report[0] == "gate"]
    assert gate[-1][2] == len({done for _, done, _ in gate}) - 1  # one report per task, then the end


def test_the_library_never_imports_the_cli_toolkits() -> None:
    code = ("import sys, blobkit.builder, blobkit.verify, world_format.loader; "
            "print(sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(("stderr_tty", "stdout_tty", "as_json", "shown"), [
    (False, False, False, False),
    (False, True, False, False),
    (True, True, False, True),
    (True, False, False, True),
    (True, True, True, True),
    (True, False, True, False),
])
def test_progress_shows_only_on_a_terminal_and_never_with_piped_json(
        monkeypatch: pytest.MonkeyPatch, stderr_tty: bool, stdout_tty: bool, as_json: bool, shown: bool) -> None:
    monkeypatch.setattr(sys, "stderr", _Terminal() if stderr_tty else io.StringIO())
    monkeypatch.setattr(sys, "stdout", _Terminal() if stdout_tty else io.StringIO())
    assert cli.show_progress(as_json) is shown


def test_disabled_progress_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    with cli.progress(False) as update:
        update("gate", 1, 3)
    assert stream.getvalue() == ""


def test_without_rich_a_plain_counter_rewrites_one_line_and_clears_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "rich" else real_find_spec(name, *args))
    with cli.progress(True) as update:
        update("gate", 1, 3)
        update("replay", 2, 40)
    text = stream.getvalue()
    assert "gate tasks 1/3" in text and "replay cases 2/40" in text
    assert "\n" not in text and text.endswith("\r\x1b[K")


def test_a_piped_cli_build_keeps_stderr_clean(small_world_file: Path, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", "build", "--world", str(small_world_file), "--out",
                             str(tmp_path / "o"), "--train-cases", "2", "--eval-cases", "1", "--json"],
                            capture_output=True, text=True, check=True)
    assert result.stderr == "" and result.stdout.startswith("{")
