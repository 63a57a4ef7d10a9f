"""Decodings against each other on the same held-out cases of one export (issue 29 lever 4): free, constrained
tool calls, grounded answers.

Loads an export (``blobkit train``'s ``OUT/export``) fresh, runs its greedy episodes on the first ``--limit``
held-out cases of the kit once per decoding of ``--order`` (default ``free,constrained``; ``grounded`` too, see
:mod:`trainers.constrained`), and prints each pass rate with its interval, the paired comparison of every later
decoding with the first (:mod:`trainers.paired`: discordant cases, the 95 % paired bootstrap interval, McNemar's
exact p), the tool-call parse failures, the failure reasons counted by kind and each pass's seconds. Same model,
same cases, one run. Every turn runs under the export's own token cap unless ``--max-new-tokens`` gives one
(``derived``: the cap a run now derives from the kit's rows, :mod:`trainers.turn_tokens`).

Run::

    nice -n 10 .venv/bin/python benchmarks/decoding_ablation.py --model out/run/export --kit KIT --limit 40
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _kind(reason: str) -> str:
    """A failure reason with its values taken out, so reasons of one kind count together."""
    return re.sub(r"\s+", " ", re.sub(r"('[^']*'|\"[^\"]*\"|\d+(\.\d+)?)", "_", reason)).strip()[:90]


def main() -> None:
    from trainers.replay import evaluate_export, export_token_cap, requested_token_cap, trained_config

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--kit", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--order", default="free,constrained",
                        help="the decodings in the order they run (comma-separated)")
    parser.add_argument("--max-new-tokens", type=requested_token_cap, default=None,
                        help="token cap of a turn: a number, or 'derived' (from the kit's rows under the export's "
                             "tokenizer, as a run derives it, trainers/turn_tokens.py); default: the export's own")
    parser.add_argument("--save", type=Path, default=None,
                        help="a directory: each decoding's record and per-case outcomes, written as it finishes")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from trainers.intervals import share
    from trainers.paired import compare
    from world_format.kit import open_kit

    summaries, seconds = {}, {}
    with open_kit(args.kit) as kit:
        cap = export_token_cap(trained_config(args.model, kit), AutoTokenizer.from_pretrained(args.model), kit,
                               args.max_new_tokens)
        print("token cap of a turn:", cap)
        for decoding in args.order.split(","):
            start = time.perf_counter()
            summaries[decoding] = evaluate_export(args.model, kit, limit=args.limit, decoding=decoding,
                                                  max_new_tokens=cap)
            seconds[decoding] = time.perf_counter() - start
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                saved = {"record": summaries[decoding].to_json(), "outcomes": summaries[decoding].outcomes()}
                (args.save / f"{decoding}.json").write_text(json.dumps(saved, indent=1))
    for decoding, summary in summaries.items():
        record = summary.to_json()
        low, high, rate = *record["interval_95"], share(record["passed"], record["cases"])
        print(f"{decoding:>11}: pass rate {rate:.3f} ({record['passed']}/{record['cases']} cases, "
              f"{record['entities']} entities; 95 % CI {low:.2f}-{high:.2f}); tool-call parse failures "
              f"{record['tool_call_parse_failures']}; {seconds[decoding]:.0f} s")
        reasons = Counter(_kind(r.verdict.reason) for r in summary.distinct() if not r.passed)
        for reason, count in reasons.most_common(6):
            print(f"{'':>13}{count:>4} x {reason}")
    first, *later = list(summaries)
    for decoding in later:
        paired = compare(summaries[first].outcomes(), summaries[decoding].outcomes(), earlier_name=first,
                         later_name=decoding)
        print(paired.text())
        print(f"discordant: {paired.only_later} pass only {decoding}, {paired.only_earlier} pass only {first}")


if __name__ == "__main__":
    main()
