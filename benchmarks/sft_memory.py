"""Peak memory of one SFT step on the CPU, measured, beside plan.json's estimate (:mod:`trainers.memory_estimate`).

Each configuration runs in its own process (the peak resident set only grows): load the base (default
SmolLM2-135M-Instruct) with a LoRA adapter (``--full``: every weight), build ``rows`` random rows of ``length``
tokens (the last 30 % of each labelled, as an answer would be; ``--shared P`` makes the first P ids of every row
equal and runs the shared-prefix loss), run forward and backward once, and report the process's peak resident
memory above what it held before the step, with the step's seconds. The estimate's step part (activations,
attention scores, logits, gradients and optimizer state excluded: the step here takes no optimizer step) is
printed beside it.

Run::

    nice -n 10 .venv/bin/python benchmarks/sft_memory.py --configs 1x512 1x1024 2x1024 1x2048
    nice -n 10 .venv/bin/python benchmarks/sft_memory.py --configs 2x1024 --checkpointing
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rss_peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def one(base: str, rows: int, length: int, checkpointing: bool, shared: int, full: bool) -> dict[str, float]:
    """One measured forward and backward (this process)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from trainers.lora import peft_lora_config
    from trainers.sft_torch import _plain_nll
    from trainers.shared_prefix import shared_prefix_nll

    model = AutoModelForCausalLM.from_pretrained(base, use_safetensors=True, dtype=torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if not full:
        model = get_peft_model(model, peft_lora_config(16))
    model.train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (rows, length), generator=generator)
    if shared:
        ids[:, :shared] = ids[0, :shared]
    labels = ids.clone()
    labels[:, : int(length * 0.7)] = -100
    mask = torch.ones_like(ids)
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = _current_rss_bytes()
    start = time.perf_counter()
    if shared:
        nll, _ = shared_prefix_nll(causal_lm, ids, mask, labels)
    else:
        nll = _plain_nll(causal_lm, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    (nll.total / nll.count).backward()
    seconds = time.perf_counter() - start
    return {"step_peak_gb": (_rss_peak_bytes() - before) / 1e9, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--configs", nargs="+", default=["1x512", "1x1024", "2x1024", "1x2048"],
                        help="ROWSxLENGTH")
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--shared", type=int, default=0, help="shared prefix tokens (0: none)")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from trainers.catalog import resolve_base

    base = resolve_base(args.base).name_or_path
    if args.one:
        rows, length = (int(x) for x in args.one.split("x"))
        print(json.dumps(one(base, rows, length, args.checkpointing, args.shared, args.full)))
        return
    from trainers.memory_estimate import Arch, step_parts

    arch = Arch.read(Path(base))
    for config in args.configs:
        rows, length = (int(x) for x in config.split("x"))
        flags = ["--checkpointing"] * args.checkpointing + ["--full"] * args.full + ["--shared", str(args.shared)]
        out = subprocess.run([sys.executable, __file__, "--base", args.base, "--one", config, *flags], check=True,
                             text=True, stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
        measured = json.loads(out)
        parts = step_parts(arch, rows, length, checkpointing=args.checkpointing, prefix=args.shared,
                           labelled=rows * (length - int(length * 0.7)))
        estimate = sum(parts.values()) / 1e9
        print(f"{config:>8} checkpointing={args.checkpointing} shared={args.shared}: measured step peak "
              f"{measured['step_peak_gb']:.2f} GB in {measured['seconds']:.0f} s; estimated {estimate:.2f} GB "
              f"({', '.join(f'{k} {v / 1e9:.2f}' for k, v in parts.items())}); "
              f"ratio measured/estimate {measured['step_peak_gb'] / estimate:.2f}", flush=True)


if __name__ == "__main__":
    main()
