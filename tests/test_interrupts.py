"""Interruptions are part of the contract (issue 23 item 3): real signals sent to real CLI processes.

``build``: SIGINT or SIGTERM at any point before the kit is published writes nothing and exits 130
with one line; one arriving while it is published leaves the complete kit and says so. ``train``: the
run stops at the next step boundary, exports and evaluates what was trained, records ``stopped_by:
interrupt`` and exits 130.
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
    pytest.param("SIGINT", "mint", 1, "mint tasks", marks=pytest.mark.slow),
    ("SIGTERM", "gate", 2, "gate tasks"),
    pytest.param("SIGINT", "split", 1, "split cases", marks=pytest.mark.slow),
    pytest.param("SIGINT", "replay", 3, "replay cases", marks=pytest.mark.slow),
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


# ---------------------------------------------------------------------------------------------------- train


@pytest.fixture(scope="module")
def tiny(kit_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts
    from world_format.kit import open_kit

    with open_kit(kit_path) as kit:
        texts = row_texts(kit.rows())
    return build_tiny_model(texts, tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


def _train_until(kit: Path, base: Path, out: Path, line: str, signal_name: str) -> tuple[int, str, str]:
    """Start a long SFT run, send ``signal_name`` once its stderr shows ``line``, return (rc, stdout, stderr)."""
    import signal

    process = subprocess.Popen(
        [sys.executable, "-m", "blobkit.cli", "train", "--world", str(kit), "--base", str(base), "--out", str(out),
         "--method", "sft", "--target", "local-torch", "--full", "--epochs", "200", "--batch-size", "1",
         "--eval-limit", "1", "--max-turns", "1", "--short-episodes", "--max-new-tokens", "8",
         "--verbose"],  # the Hugging Face progress bars on stderr: the SIGINT case waits for "Loading weights"
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert process.stderr is not None
    seen: list[str] = []
    for got in process.stderr:
        seen.append(got)
        if line in got:
            process.send_signal(getattr(signal, signal_name))
            break
    stdout, rest = process.communicate(timeout=600)
    return process.returncode, stdout, "".join(seen) + rest


@pytest.mark.slow  # two short training runs in subprocesses, about 30 s each on two loaded cores
@pytest.mark.parametrize(("signal_name", "line"), [
    ("SIGINT", "Loading weights"),  # the start policy is loading: the signal lands in or before its evaluation
    ("SIGTERM", "training (full weights)"),  # fitting
])
def test_a_signal_during_train_stops_at_a_step_boundary_exports_what_was_trained_and_records_it(
        kit_path: Path, tiny: Path, tmp_path: Path, signal_name: str, line: str) -> None:
    import json

    from trainers.export import verify_export

    out = tmp_path / "run"
    code, stdout, stderr = _train_until(kit_path, tiny, out, line, signal_name)
    assert code == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "interrupted: stopping at the next step boundary" in stderr
    report = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert report["stopped_by"] == "interrupt" and "stopped by interrupt" in stdout
    assert 1 <= report["optimizer_updates"] < plan["estimated_optimizer_steps"]
    assert verify_export(out / "export")["kind"] == "full"
    assert (out / "eval_cases_sft.json").is_file()
