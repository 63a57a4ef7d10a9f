"""The README's main job: build a kit from the bundled example, train, evaluate, export, replay.

Without ``--base``: the tiny model from scratch (full-weight SFT). With ``--base`` (a catalog id such as
``HuggingFaceTB/SmolLM2-135M-Instruct``, which resolves offline to a registry copy, or a local model directory):
a LoRA adapter by SFT, then GRPO from that adapter, both evaluated on the same held-out cases, and the RL export
replayed in a fresh process. ``benchmarks/real_base.py`` runs the same job (:func:`whole_job`) with other
settings and records its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.failure_kinds import FailureKinds

ROOT = Path(__file__).resolve().parent.parent
TRAIN_CASES_PER_TASK = 400
"""Training cases per task of the demo's kit. The tiny model starts from random weights: learning to copy ids and
emails from scratch needs many distinct cases more than many epochs. ``blobkit company train --base-model tiny``
builds its kit with the same number."""
BASE_TRAIN_CASES_PER_TASK = 48
"""Training cases per task of the demo's kit for a pretrained base (``--base``): the build's default, the retail
kit's 529 SFT rows. Measured on SmolLM2-135M-Instruct on a 2-core CPU, one run each (benchmarks/README.md): 16
cases (177 rows) reached 0.500 held-out after SFT, 32 cases (353 rows) 0.652 in 20.8 training minutes, 48 cases
(529 rows, 133 updates) 0.800 free and 0.909 constrained on the 220 cases of ``--eval-cases 20``."""
BASE_SFT: dict[str, Any] = {"epochs": 2, "learning_rate": 1e-3, "batch_size": 4, "shared_prefix": True,
                            "decision_weight": 4, "decoding": "constrained"}
"""SFT settings of the demo with ``--base``, on top of the ``lora`` preset: the recipe that passed 0.9 of the example
kits' large held-out sets on SmolLM2-135M-Instruct (one run each; benchmarks/README.md, "Decision weight and the
calculator"). Two epochs: on the airline kit 0.957 against 0.784 after one (a paired +0.173, 95 % interval
0.12-0.23, 53 minutes of training on 2 CPU cores), on retail 0.991 (218/220) against 0.895 (a paired +0.095,
0.06-0.14, 44 minutes). The first 16 trained tokens of each assistant turn, where it picks a tool or answers, weigh 4
in the loss. The shared prefix gives the unshared batch's loss and gradients at fewer tokens. Tool calls are decoded
constrained (evaluation, GRPO rollouts, replay): on retail's 220 held-out cases an SFT export passed 0.909
constrained against 0.800 free, a paired +0.109 (95 % interval 0.07-0.16; "Constrained decoding")."""
BASE_RL: dict[str, Any] = {"steps": 4, "group_size": 4, "batch_size": 8, "learning_rate": 1e-5,
                           "decoding": "constrained"}
"""GRPO settings of the demo with ``--base``, from the SFT adapter, on top of the ``lora`` preset."""


def _run(*args: str, env: Mapping[str, str], judged: bool = False) -> str:
    """Run one blobkit command in its own process; its stdout. ``judged``: exit 1 is a verdict, not a failure."""
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", *args], text=True, stdout=subprocess.PIPE,
                            env=dict(env))
    if result.returncode not in ((0, 1) if judged else (0,)):
        raise SystemExit(f"blobkit {args[0]} failed with exit code {result.returncode}")
    return result.stdout


def training_flags(base: str | None, epochs: str | None, grounding_repeats: str | None,
                   answer_quote_repeats: str | None) -> list[str]:
    """The ``blobkit train`` settings of the demo: the ``tiny`` preset (the tiny model from scratch), or the
    ``lora`` preset on a given base; the flags given here go on top of the preset."""
    flags = ["--preset", "tiny" if base is None else "lora"]
    for name, value in (("--epochs", epochs), ("--grounding-repeats", grounding_repeats),
                        ("--answer-quote-repeats", answer_quote_repeats)):
        if value is not None:
            flags += [name, value]
    return flags


def base_flags(values: Mapping[str, Any]) -> list[str]:
    """``blobkit train`` flags for TrainConfig values (``--lr`` is the learning rate's flag)."""
    flags: list[str] = []
    for name, value in values.items():
        flag = "--lr" if name == "learning_rate" else "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


class _Stages:
    """Seconds and 1-minute load averages of each step of a job, in order."""

    def __init__(self) -> None:
        self.record: dict[str, dict[str, float]] = {}

    def run(self, name: str, *args: str, env: Mapping[str, str], judged: bool = False) -> str:
        load, started = os.getloadavg()[0], time.monotonic()
        out = _run(*args, env=env, judged=judged)
        self.record[name] = {"seconds": round(time.monotonic() - started, 1), "load_before": round(load, 2),
                             "load_after": round(os.getloadavg()[0], 2)}
        return out


def whole_job(world: Path, out: Path, base: str | None, train_cases: int, sft_flags: list[str],
              rl_flags: list[str] | None, env: Mapping[str, str], max_tasks: int | None = None) -> dict[str, Any]:
    """Build → (tiny model) → SFT (base and SFT evaluated) → GRPO from the SFT export when ``rl_flags`` is given
    (SFT and RL evaluated on the same cases) → replay of the last export in a fresh process.

    Every step is its own ``blobkit`` process with ``env``. ``base`` None builds the tiny model; ``max_tasks`` is the
    build's task cap (None: the builder's default). Returns the build
    record's counts, each run's eval.json (``sft``, ``rl``), the replay record, and each stage's seconds and load.
    """
    stages = _Stages()
    build = json.loads(stages.run("build", "build", "--world", str(world), "--out", str(out / "kit"),
                                  "--train-cases", str(train_cases), "--eval-cases", "4" if base is None else "6",
                                  *(["--max-tasks", str(max_tasks)] if max_tasks is not None else []),
                                  "--json", env=env))
    kit = build["kit"]["path"]
    if base is None:
        base = str(out / "tiny")
        stages.run("tiny-model", "tiny-model", "--kit", kit, "--out", base, env=env)
    common = ["--world", kit, "--base", base, "--target", "local-torch", "--json"]
    record: dict[str, Any] = {"kit": build["kit"], "sft_rows": build["sft_rows"], "eval_cases": build["eval_cases"],
                              "train_cases_per_task": train_cases}
    record["sft"] = json.loads(stages.run("sft", "train", *common, "--method", "sft", *sft_flags, "--out",
                                          str(out / "run"), env=env))
    last = out / "run"
    if rl_flags is not None:
        record["rl"] = json.loads(stages.run("grpo", "train", *common, "--method", "grpo", "--init-adapter",
                                             str(out / "run" / "export"), *rl_flags, "--out", str(out / "rl"),
                                             env=env))
        last = out / "rl"
    replay = json.loads(stages.run("replay", "replay", "--model", str(last / "export"), "--kit", kit, "--json",
                                   env=env, judged=True))
    label = "rl" if rl_flags is not None else "sft"
    evaluated = json.loads((last / f"eval_cases_{label}.json").read_text(encoding="utf-8"))
    then = next((case["passed"] for case in evaluated if case["case_id"] == replay["case_id"]), None)
    record["replay"] = {"case_id": replay["case_id"], "export": str(last / "export"),
                        "outcome": replay["verdict"]["outcome"], "evaluated_as": label,
                        "evaluation_passed": then, "agrees": then == (replay["verdict"]["outcome"] == "pass")}
    record["stages"] = stages.record
    record["minutes"] = round(sum(stage["seconds"] for stage in stages.record.values()) / 60, 2)
    return record


def print_summary(record: dict[str, Any]) -> None:
    """The demo's table: every evaluated model's held-out pass rate with its cases, entities and interval."""
    rows = [("base", record["sft"]["base"]), ("sft", record["sft"]["sft"])]
    if "rl" in record:
        rows += [("sft (as GRPO's start)", record["rl"]["sft"]), ("rl", record["rl"]["rl"])]
    print(f"\n{'model':<22}{'held-out pass rate':>20}{'cases':>8}{'entities':>10}{'95 % interval':>16}")
    for name, summary in rows:
        low, high = summary["interval_95"]
        print(f"{name:<22}{summary['pass_rate']:>20.3f}{summary['cases']:>8}{summary['entities']:>10}"
              f"{f'{low:.2f}-{high:.2f}':>16}")
    final = rows[-1][1].get("failures")
    if final is not None:
        print(f"{rows[-1][0]} " + FailureKinds.model_validate(final).text())
    print(f"\nkit {record['kit']['archive']} ({record['sft_rows']} SFT rows, {record['eval_cases']} held-out cases)")
    print(f"SFT optimizer updates {record['sft']['optimizer_updates']}"
          + (f"; GRPO optimizer updates {record['rl']['optimizer_updates']} in {record['rl']['steps_completed']} "
             f"steps" if "rl" in record else ""))
    replay = record["replay"]
    then = {True: "pass", False: "fail", None: "not evaluated"}[replay["evaluation_passed"]]
    agrees = "the same verdict" if replay["agrees"] else f"NOT the evaluation's verdict ({then})"
    print(f"replay of {replay['case_id']} by {replay['export']} in a fresh process: {replay['outcome']}, {agrees}")
    print("minutes per step: " + ", ".join(f"{name} {stage['seconds'] / 60:.1f}"
                                            for name, stage in record["stages"].items()))
    print(f"whole demo: {record['minutes']:.1f} minutes")


def main() -> None:
    """Run every step in its own process (so the replay reloads the export from disk)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/demo"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--base", default=None,
                        help="train a LoRA adapter on this base (SFT, then GRPO from it) instead of building the tiny "
                             "model: a catalog id (HuggingFaceTB/SmolLM2-135M-Instruct runs offline on a CPU; the "
                             "others need the hub and are meant for a GPU) or a local model directory")
    parser.add_argument("--epochs", default=None, help="SFT epochs (default: the preset's)")
    parser.add_argument("--grounding-repeats", default=None, help="SFT grounding repeats (default: the preset's)")
    parser.add_argument("--answer-quote-repeats", default=None, help="SFT answer-quote repeats (default: the "
                                                                     "preset's)")
    parser.add_argument("--no-rl", action="store_true", help="with --base: stop after SFT")
    parser.add_argument("--max-tasks", type=int, default=None,
                        help="the kit's task cap (default: the builder's; the build's tool coverage says which tools "
                             "the cap cut)")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"} if args.base is None else dict(os.environ)
    if args.base is None:
        record = whole_job(args.world, args.out, None, TRAIN_CASES_PER_TASK,
                           training_flags(None, args.epochs, args.grounding_repeats, args.answer_quote_repeats),
                           None, env, args.max_tasks)
    else:
        given = training_flags(args.base, args.epochs, args.grounding_repeats, args.answer_quote_repeats)
        sft = {name: value for name, value in BASE_SFT.items() if name != "epochs" or args.epochs is None}
        record = whole_job(args.world, args.out, args.base, BASE_TRAIN_CASES_PER_TASK, given + base_flags(sft),
                           None if args.no_rl else ["--preset", "lora", *base_flags(BASE_RL)], env, args.max_tasks)
    print_summary(record)


if __name__ == "__main__":
    main()
