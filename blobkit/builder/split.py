"""Cases and the train/eval split.

Connected entities (an anchor row with everything its owning foreign keys join it to) are assigned to a
side by a seeded hash *before* any case is expanded, so no entity can appear on both sides. The leakage
report (:mod:`blobkit.builder.leakage`) recomputes what each side touched from the cases themselves rather
than trusting the assignment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from blobkit.errors import KitError
from world_format.canonical import content_id

from .config import Progress, no_progress
from .mint import Instance

if TYPE_CHECKING:
    from .candidates import TaskEntry


@dataclass(frozen=True)
class Case:
    """One instantiated task on one anchor row, on one side of the split."""

    case_id: str
    side: str
    instance: Instance

    @staticmethod
    def make(instance: Instance, side: str) -> Case:
        """A case with a content-hash id."""
        task = instance.task
        body = {"task": instance.spec_id, "key": instance.key, "instruction": task.instruction}
        return Case(content_id(body, "c-"), side, instance)


def split_cases(entries: list[TaskEntry], progress: Progress = no_progress) -> tuple[list[Case], list[Case]]:
    """The admitted cases on their sides (decided when each case was made, gated since); KitError when either
    side ends up empty."""
    train: list[Case] = []
    held_out: list[Case] = []
    instances = [instance for entry in entries for instance in entry.instances]
    for index, instance in enumerate(instances):
        progress("split", index, len(instances))
        (held_out if instance.side == "eval" else train).append(Case.make(instance, instance.side))
    progress("split", len(instances), len(instances))
    repeated = sorted(i for i, n in Counter(case.case_id for case in train + held_out).items() if n > 1)
    if repeated:
        raise KitError(f"case {repeated[0]} was made twice (the same task, anchor row and instruction); "
                       "each request must name what it is about")
    if not train or not held_out:
        left = Counter(name for entry in entries for name, count in entry.left_out.items() for _ in range(count))
        gated = f"; the gate left out {', '.join(f'{n} {k}' for k, n in sorted(left.items()))}" if left else ""
        raise KitError("the world has only one independent family of cases: cannot hold out evaluation cases "
                       f"(train {len(train)}, eval {len(held_out)}{gated}); add anchor rows or tasks on more rows")
    return train, held_out
