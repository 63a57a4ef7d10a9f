"""``wrong-value``: the right calls with the checked value wrong."""

from __future__ import annotations

from ..probes import Attempt, answer_checks, perturb, perturb_answer, successful_writes
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt:
    """The reference calls with the checked answer perturbed, or (answer unchecked) the last write's first non-key
    argument perturbed."""
    task, run, world = case.task, case.run, case.world
    calls = [(tool, dict(args)) for tool, args in run.calls]
    if task.answer is not None and answer_checks(task):
        return run.placed(tuple(calls), perturb_answer(task.answer, task))
    writes = successful_writes(world, run)
    if calls:
        index = writes[-1] if writes else len(calls) - 1
        tool_name, arguments = calls[index]
        tool = world.tool(tool_name)
        properties = tool.parameters.get("properties", {}) if tool else {}
        key_params = set(tool.anchors) if tool else set()
        declared = [n for n in properties if n in arguments]  # the tool's order: a stored case reads the same
        names = [n for n in declared if n not in key_params] or declared
        if names:
            arguments[names[0]] = perturb(arguments[names[0]], properties.get(names[0]))
    return run.placed(tuple(calls), task.answer)


AGENT = WrongAgent("wrong-value", "the right calls with the checked answer perturbed (or, answer unchecked, the "
                   "last write's argument)", "every case", plan)
