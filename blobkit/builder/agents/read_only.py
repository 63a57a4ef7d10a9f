"""``read-only``: the look-ups without the writes."""

from __future__ import annotations

from ..probes import Attempt, successful_writes, without
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls without their successful writes, with the answer key; None when there is no write."""
    writes = set(successful_writes(case.world, case.run))
    return without(case.run, writes, case.task.answer) if writes else None


AGENT = WrongAgent("read-only", "the right calls without their writes, with the answer key", "cases with a write",
                   plan)
