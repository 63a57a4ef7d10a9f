"""``no-handoff``: the right answer without handing the customer off."""

from __future__ import annotations

from ..probes import Attempt, without
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls without the calls of the world's hand-off tool, with the answer key (the hand-off
    message); None when the world declares no hand-off rule or the reference makes no hand-off."""
    rule = case.world.procedures.handoff
    calls = {i for i, (tool, _) in enumerate(case.run.calls) if rule is not None and tool == rule.tool}
    return without(case.run, calls, case.task.answer) if calls else None


AGENT = WrongAgent("no-handoff", "the right calls without the hand-off, with the answer key (the hand-off message)",
                   "hand-off cases", plan)
