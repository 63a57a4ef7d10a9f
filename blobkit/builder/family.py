"""Cases of a task family: the authored template filled in from rows of its query.

The build reads a bounded sample of the query's rows (:func:`world_format.family.family_sample`: every row up to
:data:`~world_format.family.FAMILY_SAMPLE_ROWS`, the first ones beyond). The rows read are put in a seeded order
that does not depend on the order the query returns them,
assigned to a side by their anchor row's entity (as minted cases are), and a row becomes a case only
when its filled-in reference chain runs cleanly and passes its filled-in verifier. Rows left
out are counted, never silently dropped.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from blobkit.errors import WorldFormatError
from world_format.canonical import canonical_json
from world_format.chain import final_answer, run_chain
from world_format.family import family_sample, fill
from world_format.models import Task
from world_format.runtime import WorldRuntime
from world_format.vcode import evaluate

from .mint import Instance, Minter


@dataclass(frozen=True)
class FamilyReport:
    """How many rows of the family's query were read, were looked at, and were left out (and why)."""

    rows: int
    """Rows read from the query: all it returns, or the sample's size when :attr:`sampled`."""
    scanned: int
    """Rows looked at in the seeded order (filled in, side assigned, reference chain run)."""
    left_out: dict[str, int]
    """Rows looked at that gave no case, by reason."""
    sampled: bool = False
    """Whether the query returns more rows than were read."""

    def to_json(self) -> dict[str, Any]:
        """As recorded in tasks.jsonl (``sampled`` only when true)."""
        record: dict[str, Any] = {"rows": self.rows, "scanned": self.scanned,
                                  "left_out": dict(sorted(self.left_out.items()))}
        if self.sampled:
            record["sampled"] = True
        return record


def reference_passes(runtime: WorldRuntime, task: Task) -> bool:
    """Whether the task's reference chain runs cleanly and its verifier passes, on an isolated episode."""
    answer, _ = final_answer(task)
    with runtime.episode() as episode:
        result = run_chain(episode, task.reference, task.turns)
        return result.clean and evaluate(task.vcode, episode, answer, task.answer).passed


def _rank(seed: int, task_id: str, row: dict[str, Any]) -> bytes:
    return hashlib.sha256(f"{seed}:{task_id}:{canonical_json(row)}".encode()).digest()


def seeded_order(rows: Iterable[dict[str, Any]], seed: int, task_id: str,
                 keep: int) -> tuple[list[dict[str, Any]], int]:
    """The ``keep`` rows that come first in an order fixed by the seed and the task, and how many rows there were.

    The order is a seeded hash of each row's content, so it does not depend on the order the
    query returns rows in; rows are streamed and only ``keep`` are held (``heapq.nsmallest``).
    """
    total = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal total
        for row in rows:
            total += 1
            yield row

    picked = heapq.nsmallest(keep, counted(), key=lambda row: _rank(seed, task_id, row))
    return picked, total


def family_instances(minter: Minter, task: Task, task_id: str, *, wanted: dict[str, int],
                     scan_limit: int) -> tuple[list[Instance], FamilyReport]:
    """Up to ``wanted[side]`` verified cases per side (at least two in all when the rows allow)."""
    runtime = minter.runtime
    sample = family_sample(runtime, task)
    rows, total = seeded_order(sample.dicts(), minter.seed, task_id, scan_limit)
    found: list[Instance] = []
    counts = {"train": 0, "eval": 0}
    left_out = {"does_not_fill_in": 0, "reference_fails": 0}
    scanned = 0
    for row in rows:
        if all(counts[side] >= wanted[side] for side in counts):
            break
        scanned += 1
        try:
            filled = fill(task, row)
        except WorldFormatError:
            left_out["does_not_fill_in"] += 1
            continue
        side = minter.sides.side(filled.anchor.table, filled.anchor.key)
        if counts[side] >= wanted[side] and len(found) >= 2:
            continue
        instance = minter.on_side(task_id, filled.anchor.table, filled.anchor.key, filled)
        if instance is None:  # names rows of entities on both sides of the split
            left_out["spans_sides"] = left_out.get("spans_sides", 0) + 1
            continue
        if not reference_passes(runtime, filled):
            left_out["reference_fails"] += 1
            continue
        if any(i.key == filled.anchor.key and i.task.instruction == filled.instruction for i in found):
            # the same request about the same row, with another chain: no agent could tell which was meant
            left_out["same_request"] = left_out.get("same_request", 0) + 1
            continue
        found.append(instance)
        counts[side] += 1
    return found, FamilyReport(total, scanned, left_out, sample.more)
