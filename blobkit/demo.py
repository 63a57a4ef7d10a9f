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


def _run(*args: str) -> str:
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", *args], check=True, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return result.stdout


def main() -> None:
    """Run every step in its own process (so the replay reloads the export from disk)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/demo"))
    parser.add_argument("--world", type=Path, default=ROOT / "examples" / "retail_desk" / "world.json")
    parser.add_argument("--epochs", default="3")
    parser.add_argument("--grounding-repeats", default="3")
    parser.add_argument("--answer-quote-repeats", default="2")
    args = parser.parse_args()
    started = time.monotonic()
    record = json.loads(_run("build", "--world", str(args.world), "--out", str(args.out / "kit"), "--train-cases",
                             "400", "--eval-cases", "4", "--json"))
    kit = record["kit"]["path"]
    _run("tiny-model", "--kit", kit, "--out", str(args.out / "tiny"))
    report = json.loads(_run("train", "--world", kit, "--base", str(args.out / "tiny"), "--method", "sft",
                             "--target", "local-torch", "--full", "--lr", "2e-3", "--batch-size", "4",
                             "--epochs", args.epochs, "--grounding-repeats", args.grounding_repeats,
                             "--answer-quote-repeats", args.answer_quote_repeats,
                             "--max-length", "2048", "--max-turns", "5",
                             "--max-new-tokens", "64", "--out", str(args.out / "run"), "--json"))
    replay = json.loads(_run("replay", "--model", str(args.out / "run" / "export"), "--kit", kit, "--json"))
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'model':<8}{'held-out pass rate':>20}{'cases':>8}")
    for name in ("base", "sft"):
        print(f"{name:<8}{report[name]['pass_rate']:>20.3f}{report[name]['cases']:>8}")
    print(f"\nkit {record['kit']['archive']} ({record['sft_rows']} SFT rows, {record['eval_cases']} held-out cases)")
    print(f"optimizer updates {report['optimizer_updates']}; export {args.out / 'run' / 'export'}")
    print(f"replay of {replay['case_id']} in a fresh process: {replay['verdict']['outcome']}")
    print(f"whole demo: {minutes:.1f} minutes")


if __name__ == "__main__":
    main()
