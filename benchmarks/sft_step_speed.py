"""SFT step time on a CPU: TRL's fused LM head against blobkit's assistant-token loss.

Builds the retail example's kit and the tiny model (64 wide, 4 layers) in a temporary
directory, then runs the same batches of the kit's SFT rows (batch 8, shuffled with a fixed
seed) through forward, backward and an AdamW step with each loss: TRL's ``SFTTrainer.compute_loss``
(which scores every position through the LM head off Triton devices) and
``trainers.local_torch._assistant_token_loss`` (only the labelled positions), alternating
rounds so both see the same machine load. Prints seconds per step for each, their ratio, and
the largest loss difference on the first round's batches.

Run::

    .venv/bin/python benchmarks/sft_step_speed.py                # 5 rounds of 20 steps
    .venv/bin/python benchmarks/sft_step_speed.py --rounds 3 --steps 10 --threads 1
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


def _cli(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], check=True, text=True,
                          stdout=subprocess.PIPE, cwd=ROOT).stdout


def _trainer(trainer_class: type, model_dir: Path, rows: list[dict[str, Any]], scratch: str, batch: int) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig

    from trainers.sft_torch import rows_to_dataset

    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True, dtype=torch.float32)
    args = SFTConfig(output_dir=scratch, per_device_train_batch_size=batch, assistant_only_loss=True, use_cpu=True,
                     report_to="none", max_length=2048, activation_checkpointing=False, seed=42, data_seed=42)
    return trainer_class(model=model, args=args, train_dataset=rows_to_dataset(rows),
                         processing_class=AutoTokenizer.from_pretrained(model_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    import torch
    from trl import SFTTrainer

    from trainers.sft_torch import _assistant_token_loss

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="blobkit-bench-") as tmp:
        built = json.loads(_cli("build", "--world", str(ROOT / "examples/retail_desk/world.json"), "--out",
                                f"{tmp}/kit", "--train-cases", "400", "--eval-cases", "4", "--json"))
        kit = Path(built["kit"]["path"])
        _cli("tiny-model", "--kit", str(kit), "--out", f"{tmp}/tiny")
        rows = [json.loads(line) for line in (kit / "sft.jsonl").read_text().splitlines()]
        trainers = {"trl": _trainer(SFTTrainer, Path(f"{tmp}/tiny"), rows, tmp, 8),
                    "ours": _trainer(_assistant_token_loss(SFTTrainer), Path(f"{tmp}/tiny"), rows, tmp, 8)}
        batches = iter(trainers["trl"].get_train_dataloader())
        seconds = {name: 0.0 for name in trainers}
        worst_diff = 0.0
        for round_index in range(args.rounds):
            round_batches = [next(batches) for _ in range(args.steps)]
            losses: dict[str, list[float]] = {}
            for name, trainer in trainers.items():
                model = trainer.model
                model.train()
                optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
                start = time.perf_counter()
                for batch in round_batches:
                    loss = trainer.compute_loss(model, batch)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    losses.setdefault(name, []).append(float(loss.detach()))
                seconds[name] += time.perf_counter() - start
            if round_index == 0:
                worst_diff = max(abs(a - b) for a, b in zip(losses["trl"], losses["ours"], strict=True))
        steps = args.rounds * args.steps
        for name, total in seconds.items():
            print(f"{name:>5}: {total / steps * 1000:.1f} ms/step over {steps} steps")
        print(f"ratio trl/ours: {seconds['trl'] / seconds['ours']:.2f}x; largest loss difference (first round, "
              f"lr 0): {worst_diff:.2e}")


if __name__ == "__main__":
    main()
