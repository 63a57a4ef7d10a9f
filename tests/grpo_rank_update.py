"""One GRPO update on fixed rollouts, in one process or as one of N ranks (``torch.distributed.run``).

``python tests/grpo_rank_update.py TINY OUT``: every rank takes every size-th of the same 8 synthetic
rollouts (two groups' worth of turns with fixed token ids and advantages), applies
:meth:`TorchGRPOBackend.update` and rank 0 saves the adapter to OUT. A test compares the adapter of 2 ranks
with that of one process.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

from trainers.config import TrainConfig
from trainers.generation import Decoded
from trainers.grpo import PolicySource, Rollout
from trainers.grpo_torch import TorchGRPOBackend
from trainers.ranks import World, close_process_group, init_process_group


def _rollouts(vocab: int) -> tuple[list[Rollout], list[float]]:
    order = random.Random(7)
    items, weights = [], []
    for index in range(8):
        turns = [Decoded([order.randrange(3, vocab) for _ in range(order.randint(5, 12))],
                         [order.randrange(3, vocab) for _ in range(order.randint(1, 6 + index))], True)
                 for _ in range(1 + index % 2)]
        items.append(Rollout(f"case-{index}", turns, episode=Any, reward=float(index % 3 == 0),  # type: ignore[arg-type]
                             verifier_error=False))
        weights.append(0.0 if index == 5 else (0.5 if index % 3 == 0 else -0.25))
    return items, weights


def main(tiny: Path, out: Path) -> None:
    world = World.from_env()
    init_process_group()
    config = TrainConfig(base=str(tiny), method="grpo", target="local-torch", lora_rank=4, learning_rate=1e-2)
    backend = TorchGRPOBackend(config, PolicySource({"source": "local", "name_or_path": str(tiny),
                                                     "revision": None}, None, str(tiny)))
    items, weights = _rollouts(int(backend.tokenizer.vocab_size))
    mine = list(range(world.rank, len(items), world.size))
    loss = backend.update([items[i] for i in mine], [weights[i] for i in mine]).loss
    close_process_group()
    if world.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "loss.txt").write_text(repr(loss), encoding="utf-8")
        backend.save(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
