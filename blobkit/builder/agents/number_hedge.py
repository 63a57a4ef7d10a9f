"""``number-hedge``: the right number, hedged with neighbours the agent first put into tool calls."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from world_format.values import to_decimal

from ..probes import Attempt, Call, resolved_checks
from .base import CaseRun, WrongAgent

NOTE_TOOL = "note_numbers"
"""The undeclared tool the agent passes its hedges to when no call of the chain takes an integer argument."""


def neighbours(value: Any) -> list[int]:
    """The integers around a checked number (3 → 4, 2; 194.99 → 194, 195): a hedge's other candidates."""
    number = to_decimal(value)
    if number is None:
        return []
    low = int(number.to_integral_value(rounding="ROUND_FLOOR"))
    found = [low + 1, low - 1] if number == Decimal(low) else [low, low + 1]
    return [n for n in found if n >= 0]


def _hedge_calls(case: CaseRun, numbers: list[int]) -> list[Call]:
    """Calls that carry ``numbers`` as arguments: the chain's last read call with an integer argument (else its
    last call with one), repeated with each (they fail or name another row); else one call of an undeclared tool."""
    def reads(call: Call) -> bool:
        tool = case.world.tool(call[0])
        return tool is not None and tool.effect == "read"

    for tool, arguments in sorted(reversed(case.run.calls), key=lambda call: not reads(call)):
        names = [name for name, value in arguments.items() if type(value) is int]
        if names:
            return [(tool, {**arguments, names[0]: number}) for number in numbers]
    return [(NOTE_TOOL, {f"n{index}": number for index, number in enumerate(numbers)})]


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls plus calls carrying the integers around each checked number; the answer key plus those
    integers. None when no number check reads the answer."""
    numbers = sorted({n for check, value in resolved_checks(case.task) if check.mode == "number"
                      for n in neighbours(value)})
    if case.task.answer is None or not numbers:
        return None
    hedge = " or ".join(str(n) for n in numbers)
    return case.run.placed(case.run.calls + tuple(_hedge_calls(case, numbers)),
                           f"{case.task.answer} Or perhaps {hedge}.")


AGENT = WrongAgent("number-hedge", "the right calls plus calls (failed, or to an undeclared tool) carrying the "
                   "integers around the checked number; the answer key plus those integers",
                   "cases with a number check", plan)
