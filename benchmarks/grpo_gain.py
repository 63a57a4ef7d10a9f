"""Does GRPO improve on SFT? Measured on the CPU, in one run, on the bundled retail example.

Builds a kit, builds the tiny offline model, trains a deliberately short SFT (so there is room
to improve), then runs GRPO from that export for a fixed number of steps, and prints the
held-out pass rates of SFT and RL on the same cases with ``rl_minus_sft`` and the fraction of
zero-variance groups (groups whose attempts all got the same reward teach nothing).

Every step goes through the real ``blobkit`` CLI in its own process.

Run::

    .venv/bin/python benchmarks/grpo_gain.py --out out/bench-grpo
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def blobkit(*args: str) -> dict:
    """Run one blobkit command with --json and return its record."""
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", *args, "--json"], check=True, text=True,
                          stdout=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=ROOT)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench-grpo"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--sft-epochs", default="1", help="short on purpose: leave room for RL")
    parser.add_argument("--steps", default="30")
    parser.add_argument("--group-size", default="4")
    parser.add_argument("--batch-size", default="16", help="episodes per GRPO step (prompts x group size)")
    parser.add_argument("--rl-lr", default="5e-4")
    parser.add_argument("--temperature", default="1.0")
    args = parser.parse_args()
    out = args.out.resolve()
    started = time.monotonic()
    kit = blobkit("build", "--world", str(args.world), "--out", str(out / "kit"), "--train-cases", "400",
                  "--eval-cases", "4")["kit"]["path"]
    subprocess.run([sys.executable, "-m", "blobkit.cli", "tiny-model", "--kit", kit, "--out", str(out / "tiny")],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    common = ["--world", kit, "--base", str(out / "tiny"), "--target", "local-torch", "--max-length", "2048",
              "--max-turns", "5"]
    sft = blobkit("train", *common, "--method", "sft", "--full", "--lr", "5e-3", "--batch-size", "8",
                  "--epochs", args.sft_epochs, "--out", str(out / "sft"))
    rl = blobkit("train", *common, "--method", "grpo", "--init-adapter", str(out / "sft" / "export"),
                 "--steps", args.steps, "--group-size", args.group_size, "--batch-size", args.batch_size,
                 "--lr", args.rl_lr, "--temperature", args.temperature, "--out", str(out / "rl"))
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'model':<6}{'held-out pass rate':>20}{'cases':>8}")
    for name, record in (("base", sft["base"]), ("sft", rl["sft"]), ("rl", rl["rl"])):
        print(f"{name:<6}{record['pass_rate']:>20.3f}{record['cases']:>8}")
    print(f"\nrl_minus_sft {rl['rl_minus_sft']['pass_rate']:+.3f} on {rl['rl_minus_sft']['cases']} cases; "
          f"{rl['steps_completed']} GRPO steps, {rl['optimizer_updates']} optimizer updates, "
          f"{rl['model_calls']} model calls; zero-variance groups {rl['zero_variance_group_fraction']:.2f}")
    print(f"reward per step: {[r for _, r in rl['reward_history']]}")
    print(f"sft optimizer updates {sft['optimizer_updates']}; whole benchmark {minutes:.1f} minutes")


if __name__ == "__main__":
    main()
