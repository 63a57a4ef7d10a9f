"""``null``: the do-nothing agent."""

from __future__ import annotations

from ..probes import Attempt
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt:
    """No call and no answer."""
    return case.run.placed((), None)


AGENT = WrongAgent("null", "nothing: no call, no answer", "every case", plan)
