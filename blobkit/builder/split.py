"""Cases, the train/eval split and the leakage report.

Anchor rows are assigned to a side by a seeded hash *before* any case is expanded, so
no anchor row (the case family) can appear on both sides. The leakage report recomputes
what each side touched from the cases themselves rather than trusting the assignment.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blobkit.errors import KitError
from world_format.canonical import canonical_json, content_id

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


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def max_similarity(train: Iterable[str], held_out: Iterable[str]) -> float:
    """Highest Jaccard similarity of word sets between any train and any eval instruction."""
    train_sets = {frozenset(_tokens(text)) for text in train}
    best = 0.0
    for text in held_out:
        tokens = _tokens(text)
        for other in train_sets:
            union = len(tokens | other)
            if union:
                best = max(best, len(tokens & other) / union)
    return round(best, 4)


def leakage_report(train: list[Case], held_out: list[Case]) -> dict[str, Any]:
    """Shared anchors between the sides (must be 0) and the most similar instruction pair."""
    touched_train = {(t, canonical_json(k)) for case in train for t, k in case.instance.anchors_touched}
    touched_eval = {(t, canonical_json(k)) for case in held_out for t, k in case.instance.anchors_touched}
    return {
        "shared_anchors": len(touched_train & touched_eval),
        "train_anchors": len(touched_train),
        "eval_anchors": len(touched_eval),
        "max_instruction_similarity": max_similarity(
            (c.instance.task.instruction for c in train), (c.instance.task.instruction for c in held_out)),
        "similarity_measure": "Jaccard similarity of lowercase word sets (ids differ by construction)",
    }


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
