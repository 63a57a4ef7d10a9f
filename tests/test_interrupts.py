"""Interruptions are part of the contract (issue 23 item 3): real signals sent to real CLI processes.

``build``: SIGINT or SIGTERM at any point before the kit is published writes nothing and exits 130
with one line; one arriving while it is published leaves the complete kit and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).parent / "interrupt_driver.py"
ROOT = Path(__file__).resolve().parent.parent


def _build(signal_name: str, stage: str, nth: int, world: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(DRIVER), signal_name, stage, str(nth), "build", "--world", str(world),
                           "--out", str(out)], capture_output=True, text=True, check=False, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize(("signal_name", "stage", "nth", "where"), [
    ("SIGINT", "load", 1, "load world (1/1)"),
    ("SIGINT", "mint", 1, "mint tasks"),
    ("SIGTERM", "gate", 2, "gate tasks"),
    ("SIGINT", "split", 1, "split cases"),
    ("SIGINT", "replay", 3, "replay cases"),
    ("SIGTERM", "write", 1, "write kit (1/2)"),
])
def test_a_signal_during_build_writes_nothing_and_exits_130_with_one_line(
        small_world_file: Path, tmp_path: Path, signal_name: str, stage: str, nth: int, where: str) -> None:
    out = tmp_path / "out"
    result = _build(signal_name, stage, nth, small_world_file, out)
    assert result.returncode == 130, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"error: interrupted ({signal_name}) during ") and where in result.stderr
    assert "nothing was written" in result.stderr and result.stdout == ""
    assert not out.exists() or list(out.rglob("*")) == []


def test_a_signal_while_the_kit_is_published_leaves_the_complete_kit_and_says_so(
        small_world_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _build("SIGINT", "write", 2, small_world_file, out)
    assert result.returncode == 0, result.stderr
    assert "after the kit was published: it is complete" in result.stderr and "kit ready" in result.stdout
    verified = subprocess.run([sys.executable, "-m", "blobkit.cli", "verify", str(next(out.glob("*.tar.zst")))],
                              capture_output=True, text=True, check=False, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
