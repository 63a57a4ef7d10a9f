"""Multi-process training: 2 CPU ranks on gloo match one process at the same global batch; a dead rank fails the
run with a clear error instead of hanging; a cancellation stops every rank at one step boundary."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("torch")
pytest.importorskip("trl")

from blobkit.errors import TrainerError  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.plan import plan  # noqa: E402
from trainers.run import run_training  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402
from world_format.kit import open_kit  # noqa: E402

pytestmark = pytest.mark.slow
ROWS = 32
"""Rows trained on: a multiple of the global batch, so no rank's last batch is padded."""


@pytest.fixture(scope="module")
def tiny(kit_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    with open_kit(kit_path) as kit:
        texts = row_texts(kit.rows())
    return build_tiny_model(texts, tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


def _train(kit_path: Path, tiny: Path, out: Path, processes: int, stop: Any = None,
           log: list[str] | None = None, **values: Any) -> dict[str, Any]:
    config = TrainConfig(**{"kit": kit_path, "base": str(tiny), "out": out, "method": "sft", "target": "local-torch",
                            "lora_rank": 4, "batch_size": 4, "epochs": 1, "learning_rate": 1e-3, "max_length": 2048,
                            "eval_limit": 1, "max_turns": 1, "short_episodes": True, "max_new_tokens": 8,
                            "local_torch": {"processes": processes}, **values})
    with open_kit(kit_path) as kit:
        rows = kit.rows()[:ROWS]
        record = plan(config, kit, rows, kit.path("sft.jsonl"))
        return run_training(config, kit, rows, record, (log if log is not None else []).append, stop).to_json()


def _adapter(out: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(out / "export" / "adapter_model.safetensors"))


def test_two_gloo_ranks_train_the_tiny_model_as_one_process_does_at_the_same_global_batch(
        kit_path: Path, tiny: Path, tmp_path: Path) -> None:
    one = _train(kit_path, tiny, tmp_path / "one", 1)
    two = _train(kit_path, tiny, tmp_path / "two", 2)
    assert one["optimizer_updates"] == two["optimizer_updates"] == ROWS // 4
    assert [step for step, _ in one["loss_history"]] == [step for step, _ in two["loss_history"]]
    assert max(abs(a - b) for (_, a), (_, b) in zip(one["loss_history"], two["loss_history"], strict=True)) < 1e-4
    first, second = _adapter(tmp_path / "one"), _adapter(tmp_path / "two")
    assert first.keys() == second.keys()
    assert max(float((first[k] - second[k]).abs().max()) for k in first) < 1e-4
    assert max(float(first[k].abs().max()) for k in first) > 1e-3  # the adapters did train
    world = json.loads((tmp_path / "two" / "plan.json").read_text())["world"]
    assert (world["world_size"], world["backend"], world["per_rank_batch"]) == (2, "gloo", 2)
    assert json.loads((tmp_path / "one" / "plan.json").read_text())["world"]["world_size"] == 1


def _rank_pid(out: Path, rank: int) -> int | None:
    """The pid of the rank worker of run ``out`` with RANK=``rank`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"trainers.rank_worker" in command and any(str(out).encode() in part for part in command) \
                and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def test_a_killed_rank_fails_the_run_with_a_clear_error_and_exports_nothing(
        kit_path: Path, tiny: Path, tmp_path: Path) -> None:
    out, log = tmp_path / "killed", []
    killed: list[int] = []

    def kill_rank_one_once_training() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            pid = _rank_pid(out, 1)
            if pid is not None and any(line.startswith("training (") for line in log):
                time.sleep(3)  # inside the training loop, not in model loading
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_rank_one_once_training, daemon=True)
    killer.start()
    started = time.monotonic()
    with pytest.raises(TrainerError, match=r"rank 1 was killed by SIGKILL.*every rank was stopped") as failure:
        _train(kit_path, tiny, out, 2, log=log, epochs=200)
    assert killed and time.monotonic() - started < 300
    assert str(out / "launch.log") in str(failure.value)
    assert not (out / "export").exists() and _rank_pid(out, 0) is None


def test_a_cancellation_stops_both_ranks_at_one_step_boundary_and_rank_0_still_exports(
        kit_path: Path, tiny: Path, tmp_path: Path) -> None:
    log: list[str] = []

    def cancel_once_training() -> str | None:
        return "cancelled" if any(line.startswith("training (") for line in log) else None

    report = _train(kit_path, tiny, tmp_path / "cancelled", 2, stop=cancel_once_training, log=log, epochs=200)
    assert report["stopped_by"] == "cancelled" and 1 <= report["optimizer_updates"] < 200 * ROWS // 4
    assert (tmp_path / "cancelled" / "export" / "manifest.json").is_file()
    assert any("stopping every rank at the next step boundary: cancelled" in line for line in log)


def test_a_grpo_update_over_two_ranks_is_one_processs_update_on_all_their_rollouts(
        tiny: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    helper = str(Path(__file__).with_name("grpo_rank_update.py"))
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, helper, str(tiny), str(tmp_path / "one")], check=True, env=environ, timeout=300)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", helper,
                    str(tiny), str(tmp_path / "two")], check=True, env=environ, timeout=300)
    from safetensors.torch import load_file

    first = load_file(str(tmp_path / "one" / "adapter_model.safetensors"))
    second = load_file(str(tmp_path / "two" / "adapter_model.safetensors"))
    assert max(float((first[k] - second[k]).abs().max()) for k in first) < 1e-4
    assert max(float(first[k].abs().max()) for k in first if "lora_B" in k) > 1e-3  # the update moved lora_B
    one, two = (float((tmp_path / name / "loss.txt").read_text()) for name in ("one", "two"))
    assert abs(one - two) < 1e-4 and one != 0.0
