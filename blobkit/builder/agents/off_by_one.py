"""``off-by-one``: the right calls on the neighbouring row."""

from __future__ import annotations

from world_format.state import normalize_value

from ..probes import Attempt
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """Every integer argument that names an anchor row, plus one; None when no call has one."""
    changed, calls = False, []
    for tool_name, arguments in case.run.calls:
        tool = case.world.tool(tool_name)
        keys = set(tool.anchors) if tool else set()
        moved = {name: value + 1 if name in keys and type(normalize_value(value)) is int else value
                 for name, value in arguments.items()}
        changed = changed or moved != arguments
        calls.append((tool_name, moved))
    return case.run.placed(tuple(calls), case.task.answer) if changed else None


AGENT = WrongAgent("off-by-one", "the right calls with every anchor-key integer argument plus one",
                   "calls with an integer key argument", plan)
