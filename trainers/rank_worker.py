"""One rank of a multi-process fit: ``python -m trainers.rank_worker SPEC_DIR`` (started by :mod:`trainers.launch`).

Every rank builds the same trainer from the spec (config, plan, rows, kit) and runs its fit under a
:class:`~trainers.ranks.SyncedBudget` whose caller stop is the spec's ``stop`` file. Rank 0 alone prints
progress (marked for relaying) and writes: the checkpoint, and ``fit.json`` last, so its presence means the
fit finished.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from world_format.canonical import atomic_write_json
from world_format.kit import open_kit, read_jsonl

from .config import TrainConfig
from .launch import LOG_MARK, fit_to_json
from .plan_record import PlanRecord
from .ranks import SyncedBudget, World, close_process_group


def _stop_file(path: Path) -> str | None:
    """The reason in the stop file, once it is there."""
    return path.read_text(encoding="utf-8").strip() or "cancelled" if path.is_file() else None


def main(spec_dir: Path) -> int:
    """Run this rank's share of the fit in ``spec_dir``; 0 when it finished."""
    from .targets.base import LocalTarget
    from .targets.registry import target_for

    world = World.from_env()
    spec = json.loads((spec_dir / "spec.json").read_text(encoding="utf-8"))
    config = TrainConfig.model_validate(spec["config"])
    local = target_for(config.target)
    assert isinstance(local, LocalTarget), f"{config.target} does not train in launched ranks"
    rows = read_jsonl(spec_dir / spec["rows"])

    def log(line: str) -> None:
        if world.is_main:
            print(LOG_MARK + line, file=sys.stderr, flush=True)

    with open_kit(Path(spec["kit"])) as kit:
        trainer = local.trainer(config, kit, rows, PlanRecord.model_validate(spec["plan"]))
        budget = SyncedBudget(config.max_model_calls, config.max_minutes, lambda: _stop_file(spec_dir / "stop"))
        try:
            fit = trainer.fit(budget, log)
        finally:
            close_process_group()
    if world.is_main:
        atomic_write_json(spec_dir / "fit.json", fit_to_json(fit))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
