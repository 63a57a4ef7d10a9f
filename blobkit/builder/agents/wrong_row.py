"""``wrong-row``: another case's chain and answer."""

from __future__ import annotations

from ..probes import Attempt
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The distractor case's reference calls and answer key (None without a distractor: the gate then rejects the
    case, since it cannot be told from another row)."""
    if case.distractor is None:
        return None
    task, run = case.distractor
    return run.placed(run.calls, task.answer)


AGENT = WrongAgent("wrong-row", "another case's chain and answer (the case's distractor)", "every case", plan,
                   required="no distractor row of the same shape to probe with")
