"""What the Tinker SDK path costs: forward/backward tokens per second through the SDK against the engine directly.

Both sides train the same LoRA (same base, rank, seed) on the same batches of the retail kit's SFT
rows, rendered in the base's tool format with weights on assistant tokens: *directly* calls
``trainers.tinker_engine.TrainingSession.forward_backward`` and ``optim_step`` in this process;
*through the SDK* sends the same datums with the unmodified ``tinker`` client to ``blobkit serve``'s
Tinker API on 127.0.0.1 (uvicorn in this process, the engine on its own thread): protobuf encoding,
HTTP, futures, the ``seq_id`` queue and the store's usage rows included. Rounds alternate between
the two so both see the same machine load; the ratio is direct tokens/s over SDK tokens/s (goal:
at most 1.2).

Run::

    .venv/bin/python benchmarks/tinker_overhead.py                       # tiny model, 4 rounds of 5 steps
    .venv/bin/python benchmarks/tinker_overhead.py --base HuggingFaceTB/SmolLM2-135M-Instruct --rounds 2
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
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")


def _kit(scratch: Path) -> Path:
    from blobkit.builder import BuildConfig, build_kit

    record = build_kit(ROOT / "examples" / "retail_desk" / "world.json", scratch / "kit",
                       BuildConfig(train_cases_per_task=3, eval_cases_per_task=1))
    return Path(record["kit"]["path"])


def _base(args: argparse.Namespace, kit: Any, scratch: Path) -> tuple[str, Path]:
    if args.base != "tiny":
        from trainers.catalog import resolve_base

        return args.base, Path(resolve_base(args.base).name_or_path)
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

    return "tiny", build_tiny_model(row_texts(kit.rows()), scratch / "tiny", TinyModelConfig())


def _examples(batch: list[Any]) -> list[Any]:
    import numpy as np

    from trainers.tinker_engine import Example

    return [Example(np.array(r.ids[:-1], np.int64), {"target_tokens": np.array(r.ids[1:], np.int64),
                                                    "weights": np.array(r.assistant[1:], np.float32)})
            for r in batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="tiny", help="tiny (built here) or a catalog id available offline")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="steps per round and side")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    args = parser.parse_args()

    import tinker
    import torch
    from tinker_support import set_policy, tinker_server
    from transformers import AutoTokenizer

    from trainers.formats import apply_tool_format
    from trainers.tinker_engine import AdamSettings, LoraSettings, TrainingSession
    from trainers.tinker_loops import render_row, row_datum
    from world_format.kit import open_kit

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="tinker-overhead-") as scratch_dir:
        scratch = Path(scratch_dir)
        with open_kit(_kit(scratch)) as kit, tinker_server(scratch / "store", {}) as server:
            name, path = _base(args, kit, scratch)
            if name == "tiny":
                from blobkit.service.tinker.bases import register_base

                register_base(server.store, "tiny", path)
            set_policy(server.store, "bench", [name], rank=16)
            tokenizer = AutoTokenizer.from_pretrained(path)
            apply_tool_format(tokenizer, "auto")
            rendered = sorted((render_row(tokenizer, row) for row in kit.rows()[:40]), key=lambda r: len(r.ids))
            rendered = rendered[: args.batch * args.steps]
            batches = [rendered[i:i + args.batch] for i in range(0, len(rendered), args.batch)]
            lora = LoraSettings(rank=16, seed=0, train_unembed=False)
            direct = TrainingSession(path, lora)
            sdk = server.client(server.store.create_key("bench")).create_lora_training_client(
                base_model=name, rank=16, seed=0, train_unembed=False).result()
            adam = AdamSettings(learning_rate=1e-4)
            times = {"direct": 0.0, "sdk": 0.0}
            tokens = {"direct": 0, "sdk": 0}
            for _ in range(args.rounds):
                for batch in batches:
                    examples, started = _examples(batch), time.perf_counter()
                    direct.forward_backward(examples, "cross_entropy")
                    direct.optim_step(adam)
                    times["direct"] += time.perf_counter() - started
                    tokens["direct"] += sum(e.length for e in examples)
                for batch in batches:
                    datums, started = [row_datum(r) for r in batch], time.perf_counter()
                    sdk.forward_backward(datums, "cross_entropy").result()
                    sdk.optim_step(tinker.AdamParams(learning_rate=1e-4)).result()
                    times["sdk"] += time.perf_counter() - started
                    tokens["sdk"] += sum(d.model_input.length for d in datums)
            rates = {side: tokens[side] / times[side] for side in times}
            print(json.dumps({"base": name, "rounds": args.rounds, "steps_per_round": len(batches),
                              "batch": args.batch, "threads": args.threads,
                              "mean_tokens_per_step": round(tokens["sdk"] / (args.rounds * len(batches)), 1),
                              "direct_tokens_per_s": round(rates["direct"], 1),
                              "sdk_tokens_per_s": round(rates["sdk"], 1),
                              "ratio_direct_over_sdk": round(rates["direct"] / rates["sdk"], 3),
                              "load_average_1min": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
