"""The smaller frictions of a new user's first hour (issue 23 item 6), each as what the user now sees."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from blobkit.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _blobkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], capture_output=True, text=True, check=False,
                          timeout=300, cwd=ROOT)


def _flip_a_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("form", ["folder", "archive"])
def test_verify_on_a_flipped_byte_says_not_verified_and_exits_1_as_the_readme_says(
        kit_path: Path, tmp_path: Path, form: str) -> None:
    if form == "folder":
        kit = tmp_path / kit_path.name
        shutil.copytree(kit_path, kit)
        _flip_a_byte(kit / "sft.jsonl", 100)
    else:
        kit = tmp_path / "kit.tar.zst"
        shutil.copy(kit_path.parent / f"{kit_path.name}.tar.zst", kit)
        _flip_a_byte(kit, kit.stat().st_size // 2)
    result = _blobkit("verify", str(kit))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("NOT verified: ") and "Traceback" not in result.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "compare with what the kit stores" in readme
    assert "(exit 1 if anything differs, a file failing its sha256 included)" in readme


def test_verify_on_a_path_that_is_no_kit_is_still_bad_input(tmp_path: Path) -> None:
    assert _blobkit("verify", str(tmp_path / "missing")).returncode == 2


def test_info_on_a_kit_prints_the_reference_row_the_readme_shows(kit_path: Path) -> None:
    result = CliRunner().invoke(app, ["info", str(kit_path), "--json"])
    summary = json.loads(result.stdout)
    cases = summary["split"]["train_cases"] + summary["split"]["eval_cases"]
    assert summary["reference"] == {"cases": cases, "passed": cases}
    human = CliRunner().invoke(app, ["info", str(kit_path)]).stdout
    assert f"reference (the case's own chain and answer, re-run now; every one must pass): {cases}/{cases}" in human


def test_eval_prints_at_most_show_failing_cases_and_says_how_many_more(kit_path: Path, tmp_path: Path) -> None:
    trajectories = tmp_path / "null.jsonl"
    CliRunner().invoke(app, ["adversary", "--kit", str(kit_path), "--agent", "null", "--out", str(trajectories)])
    failing = len(trajectories.read_text(encoding="utf-8").splitlines())
    result = CliRunner().invoke(app, ["eval", "--kit", str(kit_path), "--trajectories", str(trajectories),
                                      "--show", "2"])
    listed = [line for line in result.stdout.splitlines() if line.startswith("  c-")]
    assert result.exit_code == 1 and len(listed) == 2
    assert f"… and {failing - 2} more failing cases" in result.stdout
    none = CliRunner().invoke(app, ["eval", "--kit", str(kit_path), "--trajectories", str(trajectories), "--show", "0"])
    assert not [line for line in none.stdout.splitlines() if line.startswith("  c-")]


def _commands(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``command`` (a click group: typer's vendored click, so read by its shape)."""
    found: list[tuple[str, ...]] = []
    for name, sub in getattr(command, "commands", {}).items():
        found += [(*prefix, name), *_commands(sub, (*prefix, name))]
    return found


def test_every_commands_help_fits_80_columns_without_cutting_an_option_name() -> None:
    import typer

    commands = _commands(typer.main.get_command(app))
    assert ("train",) in commands and ("serve", "keys", "create") in commands
    for command in commands:
        result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, command
        lines = result.output.splitlines()
        assert max(len(line) for line in lines) <= 80, (command, max(lines, key=len))
        assert not re.search(r"--[\w-]*…", result.output), command
        assert "Example:" in result.output or "Commands:" in result.output, command  # a group lists its commands


def test_third_party_progress_bars_and_warnings_are_quiet_unless_verbose(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import datasets
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    from blobkit.cli.output import third_party_output

    log = tmp_path / "out" / "train.log"
    with third_party_output(log, verbose=False):
        assert hub.are_progress_bars_disabled() and not hf_logging.is_progress_bar_enabled()
        assert not datasets.is_progress_bar_enabled()
        warnings.warn("a library's deprecation", FutureWarning, stacklevel=1)
        hf_logging.get_logger("transformers.modeling_utils").warning("a library's warning")
    assert "FutureWarning: a library's deprecation" in log.read_text(encoding="utf-8")
    assert "a library's warning" in log.read_text(encoding="utf-8")
    assert "deprecation" not in capsys.readouterr().err
    assert not hub.are_progress_bars_disabled() and hf_logging.is_progress_bar_enabled()
    with third_party_output(tmp_path / "verbose.log", verbose=True), pytest.warns(FutureWarning):
        warnings.warn("shown", FutureWarning, stacklevel=1)
    assert not (tmp_path / "verbose.log").exists()


def test_the_environment_of_this_test_run_keeps_the_hub_off() -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


@pytest.mark.slow  # a one-step tiny training run, its two evaluations and the export
def test_a_run_keeps_every_conversation_replayable_and_its_export_carries_a_real_model_card(
        kit_path: Path, tmp_path: Path) -> None:
    from trainers.config import TrainConfig
    from trainers.export import verify_export
    from trainers.plan import plan
    from trainers.run import run_training
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts
    from world_format.kit import open_kit

    with open_kit(kit_path) as kit:
        rows = kit.rows()
        tiny = build_tiny_model(row_texts(rows), tmp_path / "tiny", TinyModelConfig(
            seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))
        config = TrainConfig(kit=kit_path, out=tmp_path / "run", base=str(tiny), method="sft", target="local-torch",
                             full=True, max_turns=2, short_episodes=True, max_new_tokens=16, batch_size=2,
                             max_minutes=1e-9)
        report = run_training(config, kit, rows, plan(config, kit, rows, kit.path("sft.jsonl")), lambda line: None)
        world = kit.world().world.identity.id
    for label in ("base", "sft"):
        path = tmp_path / "run" / f"eval_cases_{label}.jsonl"
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert len(lines) == report.evaluations()[label].cases and all(line["agent"] == label for line in lines)
        assert all(line["messages"][0]["role"] == "system" for line in lines)
        rescored = CliRunner().invoke(app, ["eval", "--kit", str(kit_path), "--trajectories", str(path), "--json",
                                            "--min-pass-rate", "0"])
        summary = json.loads(rescored.stdout)["summary"]
        assert rescored.exit_code == 0 and summary["passed"] == report.evaluations()[label].passed, rescored.output
    manifest = verify_export(tmp_path / "run" / "export")  # the card is listed and checksummed
    assert "README.md" in manifest["files"]
    card = (tmp_path / "run" / "export" / "README.md").read_text(encoding="utf-8")
    for words in (f"# {world}:", "## How it was made", "| sft |", "95 % CI", manifest["kit_sha256"],
                  "license: not known to blobkit: a local model directory", "blobkit replay --model export",
                  "load_export", "stopped_by: max_minutes", "train_config.json"):
        assert words in card, words
