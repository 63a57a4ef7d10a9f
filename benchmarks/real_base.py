"""The whole job on a real pretrained base, on this machine's CPU: SmolLM2-135M-Instruct on the retail kit.

Two modes.

**job** (default): what ``python -m blobkit.demo --base HuggingFaceTB/SmolLM2-135M-Instruct`` runs
(:func:`blobkit.demo.whole_job`), every step in its own process through the CLI, each timed with the
load average around it: build the kit (``--train-cases`` per task) → ``blobkit train --method sft``
(evaluate the base on the held-out cases, LoRA SFT, export, reload, evaluate the SFT adapter) →
``blobkit train --method grpo --init-adapter SFT/export`` (evaluate the SFT adapter again as GRPO's
start, GRPO, export, reload, evaluate the RL adapter on the same cases) → ``blobkit replay`` of the RL
export in a fresh process, compared with the RL evaluation's verdict on that case. Prints one table
row per model (base, SFT, RL: pass rate, cases, entities, 95 % Wilson interval), the rows and
optimizer updates each fit took, the minutes of every stage and of the whole job.

**sft** (``--sft-only``): the sweep's unit, for choosing rows, epochs and the learning rate. Builds the
kit, trains the SFT adapter with ``train_sft`` in this process, exports and reloads it, and evaluates it
on every held-out case (the base is not evaluated: it does not change between settings). Prints the
rows, tokens, updates, training minutes, tokens per second and the held-out pass rate.

The held-out cases do not depend on ``--train-cases`` (the kit mints them first; same case ids, prompts
and verifiers at every setting), so every setting is scored on the same 66 cases of 63 customers.

Torch runs on ``--threads`` threads (``OMP_NUM_THREADS`` for the job's processes). Run one at a time,
on a machine with nothing else on its cores (two torch threads stall when another process holds one)::

    nice .venv/bin/python benchmarks/real_base.py --sft-only --train-cases 16 --epochs 1 --lr 1e-3
    nice .venv/bin/python benchmarks/real_base.py --out out/real_base          # the whole job, measured defaults
    nice .venv/bin/python benchmarks/real_base.py --tool-format hermes --out out/real_base_hermes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from blobkit.demo import BASE_RL, BASE_SFT, BASE_TRAIN_CASES_PER_TASK, base_flags, whole_job  # noqa: E402

BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def sft_only(args: argparse.Namespace) -> dict[str, Any]:
    """Build, train the SFT adapter in this process, export, reload, evaluate every held-out case."""
    import torch

    torch.set_num_threads(args.threads)
    from blobkit.builder import BuildConfig, build_kit
    from trainers.catalog import resolve_base
    from trainers.config import TrainConfig
    from trainers.export import export_model, load_export
    from trainers.run import evaluate_policy
    from trainers.sft_torch import count_row_tokens, train_sft
    from world_format.canonical import atomic_write_json
    from world_format.kit import open_kit

    loads = [_load()]
    base = resolve_base(args.base)
    with tempfile.TemporaryDirectory(prefix="blobkit-realbase-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        record = build_kit(Path(args.world), out / "kit", BuildConfig(train_cases_per_task=args.train_cases,
                                                                      eval_cases_per_task=args.eval_cases))
        config = TrainConfig.preset("lora", base=args.base, method="sft", target="local-torch", out=out / "sft",
                                    **_sft_values(args))
        with open_kit(Path(record["kit"]["path"])) as kit:
            rows, cases, sha = kit.rows(), kit.cases("eval"), kit.sha256
            result = train_sft(Path(base.name_or_path), rows, out / "sft" / "checkpoint", config, progress=False)
            loads.append(_load())
            export = export_model(out / "sft" / "checkpoint", out / "sft" / "export", kind=result.kind,
                                  config=config.as_json(), base=base.record(), kit_sha256=sha)
            model, tokenizer, _ = load_export(export)
            from transformers import AutoTokenizer

            counting = AutoTokenizer.from_pretrained(export)
            tokens = sum(count_row_tokens(counting, row) for row in rows)
            started = time.monotonic()
            summary = evaluate_policy(model, tokenizer, kit.world(), cases, config, lambda m: print(m, flush=True),
                                      "sft")
            eval_seconds = time.monotonic() - started
            atomic_write_json(out / "sft" / "eval_cases_sft.json", [r.to_json() for r in summary.results])
            loads.append(_load())
    epochs = config.epochs
    return {"mode": "sft", "tool_format": args.tool_format, "train_cases_per_task": args.train_cases,
            "rows": len(rows), "row_tokens": tokens, "epochs": epochs, "learning_rate": config.learning_rate,
            "batch_size": config.batch_size, "packing": config.packing, "lr_scheduler": config.lr_scheduler,
            "threads": args.threads, "optimizer_updates": result.optimizer_steps,
            "train_minutes": round(result.train_seconds / 60, 2),
            "tokens_per_second": round(tokens * epochs / result.train_seconds, 1),
            "eval_minutes": round(eval_seconds / 60, 2), "sft": summary.to_json(),
            "final_loss": result.loss_history[-1][1] if result.loss_history else None, "load_average_1m": loads}


def _sft_values(args: argparse.Namespace) -> dict[str, Any]:
    """The SFT settings given on the command line, over the demo's measured ones for a real base."""
    values = dict(BASE_SFT)
    for name in ("epochs", "learning_rate", "batch_size", "max_length", "lr_scheduler"):
        given = getattr(args, name)
        if given is not None:
            values[name] = given
    if args.packing:
        values["packing"] = True
    values["tool_format"] = args.tool_format
    return values


def job(args: argparse.Namespace) -> dict[str, Any]:
    """The demo's whole job (:func:`blobkit.demo.whole_job`) with this run's settings."""
    rl = dict(BASE_RL)
    for name, given in (("steps", args.rl_steps), ("learning_rate", args.rl_lr), ("group_size", args.group_size),
                        ("batch_size", args.rl_batch_size)):
        if given is not None:
            rl[name] = given
    rl["tool_format"] = args.tool_format
    out = Path(args.out or "out/real_base")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return whole_job(Path(args.world), out, args.base, args.train_cases,
                     ["--preset", "lora", *base_flags(_sft_values(args))],
                     ["--preset", "lora", *base_flags(rl)] if rl["steps"] else None, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--world", default=str(ROOT / "examples" / "retail_desk" / "world.json"))
    parser.add_argument("--out", default=None, help="where the kit and runs go (sft: a temporary folder)")
    parser.add_argument("--sft-only", action="store_true", help="the sweep's unit: SFT and its evaluation only")
    parser.add_argument("--train-cases", type=int, default=BASE_TRAIN_CASES_PER_TASK, help="training cases per task")
    parser.add_argument("--eval-cases", type=int, default=6, help="held-out cases per task (sft mode)")
    parser.add_argument("--tool-format", default="auto")
    parser.add_argument("--epochs", type=float, default=None)
    parser.add_argument("--lr", dest="learning_rate", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--lr-scheduler", default=None)
    parser.add_argument("--packing", action="store_true")
    parser.add_argument("--rl-steps", type=int, default=None, help="GRPO steps (0: no GRPO)")
    parser.add_argument("--rl-lr", type=float, default=None)
    parser.add_argument("--group-size", type=int, default=None)
    parser.add_argument("--rl-batch-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the record here")
    args = parser.parse_args()
    started = time.monotonic()
    record = sft_only(args) if args.sft_only else job(args)
    record["wall_minutes"] = round((time.monotonic() - started) / 60, 2)
    text = json.dumps(record, indent=1, sort_keys=True)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
