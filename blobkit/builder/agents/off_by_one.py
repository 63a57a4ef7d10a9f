"""``off-by-one``: the right calls on the neighbouring row."""

from __future__ import annotations

import re
from typing import Any

from world_format.state import normalize_value

from ..probes import Attempt
from .base import CaseRun, WrongAgent

_LAST_DIGITS = re.compile(r"(\d+)(?!.*\d)")


def next_key(value: Any) -> Any:
    """The neighbouring key: an integer plus one; a text with digits with its last run of digits plus one, at its
    width (``#W8704143`` → ``#W8704144``, ``MER-LT-0069`` → ``MER-LT-0070``); anything else unchanged."""
    if type(normalize_value(value)) is int:
        return value + 1
    if isinstance(value, str):
        found = _LAST_DIGITS.search(value)
        if found:
            digits = found.group(1)
            return value[:found.start()] + str(int(digits) + 1).zfill(len(digits)) + value[found.end():]
    return value


def plan(case: CaseRun) -> Attempt | None:
    """Every argument that names an anchor row (a parameter the tool anchors), moved to its neighbour
    (:func:`next_key`); None when no call has one."""
    changed, calls = False, []
    for tool_name, arguments in case.run.calls:
        tool = case.world.tool(tool_name)
        keys = set(tool.anchors) if tool else set()
        moved = {name: next_key(value) if name in keys else value for name, value in arguments.items()}
        changed = changed or moved != arguments
        calls.append((tool_name, moved))
    return case.run.placed(tuple(calls), case.task.answer) if changed else None


AGENT = WrongAgent("off-by-one", "the right calls with every anchor-key argument moved to its neighbour (an integer "
                   "plus one; a text key's last digits plus one, `#W8704143` → `#W8704144`)",
                   "calls with a key argument that holds digits", plan)
