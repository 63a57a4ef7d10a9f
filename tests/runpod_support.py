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
from trainers.eval_record import Delta, EvalRecord, GRPOReport, LeftOut, Refusal
from trainers.plan_record import BaseRecord
from trainers.runpod import RunPodSettings, train_runpod
from trainers.runpod.api import RetryPolicy
from world_format.kit import open_kit

KEY = "test-key"
STORE_TOKEN = "store-token"
FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, max_retry_after=0.05)

def _evaluation(passed: int, cases: int) -> EvalRecord:
    return EvalRecord(pass_rate=passed / cases, cases=cases, passed=passed, entities=cases, interval_95=(0.0, 1.0),
                      interval_method="Wilson score, 95 %, over cases", side="eval", cases_in_side=cases,
                      coverage=1.0, partial=False, duplicates=0, per_template={},
                      tool_call_parse_failures=0, refusal=Refusal(false_acceptance=0, false_rejection=0),
                      verifier_errors=0, model_calls=cases, decoding="free")


POD_REPORT = GRPOReport(
    base=_evaluation(1, 4), sft=_evaluation(1, 4), rl=_evaluation(2, 4), rl_minus_sft=Delta(pass_rate=0.25, cases=4),
    optimizer_updates=3,
    steps_completed=3, steps_planned=5, stopped_by=None, model_calls=24, eval_model_calls=8, active_seconds=1.0,
    zero_variance_group_fraction=0.0, reward_history=[(1, 0.5)], kit_sha256="0" * 64, group_size=2, shaping=None,
    left_out=LeftOut(untokenizable=0, cases={}, why="none"), eval_limit=None).model_dump_json()
"""The eval.json the fake pod writes: a GRPO report (base and SFT 1/4 -> RL 2/4, 3 optimizer updates)."""

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
open(os.path.join(out, "eval.json"), "w").write(POD_REPORT)
json.dump({"written_by": "pod"}, open(os.path.join(out, "plan.json"), "w"))
print("fake GRPO finished")
""".replace("POD_REPORT", repr(POD_REPORT))
SLOW_TRAINER = "import time; time.sleep(30)"
FAILING_TRAINER = "import sys; print('CUDA out of memory'); sys.exit(1)"


def settings_for(fake: FakeRunPod, tmp_path: Path, **overrides: Any) -> RunPodSettings:
    values: dict[str, Any] = {"api_url": fake.url, "store_url": fake.store_url, "store_token": STORE_TOKEN,
                              "install": False, "poll_seconds": 0.02, "boot_timeout_seconds": 2.0,
                              "network_grace_seconds": 3.0, "state_dir": tmp_path / "state", "retry": FAST_RETRY}
    return RunPodSettings(**{**values, **overrides})


def run(fake: FakeRunPod, tmp_path: Path, kit_path: Path, adapter: Path, *, settings: RunPodSettings | None = None,
        stop: Callable[[], str | None] | None = None, log: list[str] | None = None,
        **config: Any) -> GRPOReport:
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
