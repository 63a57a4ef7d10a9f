"""GRPO steps per minute on local-mlx against local-torch, on the same kit and machine, in one run.

Builds the retail example's kit and the tiny model in a temporary directory, trains a short SFT
on local-torch (so rollouts write tool calls and episodes run several turns), then drives GRPO from
that export on both targets with the shared loop (:class:`trainers.grpo.GRPOTrainer`, the same
steps as ``blobkit train --method grpo``, without the start and end evaluations), alternating
rounds of steps so both see the same machine load. Both targets start from the same export with a
fresh LoRA seeded alike, but sample their own trajectories (different random streams), so
episodes differ in length: model calls and generated tokens per second are printed beside steps
per minute.

torch runs on one thread by default (``--threads``), as mlx's CPU backend did here (its CPU time
equalled its wall time): on a shared 2-core machine torch's two threads stall whenever another
process holds a core, which made the figure swing several-fold between runs.

A short SFT of the tiny model passes almost no case, so every group would have zero variance and
no step would update. By default the reward is therefore a stand-in (the parity of the sum of the
token ids the episode sampled: about half the attempts win), so both targets pay for updates as a
trained model would; the episodes themselves are real. ``--verdict-reward`` keeps VCode's verdict
(give it a longer SFT with ``--sft-epochs``).

Run::

    .venv/bin/python benchmarks/grpo_targets.py                      # 4 rounds of 5 steps per target
    .venv/bin/python benchmarks/grpo_targets.py --rounds 2 --steps 2 --threads 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
TARGETS = ("local-torch", "local-mlx")


def _cli(*args: str) -> str:
    print("+ blobkit " + " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], check=True, text=True,
                          stdout=subprocess.PIPE, cwd=ROOT).stdout


class Counting:
    """A sampling policy (:class:`trainers.grpo.Policy`) that counts the tokens the inner one generates."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.tokens, self.slots = inner, 0, inner.slots

    @property
    def decoded(self) -> Any:
        return self.inner.decoded

    def begin(self) -> None:
        self.inner.begin()

    def next_turns(self, requests: Any) -> list[str]:
        texts = self.inner.next_turns(requests)
        self.tokens += sum(len(self.inner.decoded[request.key][-1].new_ids) for request in requests)
        return list(texts)

    def end(self, key: int) -> None:
        self.inner.end(key)

    def done(self) -> None:
        self.inner.done()


def coin_reward() -> None:
    """Reward every rollout by the parity of the sum of its sampled token ids instead of VCode's verdict."""
    from trainers import grpo

    verdict_rollouts = grpo.rollouts

    def coin_rollouts(policy: Any, runtime: Any, cases: Any, max_turns: int) -> Any:
        items = verdict_rollouts(policy, runtime, cases, max_turns)
        for item in items:
            item.reward = float(sum(sum(turn.new_ids) for turn in item.turns) % 2)
        return items

    grpo.rollouts = coin_rollouts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps per target per round")
    parser.add_argument("--train-cases", default="10", help="training cases per task of the kit")
    parser.add_argument("--sft-epochs", default="3")
    parser.add_argument("--verdict-reward", action="store_true", help="reward by VCode's verdict, not a coin")
    parser.add_argument("--batch-size", type=int, default=8, help="episodes per GRPO step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="token cap of a turn (default: derived from the kit's rows)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.verdict_reward:
        coin_reward()

    from trainers.config import TrainConfig
    from trainers.grpo import GRPOTrainer
    from trainers.plan import plan
    from world_format.kit import open_kit

    with tempfile.TemporaryDirectory(prefix="blobkit-bench-") as tmp:
        built = json.loads(_cli("build", "--world", str(ROOT / "examples/retail_desk/world.json"), "--out",
                                f"{tmp}/kit", "--train-cases", args.train_cases, "--eval-cases", "2", "--json"))
        kit_path = built["kit"]["path"]
        _cli("tiny-model", "--kit", kit_path, "--out", f"{tmp}/tiny")
        _cli("train", "--world", kit_path, "--base", f"{tmp}/tiny", "--method", "sft", "--target", "local-torch",
             "--full", "--lr", "5e-3", "--batch-size", "8", "--epochs", args.sft_epochs, "--max-length", "2048",
             "--max-turns", "5", "--eval-limit", "2", "--out", f"{tmp}/sft", "--json")
        with open_kit(Path(kit_path)) as kit:
            rows = kit.rows()
            runs: dict[str, dict[str, Any]] = {}
            for target in TARGETS:
                config = TrainConfig(kit=Path(kit_path), base=f"{tmp}/tiny", method="grpo", target=target,
                                     out=Path(tmp, target), init_adapter=Path(tmp, "sft", "export"),
                                     batch_size=args.batch_size, group_size=args.group_size, max_turns=5,
                                     max_new_tokens=args.max_new_tokens, learning_rate=5e-4)
                planned = plan(config, kit, rows, kit.path("sft.jsonl"))
                trainer = GRPOTrainer(planned.config, kit, rows, planned)
                runs[target] = {"trainer": trainer, "sampler": Counting(trainer.backend.sampler()),
                                "order": random.Random(config.seed), "runtime": kit.world().runtime(),
                                "seconds": 0.0, "steps": []}
            try:
                for _ in range(args.rounds):
                    for target in TARGETS:
                        run = runs[target]
                        for _ in range(args.steps):
                            started = time.perf_counter()
                            record = run["trainer"].step(len(run["steps"]) + 1, run["sampler"], run["order"],
                                                         run["runtime"])
                            run["seconds"] += time.perf_counter() - started
                            run["steps"].append(record)
            finally:
                for run in runs.values():
                    run["runtime"].close()
    per_minute = {}
    for target, run in runs.items():
        steps, seconds = run["steps"], run["seconds"]
        calls = sum(s["model_calls"] for s in steps)
        per_minute[target] = len(steps) / seconds * 60
        print(f"{target:>11}: {per_minute[target]:.2f} steps/min over {len(steps)} steps ({seconds:.0f} s); "
              f"{calls / seconds:.2f} model calls/s, {run['sampler'].tokens / seconds:.0f} generated tokens/s; "
              f"{sum(s['optimizer_update'] for s in steps)} updates; "
              f"mean reward {sum(s['reward_mean'] for s in steps) / len(steps):.2f}; "
              f"{sum(s['episode_turns_mean'] for s in steps) / len(steps):.2f} turns per episode")
    print(f"ratio local-mlx / local-torch: {per_minute['local-mlx'] / per_minute['local-torch']:.2f}x steps per minute"
          f" ({'VCode verdict' if args.verdict_reward else 'stand-in'} rewards, torch threads "
          f"{torch.get_num_threads()})")


if __name__ == "__main__":
    main()
