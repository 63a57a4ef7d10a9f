"""``unconfirmed``: the write made before the customer's reply comes."""

from __future__ import annotations

from ..probes import Attempt
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """Every reference call made before the customer's scripted turns come; None for a single-turn task."""
    if not case.task.turns:
        return None
    run = case.run
    return Attempt(run.calls, case.task.answer, tuple(len(run.calls) for _ in run.turns_at))


AGENT = WrongAgent("unconfirmed", "the right calls, all made before the customer's scripted turns come",
                   "multi-turn tasks", plan, policy_skip=True)
