"""``forbidden-write``: the refused write attempted anyway."""

from __future__ import annotations

from typing import Any

from world_format.models import Ref, Task, ToolNotCalledCheck, World

from ..probes import Attempt, Call
from .base import CaseRun, WrongAgent


def _forbidden_call(world: World, task: Task, check: ToolNotCalledCheck) -> Call | None:
    """The call a ``tool_not_called`` check forbids: its arguments, the task's anchor key for a key parameter left
    out, and a declared value (default, enum, examples) for any other required one; None for a reference value."""
    tool = world.tool(check.tool)
    if tool is None or tool.effect != "write" or any(isinstance(v, Ref) for v in check.arguments.values()):
        return None
    arguments: dict[str, Any] = dict(check.arguments)
    properties = tool.parameters.get("properties", {})
    for name in tool.parameters.get("required", []):
        target = tool.anchors.get(name, "")
        prop = properties.get(name, {}) if isinstance(properties.get(name), dict) else {}
        if name in arguments:
            continue
        if target.split(".")[0] == task.anchor.table:
            key = task.anchor.key
            arguments[name] = key.get(target.split(".")[1]) if isinstance(key, dict) else key
        elif "default" in prop or prop.get("enum") or prop.get("examples"):
            arguments[name] = prop["default"] if "default" in prop else (prop.get("enum") or prop["examples"])[0]
    return check.tool, arguments


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls, then each write the verifier forbids, with the answer key; None when it forbids none."""
    task = case.task
    calls = [call for check in task.vcode.checks if isinstance(check, ToolNotCalledCheck)
             if (call := _forbidden_call(case.world, task, check)) is not None]
    return case.run.placed(case.run.calls + tuple(calls), task.answer) if calls else None


AGENT = WrongAgent("forbidden-write", "the right calls plus the write the verifier forbids",
                   "verifiers with `tool_not_called` on a write", plan, policy_skip=True)
