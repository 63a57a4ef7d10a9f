"""pass^k of an export on a kit's held-out cases, beside its greedy pass@1 (issue 29's reporting).

Loads an export (``blobkit train``'s ``OUT/export``) fresh and attempts each of the first ``--limit`` held-out
cases ``--k`` times at ``--temperature`` (:mod:`trainers.pass_k`: attempt i samples with a generator seeded
``seed + i``; a case counts for pass^k only when all k attempts pass), decoded ``--decoding`` (default: what the
export was trained with). Prints pass^k with its interval, pass@k, the mean pass rate of one sampled attempt and
the seconds it took; ``--save FILE`` writes the record as JSON with each case's outcome (all k passed, its entity:
what ``trainers.paired`` pairs two exports over). ``--max-new-tokens`` caps a turn (``derived``: the cap a run now
derives from the kit's rows); default the export's own. One run, one model.

Run::

    .venv/bin/python benchmarks/pass_k_export.py --model out/run/export --kit KIT --k 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    from trainers.replay import export_token_cap, requested_token_cap, trained_config

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--kit", type=Path, required=True)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--decoding", choices=("free", "constrained", "grounded"), default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=requested_token_cap, default=None,
                        help="token cap of a turn: a number, or 'derived' (from the kit's rows under the export's "
                             "tokenizer, trainers/turn_tokens.py); default: the export's own")
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    from trainers.export import load_export
    from trainers.pass_k import pass_k_attempts, pass_k_record
    from world_format.kit import open_kit

    with open_kit(args.kit) as kit:
        config = trained_config(args.model, kit)
        config = config.model_copy(update={"pass_k": args.k, "pass_k_temperature": args.temperature,
                                           "decoding": args.decoding or config.decoding})
        model, tokenizer, _ = load_export(args.model)
        cap = export_token_cap(config, tokenizer, kit, args.max_new_tokens)
        config = config.model_copy(update={"max_new_tokens": cap})
        runtime = kit.world().runtime()
        start = time.perf_counter()
        try:
            attempts = pass_k_attempts(model, tokenizer, runtime, kit.cases("eval")[:args.limit], config,
                                       runtime.world, log=lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            runtime.close()
    record = pass_k_record(attempts, temperature=config.pass_k_temperature, seed=config.seed,
                           decoding=config.decoding)
    print(f"{record.text()}; token cap {config.max_new_tokens}; {time.perf_counter() - start:.0f} s")
    if args.save is not None:
        # per case: whether all k attempts passed, and its entity (what trainers.paired pairs two exports over)
        outcomes: dict[str, list[Any]] = {}
        for result in (r for results in attempts for r in results):
            outcome = outcomes.setdefault(result.case_id, [True, result.entity])
            outcome[0] = outcome[0] and result.passed
        saved = {**record.model_dump(mode="json"), "outcomes": outcomes}
        args.save.write_text(json.dumps(saved, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
