"""The building blocks of the wrong agents (:mod:`blobkit.builder.agents`): a scripted attempt and what it is made of.

An :class:`Attempt` is what an agent does: the tool calls it makes, in order, what it says when it asks the
customer, and its final answer. Each wrong agent builds one from a case's :class:`ReferenceCalls` (the reference
chain as executed); the gate runs it on an isolated episode and the case's verifier must fail it, and
``blobkit adversary`` writes the same attempt as a conversation (:func:`as_messages`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from world_format.affirmed import number_spans, prepared, text_spans
from world_format.models import AnswerCheck, Ref, Task, Tool, UserTurn, World
from world_format.runtime import WorldRuntime
from world_format.values import normalize_text, to_decimal

Call = tuple[str, dict[str, Any]]
MAX_LISTED_VALUES = 50
"""The over-inclusive answer lists at most this many candidate values of a field."""


@dataclass(frozen=True)
class Attempt:
    """A scripted trajectory: the calls an agent makes, in order, its final answer, and (a multi-turn task) how
    many calls it has made each time it turns to the customer, and what it says then."""

    calls: tuple[Call, ...]
    answer: str | None
    turns_at: tuple[int, ...] = ()
    asks: tuple[str | None, ...] = ()
    """What the agent says at each of ``turns_at`` (None, or no entry: the question of the scripted turn the
    customer has yet to give, in its reference wording)."""

    def question(self, index: int, waiting: UserTurn | None) -> str:
        """What the agent says the ``index``-th time it turns to the customer, ``waiting`` the scripted turn not
        yet given (None: the script is used up)."""
        said = self.asks[index] if index < len(self.asks) else None
        if said is not None:
            return said
        return waiting.assistant if waiting is not None else ""


@dataclass(frozen=True)
class ReferenceCalls:
    """The reference chain as executed: resolved calls, which returned an error, and where the customer's turns
    came (calls made before each)."""

    calls: tuple[Call, ...]
    errors: tuple[bool, ...]
    turns_at: tuple[int, ...] = ()

    def placed(self, calls: tuple[Call, ...], answer: str | None) -> Attempt:
        """An attempt making ``calls`` with the customer's turns where the reference had them (or at the end)."""
        return Attempt(calls, answer, tuple(min(at, len(calls)) for at in self.turns_at))


def _is_write(world: World, tool: str) -> bool:
    declared: Tool | None = world.tool(tool)
    return declared is not None and declared.effect == "write"


def successful_writes(world: World, run: ReferenceCalls) -> list[int]:
    """Indexes of the reference calls that changed the state through a write tool."""
    return [i for i, ((tool, _), error) in enumerate(zip(run.calls, run.errors, strict=True))
            if not error and _is_write(world, tool)]


def perturb(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """A plausible but wrong value of the same type."""
    options = (schema or {}).get("enum")
    if options and value in options and len(options) > 1:
        return options[(options.index(value) + 1) % len(options)]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + 1.5, 2)
    if isinstance(value, str):
        return value + "x"
    return "wrong"


def answer_checks(task: Task) -> list[AnswerCheck]:
    """The task's answer checks."""
    return [check for check in task.vcode.checks if isinstance(check, AnswerCheck)]


def _replaced(text: str, spans: list[tuple[int, int]], by: str) -> str:
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + by + text[end:]
    return text


def perturb_answer(answer: str, task: Task | None = None) -> str:
    """The answer with the value its verifier checks replaced by a wrong one wherever the answer states it (a
    number by its neighbour at its precision, a text by "unknown"); an answer none of whose checked values it
    states has its last number changed."""
    text = prepared(answer)
    for check, value in resolved_checks(task) if task else []:
        expected = to_decimal(value) if check.mode == "number" else None
        if expected is not None:
            spans = number_spans(text, expected, check.decimals, check.rounding)
            if spans:
                return _replaced(text, spans, _number_alternatives(value)[0])
        elif isinstance(value, str) and value:
            spans = text_spans(text, value)
            if spans:
                return _replaced(text, spans, "unknown" if normalize_text(value) != "unknown" else "known")
    numbers = list(re.finditer(r"-?\d+(?:\.\d+)?", answer))
    if numbers:
        last = numbers[-1]
        wrong = str(perturb(float(last.group()) if "." in last.group() else int(last.group())))
        return answer[:last.start()] + wrong + answer[last.end():]
    return "Sorry, that request was not possible today."


def without(run: ReferenceCalls, left_out: set[int], answer: str | None) -> Attempt:
    """The reference calls but those at ``left_out``, the customer's turns kept where they came."""
    kept = [i for i in range(len(run.calls)) if i not in left_out]
    turns_at = tuple(sum(1 for i in kept if i < at) for at in run.turns_at)
    return Attempt(tuple(run.calls[i] for i in kept), answer, turns_at)


def _number_alternatives(value: Any) -> list[str]:
    expected = to_decimal(value)
    if expected is None:
        return []
    exponent = expected.as_tuple().exponent
    step = Decimal(1) if expected == expected.to_integral_value() or not isinstance(exponent, int) \
        else Decimal(1).scaleb(exponent)
    return [_plain(expected + step), _plain(expected - step)]


def _plain(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else format(value, "f")


def alternatives(runtime: WorldRuntime, check: AnswerCheck, value: Any) -> list[str]:
    """Values of the same kind as the checked one that a committed answer must not also state (sorted)."""
    if check.mode == "number":
        return _number_alternatives(value)
    right = normalize_text(str(value))
    found: set[str] = set()
    if check.field is not None:
        table, column = check.field.split(".", 1)
        found.update(runtime.field_values(table, column).every())
    found.update(normalize_text(other) for other in check.others)
    return sorted(text for text in found if text and text != right)


def resolved_checks(task: Task) -> list[tuple[AnswerCheck, Any]]:
    """Answer checks whose value is known before the run (literals or the answer key)."""
    out = []
    for check in answer_checks(task):
        value = check.value
        if isinstance(value, Ref):
            if value.ref != "answer_key":
                continue
            value = task.answer
        out.append((check, value))
    return out
