"""What the runpod tests share: the key, a fast retry policy, stand-in trainers and ways to run the target."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_runpod import FakeRunPod

from blobkit.cli import main as cli_main
from trainers.config import TrainConfig
from trainers.plan_record import BaseRecord
from trainers.runpod import RunPodSettings, train_runpod
from trainers.runpod.api import RetryPolicy
from world_format.kit import open_kit

KEY = "test-key"
STORE_TOKEN = "store-token"
FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, max_retry_after=0.05)

FAKE_TRAINER = r"""
import json, os, sys
args = sys.argv[1:]
config = json.load(open(args[args.index("--config") + 1]))
assert os.path.isfile(os.path.join(config["kit"], "kit.json")), "the kit did not arrive"
assert os.path.isfile(os.path.join(config["init_adapter"], "adapter_config.json")), "the adapter did not arrive"
out = config["out"]
os.makedirs(os.path.join(out, "export"), exist_ok=True)
json.dump(args, open(os.path.join(out, "argv.json"), "w"))
json.dump(config, open(os.path.join(out, "config_seen.json"), "w"))
open(os.path.join(out, "export", "adapter_model.safetensors"), "wb").write(b"\0" * 64)
json.dump({"base": {"pass_rate": 0.25, "cases": 4}, "rl": {"pass_rate": 0.5, "cases": 4},
           "optimizer_updates": 3, "stopped_by": None}, open(os.path.join(out, "eval.json"), "w"))
json.dump({"written_by": "pod"}, open(os.path.join(out, "plan.json"), "w"))
print("fake GRPO finished")
"""
SLOW_TRAINER = "import time; time.sleep(30)"
FAILING_TRAINER = "import sys; print('CUDA out of memory'); sys.exit(1)"


def settings_for(fake: FakeRunPod, tmp_path: Path, **overrides: Any) -> RunPodSettings:
    values: dict[str, Any] = {"api_url": fake.url, "store_url": fake.store_url, "store_token": STORE_TOKEN,
                              "install": False, "poll_seconds": 0.02, "boot_timeout_seconds": 2.0,
                              "network_grace_seconds": 3.0, "state_dir": tmp_path / "state", "retry": FAST_RETRY}
    return RunPodSettings(**{**values, **overrides})


def run(fake: FakeRunPod, tmp_path: Path, kit_path: Path, adapter: Path, *, settings: RunPodSettings | None = None,
        stop: Callable[[], str | None] | None = None, log: list[str] | None = None,
        **config: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"kit": kit_path, "method": "grpo", "target": "runpod", "out": tmp_path / "out",
                              "init_adapter": adapter, "confirm_spend": True, "steps": 5}
    train_config = TrainConfig(**{**values, **config})
    lines = log if log is not None else []
    with open_kit(kit_path) as kit:
        hub = BaseRecord(source="hub", name_or_path=train_config.base, revision=None)
        return train_runpod(train_config, kit, [], hub, None, lines.append, stop,
                            settings=settings or settings_for(fake, tmp_path), environ={"RUNPOD_API_KEY": KEY})


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        env: dict[str, str]) -> tuple[int, str, str]:
    """Run the real `blobkit` entry point in-process; return (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith(("RUNPOD_", "BLOBKIT_RUNPOD_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["blobkit", *args])
    try:
        cli_main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def train_args(kit_path: Path, out: Path, adapter: Path | None, *extra: str) -> list[str]:
    args = ["train", "--kit", str(kit_path), "--base", "Qwen/Qwen3-8B", "--method", "grpo", "--target", "runpod",
            "--out", str(out), "--steps", "5", *extra]
    return args + (["--init-adapter", str(adapter)] if adapter is not None else [])


def every_file_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())
