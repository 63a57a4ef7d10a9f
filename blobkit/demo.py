"""The README's main job: build a kit from the bundled example, train a tiny model, evaluate, export, replay."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN_CASES_PER_TASK = 400
"""Training cases per task of the demo's kit. The tiny model starts from random weights: learning to copy ids and
emails from scratch needs many distinct cases more than many epochs. ``blobkit company train --base-model tiny``
builds its kit with the same number."""


def _run(*args: str, offline: bool, judged: bool = False) -> str:
    """Run one blobkit command in its own process; its stdout. ``judged``: exit 1 is a verdict, not a failure."""
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"} if offline else dict(os.environ)
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", *args], text=True, stdout=subprocess.PIPE, env=env)
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


def main() -> None:
    """Run every step in its own process (so the replay reloads the export from disk)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/demo"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--base", default=None,
                        help="train a LoRA adapter on this base (a catalog id such as Qwen/Qwen2.5-0.5B-Instruct, "
                             "which needs the hub and is meant for a GPU, or a local model directory) instead of "
                             "building the tiny model")
    parser.add_argument("--epochs", default=None, help="SFT epochs (default: the preset's)")
    parser.add_argument("--grounding-repeats", default=None, help="SFT grounding repeats (default: the preset's)")
    parser.add_argument("--answer-quote-repeats", default=None, help="SFT answer-quote repeats (default: the "
                                                                     "preset's)")
    args = parser.parse_args()
    offline = args.base is None
    started = time.monotonic()
    record = json.loads(_run("build", "--world", str(args.world), "--out", str(args.out / "kit"), "--train-cases",
                             str(TRAIN_CASES_PER_TASK), "--eval-cases", "4", "--json", offline=offline))
    kit = record["kit"]["path"]
    base = args.base
    if base is None:
        base = str(args.out / "tiny")
        _run("tiny-model", "--kit", kit, "--out", base, offline=offline)
    flags = training_flags(args.base, args.epochs, args.grounding_repeats, args.answer_quote_repeats)
    report = json.loads(_run("train", "--world", kit, "--base", base, "--method", "sft", "--target", "local-torch",
                             *flags, "--out", str(args.out / "run"), "--json", offline=offline))
    replay = json.loads(_run("replay", "--model", str(args.out / "run" / "export"), "--kit", kit, "--json",
                             offline=offline, judged=True))
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'model':<8}{'held-out pass rate':>20}{'cases':>8}{'entities':>10}{'95 % interval':>16}")
    for name in ("base", "sft"):
        low, high = report[name]["interval_95"]
        print(f"{name:<8}{report[name]['pass_rate']:>20.3f}{report[name]['cases']:>8}{report[name]['entities']:>10}"
              f"{f'{low:.2f}-{high:.2f}':>16}")
    print(f"\nkit {record['kit']['archive']} ({record['sft_rows']} SFT rows, {record['eval_cases']} held-out cases)")
    print(f"optimizer updates {report['optimizer_updates']}; export {args.out / 'run' / 'export'}")
    evaluated = json.loads((args.out / "run" / "eval_cases_sft.json").read_text(encoding="utf-8"))
    then = next(("pass" if case["passed"] else "fail" for case in evaluated if case["case_id"] == replay["case_id"]),
                "not evaluated")
    agrees = "the same verdict" if then == replay["verdict"]["outcome"] else f"NOT the evaluation's verdict ({then})"
    print(f"replay of {replay['case_id']} in a fresh process: {replay['verdict']['outcome']}, {agrees}")
    print(f"whole demo: {minutes:.1f} minutes")


if __name__ == "__main__":
    main()
