"""``over-inclusive``: the answer plus every candidate value."""

from __future__ import annotations

from ..probes import MAX_LISTED_VALUES, Attempt, alternatives, resolved_checks
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The answer key plus every candidate value of each checked answer; None when the answer is not checked."""
    task = case.task
    checks = resolved_checks(task)
    if task.answer is None or not checks:
        return None
    listed = [value for check, right in checks
              for value in alternatives(case.runtime, check, right)[:MAX_LISTED_VALUES]]
    return case.run.placed(case.run.calls, f"{task.answer} It could also be one of: {', '.join(listed) or '…'}.")


AGENT = WrongAgent("over-inclusive", "the right calls; the answer key plus every candidate value of the checked "
                   "field", "cases with a checked answer", plan)
