"""The handed evidence of issue 24 (shared/cases/evidence2), each folder's README expectation as a test.

These tests reach blobkit only through its CLI and the kit reader, so they run against any version of
it. The siblings of each kind are tested beside the code that fixes them: test_scores.py (scores over
distinct cases, model output in every shape), test_text_round_trip.py (text through every file and
tool format), test_schema_semantics.py (JSON Schema and seed semantics).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED
from typer.testing import CliRunner

from blobkit.cli import app

EVIDENCE = SHARED / "cases" / "evidence2"
DUPLICATES = EVIDENCE / "01-eval-duplicate-case-ids"
SEPARATORS = EVIDENCE / "05-u2028-in-seed-breaks-kit"
pytestmark = pytest.mark.skipif(not EVIDENCE.is_dir(), reason="the handed cases are not beside this checkout")


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def retail(example_kits: dict[str, Path]) -> Path:
    """The retail example's default build: the kit the handed trajectory files were written for."""
    return example_kits["retail_desk"]


# --------------------------------------------------------------------------- 01: a score counts the kit's cases


def test_01_one_passing_trajectory_repeated_66_times_is_one_case_and_a_partial_score(retail: Path) -> None:
    result = _cli("eval", "--kit", str(retail), "--trajectories", str(DUPLICATES / "dup.jsonl"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "pass rate 1.000 (1/1 cases, 1 entities" in result.output
    assert "held-out: 1 of 66 cases; 65 duplicate lines counted once (partial" in result.output
    allowed = _cli("eval", "--kit", str(retail), "--trajectories", str(DUPLICATES / "dup.jsonl"), "--allow-partial",
                   "--json")
    summary = json.loads(allowed.stdout)["summary"]
    assert allowed.exit_code == 0
    assert (summary["cases"], summary["passed"], summary["duplicates"], summary["partial"]) == (1, 1, 65, True)
    assert summary["sides"]["eval"] == {"cases_in_kit": 66, "covered": 1, "coverage": 0.0152}


def test_01_a_case_scored_twice_with_different_messages_is_an_error_naming_both_lines(retail: Path) -> None:
    result = _cli("eval", "--kit", str(retail), "--trajectories", str(DUPLICATES / "mixed.jsonl"),
                  "--min-pass-rate", "0", "--allow-partial")
    assert result.exit_code != 0 and type(result.exception).__name__ in ("ScoreError", "TrajectoryError")
    message = str(result.exception)
    assert "mixed.jsonl:67: case c-b00a8ed5638c260a is already scored from" in message and "mixed.jsonl:1 " in message


def test_01_the_handed_reference_file_covers_the_whole_held_out_set_and_passes(retail: Path) -> None:
    result = _cli("eval", "--kit", str(retail), "--trajectories", str(DUPLICATES / "reference_eval.jsonl"))
    assert result.exit_code == 0, result.output
    assert "pass rate 1.000 (66/66 cases, 63 entities" in result.output and "held-out: 66 of 66 cases" in result.output


# --------------------------------------------------------------------------- 05: line separators inside values


@pytest.mark.parametrize(("world", "separator"), [("world.json", "\u2028"), ("world_nel.json", "\x85")])
def test_05_a_world_with_line_separators_in_its_seed_builds_a_kit_that_opens_verifies_and_reads_back(
        tmp_path: Path, world: str, separator: str) -> None:
    built = _cli("build", "--world", str(SEPARATORS / world), "--out", str(tmp_path / "out"))
    assert built.exit_code == 0, built.output
    kit = tmp_path / "out" / "acme-shop-train-kit"
    for command in (("info", str(kit)), ("verify", str(kit)), ("verify", f"{kit}.tar.zst")):
        result = _cli(*command)
        assert result.exit_code == 0 and "Traceback" not in result.output, (command, result.output)
    sft = (kit / "sft.jsonl").read_text(encoding="utf-8")
    assert separator in sft  # written raw, as canonical JSON keeps it ...
    lines = sft.split("\n")[:-1]  # ... and each line still one row: no value of a row was split
    assert all(json.loads(line)["messages"] for line in lines)
    assert len(lines) == json.loads((kit / "kit.json").read_text())["record"]["sft_rows"]


def test_05_a_trajectory_file_whose_answer_ends_with_a_line_separator_is_scored_whole(retail: Path,
                                                                                       tmp_path: Path) -> None:
    path = tmp_path / "traj_u2028.jsonl"
    shutil.copy(SEPARATORS / "traj_u2028.jsonl", path)
    result = _cli("eval", "--kit", str(retail), "--trajectories", str(path))
    assert result.exit_code == 0, result.output
    assert "pass rate 1.000 (66/66 cases" in result.output
