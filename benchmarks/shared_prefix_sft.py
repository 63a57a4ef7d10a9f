"""Shared-prefix SFT against the padded batch: tokens per second of the same batches, measured in one run.

Builds an example kit (default: retail, the default build) unless ``--kit`` is given, loads the base (default
SmolLM2-135M-Instruct, converted from its registry package; ``--base DIR`` for a local model) with the tool format
blobkit chooses for it, and runs the same batches of the kit's SFT rows (batch ``--batch``, shuffled with a fixed
seed) through forward and backward with LoRA (``--full`` for every weight), alternating the two losses batch by
batch so both see the same machine load:

* ``padded``: every row run whole (:func:`trainers.sft_torch._assistant_token_loss`, as SFT ran before);
* ``shared``: the batch's shared prefix run once, its KV cache shared by the rows (:mod:`trainers.shared_prefix`).

Prints, per loss, the row tokens (excluding padding) per second, their ratio, the share of row tokens in shared
prefixes, the largest loss difference, and the epochs of the kit that fit in ``--budget-minutes`` at each rate.

Run::

    nice -n 10 .venv/bin/python benchmarks/shared_prefix_sft.py --steps 3            # SmolLM2, retail, batch 4
    nice -n 10 .venv/bin/python benchmarks/shared_prefix_sft.py --base tiny --full --batch 8 --steps 20
    nice -n 10 .venv/bin/python benchmarks/shared_prefix_sft.py --example it_helpdesk --batch 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _kit(example: str, tmp: str) -> Path:
    built = subprocess.run([sys.executable, "-m", "blobkit.cli", "build", "--world",
                            str(ROOT / "examples" / example / "world.json"), "--out", f"{tmp}/kit", "--json"],
                           check=True, text=True, stdout=subprocess.PIPE, cwd=ROOT).stdout
    return Path(json.loads(built)["kit"]["path"])


def _trainer(shared: bool, model_dir: str, rows: list[dict[str, Any]], scratch: str, batch: int, full: bool,
             rank: int) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from trainers.formats import apply_tool_format
    from trainers.lora import peft_lora_config
    from trainers.sft_torch import _assistant_token_loss, rows_to_dataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    apply_tool_format(tokenizer, "auto", where=model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True, dtype=torch.float32)
    args = SFTConfig(output_dir=scratch, per_device_train_batch_size=batch, assistant_only_loss=True, use_cpu=True,
                     report_to="none", max_length=8192, activation_checkpointing=False, seed=42, data_seed=42)
    return _assistant_token_loss(SFTTrainer, shared)(
        model=model, args=args, train_dataset=rows_to_dataset(rows), processing_class=tokenizer,
        peft_config=None if full else peft_lora_config(rank))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                        help="catalog id, a model directory, or 'tiny' (blobkit's tiny model built on the kit)")
    parser.add_argument("--example", default="retail_desk")
    parser.add_argument("--kit", type=Path, default=None)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="batches timed per loss")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--budget-minutes", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    import torch

    from trainers.catalog import resolve_base
    from trainers.shared_prefix import shared_prefix_length

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="blobkit-bench-") as tmp:
        kit = args.kit or _kit(args.example, tmp)
        if args.base == "tiny":
            subprocess.run([sys.executable, "-m", "blobkit.cli", "tiny-model", "--kit", str(kit), "--out",
                            f"{tmp}/tiny"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        base = f"{tmp}/tiny" if args.base == "tiny" else resolve_base(args.base).name_or_path
        rows = [json.loads(line) for line in (Path(kit) / "sft.jsonl").read_text().splitlines()]
        trainers = {name: _trainer(name == "shared", base, rows, tmp, args.batch, args.full, args.lora_rank)
                    for name in ("padded", "shared")}
        loader = iter(trainers["padded"].get_train_dataloader())
        seconds, tokens, prefix_tokens = {"padded": 0.0, "shared": 0.0}, 0, 0
        worst = 0.0
        for _ in range(args.steps):
            batch = next(loader)
            real = int(batch["attention_mask"].sum())
            prefix = shared_prefix_length(batch["input_ids"], batch["attention_mask"])
            tokens += real
            prefix_tokens += prefix * len(batch["input_ids"])
            losses = {}
            for name, trainer in trainers.items():
                trainer.model.train()
                start = time.perf_counter()
                loss = trainer.compute_loss(trainer.model, batch)
                loss.backward()
                seconds[name] += time.perf_counter() - start
                trainer.model.zero_grad(set_to_none=True)
                losses[name] = float(loss.detach())
            worst = max(worst, abs(losses["padded"] - losses["shared"]))
            print(f"batch: {real} row tokens, shared prefix {prefix} x {len(batch['input_ids'])} rows; "
                  + ", ".join(f"{n} {seconds[n]:.1f}s so far" for n in seconds), flush=True)
        epoch_tokens = sum(len(trainers["padded"].train_dataset[i]["input_ids"])
                           for i in range(len(trainers["padded"].train_dataset)))
        rates = {name: tokens / total for name, total in seconds.items()}
        kind = "full-weight" if args.full else f"LoRA r={args.lora_rank}"
        print(f"\n{Path(base).name}, {kind}, batch {args.batch}, {args.steps} batches ({tokens} row tokens, "
              f"{prefix_tokens / tokens:.0%} of them in shared prefixes), torch threads {torch.get_num_threads()}")
        for name, rate in rates.items():
            epochs = rate * args.budget_minutes * 60 / epoch_tokens
            print(f"{name:>7}: {rate:7.1f} row tokens/s forward+backward; {epochs:.2f} epochs of the kit's "
                  f"{len(rows)} rows ({epoch_tokens} tokens) in {args.budget_minutes:g} minutes")
        print(f"ratio shared/padded: {rates['shared'] / rates['padded']:.2f}x; largest loss difference {worst:.2e}")


if __name__ == "__main__":
    main()
