"""End to end on the CPU through the real CLI: kit → tiny model → SFT → GRPO → fresh-process replay.

Mechanics at the smallest size (a few minutes each on 2 cores); CI runs them (`make test-slow`). Whether the
demo's recipe beats the base is a quality figure, measured by ``benchmarks/tiny_recipe_gain.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("trl")


def blobkit(*args: str, judged: bool = False) -> dict[str, Any]:
    """Run ``python -m blobkit.cli ARGS --json`` in a fresh process and parse its record (``judged``: exit 1 is a
    verdict, as ``blobkit replay`` gives for a case its verifier fails)."""
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", *args, "--json"], text=True, capture_output=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}, cwd=ROOT,
                          timeout=1200)  # a hang guard
    assert done.returncode in ((0, 1) if judged else (0,)), done.stderr[-3000:]
    return dict(json.loads(done.stdout))


@pytest.mark.slow
def test_sft_trains_and_evaluates_every_held_out_case_then_grpo_updates_and_the_export_replays_fresh(
        tmp_path: Path) -> None:
    record = blobkit("build", "--world", str(ROOT / "examples" / "retail_desk" / "world.json"), "--out",
                     str(tmp_path / "kit"), "--train-cases", "40", "--eval-cases", "2")
    kit = record["kit"]["path"]
    subprocess.run([sys.executable, "-m", "blobkit.cli", "tiny-model", "--kit", kit, "--out", str(tmp_path / "tiny")],
                   check=True, cwd=ROOT, capture_output=True)
    common = ["--world", kit, "--base", str(tmp_path / "tiny"), "--target", "local-torch", "--max-turns", "5",
              "--max-new-tokens", "64", "--short-episodes", "--max-length", "2048"]
    sft = blobkit("train", *common, "--method", "sft", "--preset", "tiny", "--epochs", "0.1", "--out",
                  str(tmp_path / "sft"))
    assert sft["optimizer_updates"] > 0 and sft["sft"]["cases"] == record["eval_cases"]
    assert sft["base"]["cases"] == record["eval_cases"]
    evaluated = json.loads((tmp_path / "sft" / "eval_cases_sft.json").read_text(encoding="utf-8"))
    assert sum(case["passed"] for case in evaluated) == round(sft["sft"]["pass_rate"] * len(evaluated))

    rl = blobkit("train", *common, "--method", "grpo", "--init-adapter", str(tmp_path / "sft" / "export"),
                 "--steps", "3", "--group-size", "4", "--batch-size", "8", "--lr", "5e-4", "--eval-limit", "6",
                 "--kl-coef", "0.05", "--out", str(tmp_path / "rl"))
    assert rl["steps_completed"] == 3 and rl["model_calls"] > 0
    assert {"sft", "rl", "rl_minus_sft"} <= set(rl) and rl["rl_minus_sft"]["cases"] == 6
    steps = [json.loads(line) for line in (tmp_path / "rl" / "rl_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert rl["optimizer_updates"] == sum(s["optimizer_update"] for s in steps)
    # every update scored its tokens under the start policy too: the first at 0, since nothing has moved yet
    assert all((s["kl"] is not None) == s["optimizer_update"] for s in steps)
    assert [s["kl"] for s in steps if s["kl"] is not None][:1] in ([], [0.0])

    replay = blobkit("replay", "--model", str(tmp_path / "sft" / "export"), "--kit", kit, judged=True)
    assert replay["verdict"]["outcome"] in {"pass", "fail"} and replay["model_kind"] == "full"
    then = next(case["passed"] for case in evaluated if case["case_id"] == replay["case_id"])
    assert then == (replay["verdict"]["outcome"] == "pass")  # the reloaded export reproduces the evaluation
    held_out = Path(kit, "eval_cases.jsonl").read_text(encoding="utf-8").splitlines()
    assert replay["case_id"] in {json.loads(line)["case_id"] for line in held_out}


@pytest.mark.slow
def test_the_demo_with_a_given_base_trains_a_lora_adapter_on_it_then_grpo_from_it_and_replays_the_rl_export(
        tmp_path: Path) -> None:
    record = blobkit("build", "--world", str(ROOT / "examples" / "retail_desk" / "world.json"), "--out",
                     str(tmp_path / "kit"), "--train-cases", "40", "--eval-cases", "2")
    base = tmp_path / "pretrained"
    subprocess.run([sys.executable, "-m", "blobkit.cli", "tiny-model", "--kit", record["kit"]["path"], "--out",
                    str(base)], check=True, cwd=ROOT, capture_output=True)
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "blobkit.demo", "--base", str(base), "--epochs", "0.02", "--out",
                           str(out)], text=True, capture_output=True, cwd=ROOT, timeout=1200,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (out / "tiny").exists()
    plan = json.loads((out / "run" / "plan.json").read_text(encoding="utf-8"))
    assert plan["config"]["base"] == str(base) and plan["config"]["full"] is False
    assert plan["config"]["grounding_repeats"] == 0 and plan["config"]["answer_quote_repeats"] == 0
    assert plan["config"]["decision_weight"] == 4 and plan["config"]["decoding"] == "constrained"  # the recipe
    assert (out / "run" / "export" / "adapter_model.safetensors").is_file()
    rl = json.loads((out / "rl" / "plan.json").read_text(encoding="utf-8"))
    assert rl["config"]["method"] == "grpo" and rl["config"]["init_adapter"] == str(out / "run" / "export")
    assert (out / "rl" / "export" / "adapter_model.safetensors").is_file()
    assert "held-out pass rate" in done.stdout and f"by {out / 'rl' / 'export'} in a fresh process:" in done.stdout
    assert ", the same verdict" in done.stdout  # the reloaded export reproduces the evaluation's verdict
