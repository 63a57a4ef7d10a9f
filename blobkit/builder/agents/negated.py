"""``negated``: the right calls, and an answer that denies the checked value."""

from __future__ import annotations

from ..probes import Attempt, resolved_checks
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls; the answer states each checked value only to deny it ("it is not X, and it never was
    X"). None when no contains or number check reads the answer."""
    values = [str(value) for check, value in resolved_checks(case.task) if check.mode in ("contains", "number")]
    if case.task.answer is None or not values:
        return None
    denied = " ".join(f"I checked it: it is not {value}, and it never was {value}." for value in values)
    return case.run.placed(case.run.calls, denied)


AGENT = WrongAgent("negated", "the right calls; an answer that states the checked value only to deny it (\"it is "
                   "not X, and it never was X\")", "cases with a checked answer", plan)
