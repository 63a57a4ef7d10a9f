"""Does RFT improve on SFT? SFT, then rejection-sampling fine-tuning from that export, on the same held-out cases.

Builds the retail kit (``--train-cases`` per task; the held-out cases do not depend on it), trains a LoRA SFT
adapter on a pretrained base (SmolLM2-135M-Instruct by default: the ``lora`` preset, one epoch at lr 1e-3, batch 4,
the measured recipe of ``real_base.py``), then ``--method rft`` from its export with the same recipe: k sampled
episodes per training case, the verifier-passed ones deduplicated and trained on. Prints pass@1 of SFT and RFT on
every held-out case (with entities and 95 % intervals), RFT's paired difference over SFT with its 95 % interval and
McNemar's p, what the sampling kept, and each stage's minutes. Every step is the real ``blobkit`` CLI in its own
process. One run; on a shared machine read it as one run.

Run::

    nice .venv/bin/python benchmarks/rft_gain.py --out /tmp/rft-gain
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"


def blobkit(*args: str) -> tuple[dict[str, Any], float]:
    """Run one blobkit command with --json; its record and minutes."""
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", *args, "--json"], check=True, text=True,
                          stdout=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=ROOT)
    return json.loads(done.stdout), (time.monotonic() - started) / 60


def _rate(name: str, record: dict[str, Any]) -> str:
    low, high = record["interval_95"]
    return (f"{name:<5}{record['pass_rate']:>8.3f}  {record['passed']}/{record['cases']} cases, "
            f"{record['entities']} entities, 95 % CI {low:.2f}-{high:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench-rft"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--train-cases", default="8")
    parser.add_argument("--samples", default="4", help="--rft-samples: episodes per training case")
    parser.add_argument("--temperature", default="0.7", help="--rft-temperature")
    args = parser.parse_args()
    out = args.out.resolve()
    build, build_minutes = blobkit("build", "--world", str(args.world), "--out", str(out / "kit"), "--train-cases",
                                   args.train_cases, "--eval-cases", "6")
    recipe = ["--world", build["kit"]["path"], "--base", args.base, "--target", "local-torch", "--preset", "lora",
              "--epochs", "1", "--lr", "1e-3", "--batch-size", "4"]
    sft, sft_minutes = blobkit("train", *recipe, "--method", "sft", "--out", str(out / "sft"))
    rft, rft_minutes = blobkit("train", *recipe, "--method", "rft", "--init-adapter", str(out / "sft" / "export"),
                               "--rft-samples", args.samples, "--rft-temperature", args.temperature,
                               "--out", str(out / "rft"))
    summary(build, sft, rft, (build_minutes, sft_minutes, rft_minutes))


def summary(build: dict[str, Any], sft: dict[str, Any], rft: dict[str, Any], minutes: tuple[float, ...]) -> None:
    """Print the figures of the build record and the two eval.json records (``minutes``: build, SFT, RFT stage)."""
    build_minutes, sft_minutes, rft_minutes = minutes
    print(f"\n{build['sft_rows']} SFT rows; held-out pass@1")
    for name, record in (("base", sft["base"]), ("sft", rft["sft"]), ("rft", rft["rft"])):
        print(_rate(name, record))
    paired, sampling = rft["rft_minus_sft"]["paired"], rft["sampling"]
    low, high = paired["interval_95"]
    print(f"\nrft - sft {paired['difference']:+.3f} (95 % CI {low:+.3f} to {high:+.3f}; "
          f"only sft {paired['only_earlier']}, only rft {paired['only_later']}; McNemar p {paired['mcnemar_p']:.3g}) "
          f"over {paired['cases']} cases, "
          f"{paired['entities']} entities; excludes 0: {paired['excludes_zero']}")
    print(f"sampling: {sampling['episodes']} episodes ({sampling['samples_per_case']} x {sampling['cases']} cases at "
          f"{sampling['temperature']}), {sampling['passed']} passed, {sampling['unusable']} unusable, "
          f"{sampling['duplicates']} duplicates, {sampling['kept']} kept over {sampling['cases_kept']} cases, "
          f"{sampling['seconds'] / 60:.1f} min")
    print(f"updates: sft {sft['optimizer_updates']}, rft {rft['optimizer_updates']}; "
          f"minutes: build {build_minutes:.1f}, sft stage {sft_minutes:.1f}, rft stage {rft_minutes:.1f}")


if __name__ == "__main__":
    main()
