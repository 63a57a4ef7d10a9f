"""``unidentified``: the chain without the declared identification."""

from __future__ import annotations

from world_format.procedures import declared_tools

from ..probes import Attempt, without
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls without the declared identification; None when the world declares none or the chain
    makes none."""
    tools = set(declared_tools(case.world))
    calls = {i for i, (name, _) in enumerate(case.run.calls) if name in tools}
    return without(case.run, calls, case.task.answer) if calls else None


AGENT = WrongAgent("unidentified", "the right calls without the identification",
                   "worlds that declare `identify`", plan, policy_skip=True)
