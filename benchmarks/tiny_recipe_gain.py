"""Does the demo's recipe beat the base? The tiny model on the bundled retail example, measured in one run.

The quality claim the end-to-end slow test used to make, as a figure: builds the retail kit at the demo's size
(``blobkit.demo.TRAIN_CASES_PER_TASK`` training cases per task), builds the tiny offline model, trains it with
the ``tiny`` preset (full weights) and prints the base's and the SFT export's held-out pass rates on the same
cases with the paired comparison ``sft_vs_base`` (difference, 95 % entity-cluster bootstrap interval, McNemar's
exact p; ``trainers.paired``). About 15 minutes on 2 idle cores; run it alone.

Every step goes through the real ``blobkit`` CLI in its own process.

Run::

    .venv/bin/python benchmarks/tiny_recipe_gain.py --out out/bench-recipe
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
sys.path.insert(0, str(ROOT))

from blobkit.demo import TRAIN_CASES_PER_TASK  # noqa: E402


def blobkit(*args: str) -> dict:
    """Run one blobkit command with --json and return its record."""
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", *args, "--json"], check=True, text=True,
                          stdout=subprocess.PIPE, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench-recipe"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--eval-cases", default="4", help="held-out cases per task (the demo's kit: 4)")
    args = parser.parse_args()
    out = args.out.resolve()
    started = time.monotonic()
    kit = blobkit("build", "--world", str(args.world), "--out", str(out / "kit"), "--train-cases",
                  str(TRAIN_CASES_PER_TASK), "--eval-cases", args.eval_cases)["kit"]["path"]
    subprocess.run([sys.executable, "-m", "blobkit.cli", "tiny-model", "--kit", kit, "--out", str(out / "tiny")],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    sft = blobkit("train", "--world", kit, "--base", str(out / "tiny"), "--target", "local-torch",
                  "--max-turns", "5", "--max-length", "2048", "--method", "sft",
                  "--preset", "tiny", "--out", str(out / "sft"))
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'model':<6}{'held-out pass rate':>20}{'cases':>8}")
    for name in ("base", "sft"):
        print(f"{name:<6}{sft[name]['pass_rate']:>20.3f}{sft[name]['cases']:>8}")
    paired = sft["sft_vs_base"]
    low, high = paired["interval_95"]
    print(f"\nsft - base {paired['difference']:+.3f} (95 % CI {low:+.2f} to {high:+.2f}, paired over "
          f"{paired['cases']} cases, {paired['entities']} entities; McNemar p {paired['mcnemar_p']:.3g}); "
          f"interval excludes 0: {paired['excludes_zero']}")
    print(f"{sft['optimizer_updates']} optimizer updates, train {sft['train_seconds'] / 60:.1f} min; "
          f"whole benchmark {minutes:.1f} minutes")


if __name__ == "__main__":
    main()
