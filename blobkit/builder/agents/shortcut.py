"""``shortcut``: jump straight to the write."""

from __future__ import annotations

from ..probes import Attempt, successful_writes
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt:
    """Only the last successful write of the reference, with the answer key (the look-ups skipped)."""
    writes = successful_writes(case.world, case.run)
    return case.run.placed((case.run.calls[writes[-1]],) if writes else (), case.task.answer)


AGENT = WrongAgent("shortcut", "only the last write, with the answer key", "every case", plan)
