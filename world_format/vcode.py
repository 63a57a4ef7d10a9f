"""The VCode interpreter: declarative verifier programs evaluated by blobkit's own code.

A verdict has three outcomes. ``pass`` needs every check to pass; the first failing check
makes it ``fail``; a check that cannot be evaluated (a query that does not run, a
malformed pointer) makes it ``error`` — and an error is never a pass.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Literal

from world_format.canonical import canonical_json
from world_format.errors import BlobkitError, VCodeError

from .affirmed import number_tokens, prepared, text_spans, unasserted
from .keys import key_parameters, normalize_key
from .models import (
    AfterTurnCheck,
    AnswerCheck,
    Capture,
    JsonValueCheck,
    OrderCheck,
    Ref,
    SqlCheck,
    ToolCalledCheck,
    ToolNotCalledCheck,
    UnchangedExceptCheck,
    VCode,
)
from .runtime import Episode, ToolEvent
from .state import quote_identifier
from .text_keys import is_text_key
from .values import answer_numbers, normalize_text, numbers_equal, states, to_decimal, values_equal, without

Outcome = Literal["pass", "fail", "error"]
__all__ = ["Verdict", "evaluate", "json_pointer", "normalize_text", "values_equal"]


@dataclass(frozen=True)
class Verdict:
    """The outcome of a verifier on one episode, with the reason of the first non-pass."""

    outcome: Outcome
    reason: str = ""
    checks: tuple[str, ...] = field(default=())
    """The kinds of the checks that passed before the first non-pass, in order."""
    credit: float | None = None
    """With ``evaluate(..., credit=True)``: the share of the program's captures and checks that pass when each is
    evaluated on its own (0.0 to 1.0, 4 decimals; a check that fails or cannot run counts as not passing); None
    otherwise. It never changes the outcome: only ``pass`` means the task was done."""

    @property
    def passed(self) -> bool:
        """True only for a pass (an error is never a pass)."""
        return self.outcome == "pass"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        plain: dict[str, Any] = {"outcome": self.outcome, "reason": self.reason, "checks": list(self.checks)}
        if self.credit is not None:
            plain["credit"] = self.credit
        return plain


class _Fail(Exception):
    """A check failed (internal control flow)."""


def json_pointer(document: Any, pointer: str) -> Any:
    """Resolve an RFC 6901 pointer; raise KeyError when it does not resolve."""
    if pointer == "":
        return document
    current = document
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise KeyError(pointer)
    return current


class _Context:
    def __init__(self, episode: Episode, answer: str | None, answer_key: str | None) -> None:
        self.episode = episode
        self.trace: list[ToolEvent] = episode.trace
        self.answer = answer
        self.answer_key = answer_key
        self.captures: dict[str, Any] = {}

    def resolve(self, value: Any) -> Any:
        if not isinstance(value, Ref):
            return value
        if value.ref == "answer_key":
            if self.answer_key is None:
                raise VCodeError("the verifier refers to answer_key but the task has none")
            return self.answer_key
        name = value.ref.split(".", 1)[1]
        if name not in self.captures:
            raise VCodeError(f"the verifier refers to undeclared capture {name!r}")
        return self.captures[name]


def _capture(ctx: _Context, capture: Capture) -> None:
    calls = [event for event in ctx.trace if event.tool == capture.tool and not event.error]
    if not calls:
        raise _Fail(f"capture {capture.name}: {capture.tool} was never called successfully")
    event = calls[0] if capture.occurrence == "first" else calls[-1]
    try:
        ctx.captures[capture.name] = json_pointer(event.observation, capture.pointer)
    except KeyError:
        raise _Fail(f"capture {capture.name}: {capture.pointer} is not in the {capture.tool} observation") from None


def _resolve_deep(ctx: _Context, value: Any) -> Any:
    if isinstance(value, list):
        return [_resolve_deep(ctx, item) for item in value]
    if isinstance(value, dict):
        return {key: _resolve_deep(ctx, item) for key, item in value.items()}
    return ctx.resolve(value)


def _arguments_match(ctx: _Context, wanted: dict[str, Any], arguments: Any, list_match: Any = "ordered") -> bool:
    if not isinstance(arguments, dict):
        return False
    return all(name in arguments and values_equal(arguments[name], _resolve_deep(ctx, value), list_match=list_match)
               for name, value in wanted.items())


def _check_sql(ctx: _Context, check: SqlCheck) -> None:
    params = {name: ctx.resolve(value) for name, value in check.params.items()}
    try:
        rows = ctx.episode.query(check.query, params)
    except (sqlite3.Error, sqlite3.Warning, OverflowError, BlobkitError) as exc:
        raise VCodeError(f"sql check could not run: {exc}") from None
    expected = [[ctx.resolve(value) for value in row] for row in check.expect]
    same = len(rows) == len(expected) and all(
        len(got) == len(want) and all(values_equal(g, w, check.decimals, check.rounding)
                                      for g, w in zip(got, want, strict=True))
        for got, want in zip(rows, expected, strict=True)
    )
    if not same:
        raise _Fail(f"sql check: expected {_shown(expected[:3])}, got {_shown([list(r) for r in rows[:3]])}")


def _check_answer(ctx: _Context, check: AnswerCheck) -> None:
    if ctx.answer is None or not ctx.answer.strip():
        raise _Fail("no final answer")
    answer, value = ctx.answer, ctx.resolve(check.value)
    text = "" if value is None else str(value)
    if check.mode == "exact":
        ok = answer.strip() == text.strip()
    elif check.mode == "normalized":
        ok = normalize_text(answer) == normalize_text(text)
    elif check.mode == "contains":
        ok = states(answer, text)
        if ok:
            _fail_unless_asserted(answer, text_spans(prepared(answer), text), check.mode, text)
            _fail_on_other_values(ctx, check, answer, text)
    elif check.mode == "regex":
        try:
            ok = re.search(text, answer) is not None
        except re.error as exc:
            raise VCodeError(f"answer regex does not compile: {exc}") from None
    elif check.mode == "number":
        _check_number(ctx, check, answer, value)
        ok = True
    else:
        ok = _json_field_equals(answer, check.pointer or "", value)
    if not ok:
        raise _Fail(f"answer check ({check.mode}) failed against {text[:80]!r}")


def _fail_on_other_values(ctx: _Context, check: AnswerCheck, answer: str, right: str) -> None:
    """A committed answer states no value of ``field`` and none of ``others`` besides the right one."""
    rest = without(answer, right).strip()
    if check.field is not None:
        table, column = check.field.split(".", 1)
        found = ctx.episode.runtime.field_values(table, column).stated_in(rest)
        if found:
            raise _Fail(f"answer check (contains) failed: the answer also states {found[0]!r} (another {check.field})")
    stated = next((other for other in check.others if normalize_text(other) != normalize_text(right)
                   and states(rest, other)), None)
    if stated is not None:
        raise _Fail(f"answer check (contains) failed: the answer also states {stated[:80]!r}")


def _fail_unless_asserted(answer: str, spans: list[tuple[int, int]], mode: str, value: Any) -> None:
    """Every statement of the value is affirmative (:mod:`world_format.affirmed`): not negated, conditional or
    hedged."""
    why = unasserted(prepared(answer), spans)
    if why is not None:
        raise _Fail(f"answer check ({mode}) failed: the answer does not assert {str(value)[:80]!r}: it is {why}")


def _excused(ctx: _Context, core: str, number: Any) -> bool:
    """Whether a number an answer states besides the checked value is one it may state: an integer the answer key
    also states (an id the right answer names), or the text of a declared text key that happens to be all digits
    (an ISBN, a postcode: text, not a second number, :mod:`world_format.text_keys`). Numbers the agent passed to
    tools excuse nothing."""
    if number != number.to_integral_value():
        return False
    if ctx.answer_key is not None and any(number == n for n in answer_numbers(ctx.answer_key)):
        return True
    return is_text_key(ctx.episode.runtime, core)


def _check_number(ctx: _Context, check: AnswerCheck, answer: str, value: Any) -> None:
    """The answer asserts ``value`` and states no other number but those :func:`_excused`."""
    expected = to_decimal(value)
    if expected is None:
        raise VCodeError(f"number check value {value!r} is not a number")
    stated = number_tokens(prepared(answer))
    right = [span for span, _, n in stated if numbers_equal(n, expected, check.decimals, check.rounding)]
    if not right:
        raise _Fail(f"answer check (number) failed: {value} is not stated")
    _fail_unless_asserted(answer, right, check.mode, value)
    others = [n for span, core, n in stated if span not in right and not _excused(ctx, core, n)]
    if others:
        raise _Fail(f"answer check (number) failed: the answer also states {others[0]}")


def _json_field_equals(answer: str, pointer: str, value: Any) -> bool:
    try:
        return values_equal(json_pointer(json.loads(answer), pointer), value)
    except (ValueError, KeyError):
        return False


def _check_called(ctx: _Context, check: ToolCalledCheck) -> None:
    for event in ctx.trace:
        usable = check.allow_error or not event.error
        if event.tool == check.tool and usable and \
                _arguments_match(ctx, check.arguments, event.arguments, check.list_match):
            return
    raise _Fail(f"{check.tool} was not called with {_shown(check.arguments)}")


def _check_not_called(ctx: _Context, check: ToolNotCalledCheck) -> None:
    for event in ctx.trace:
        if event.tool == check.tool and _arguments_match(ctx, check.arguments, event.arguments, check.list_match):
            raise _Fail(f"{check.tool} was called but must not be")


def _check_order(ctx: _Context, check: OrderCheck) -> None:
    wanted = list(check.tools)
    for event in ctx.trace:
        if wanted and not event.error and event.tool == wanted[0]:
            wanted.pop(0)
    if wanted:
        raise _Fail(f"calls out of order: {wanted[0]} missing after its predecessors")


def _resolved_key(ctx: _Context, key: Any) -> Any:
    if isinstance(key, dict):
        return {name: ctx.resolve(value) for name, value in key.items()}
    return ctx.resolve(key)


def _check_unchanged(ctx: _Context, check: UnchangedExceptCheck) -> None:
    allowed = {(row.table, canonical_json(normalize_key(_resolved_key(ctx, row.key)))) for row in check.rows}
    inserted: dict[str, int] = {}
    for change in ctx.episode.changes():
        if (change.table, canonical_json(normalize_key(change.key))) in allowed:
            continue
        if change.before is None and change.table in check.inserts:
            inserted[change.table] = inserted.get(change.table, 0) + 1
            if inserted[change.table] <= check.inserts[change.table]:
                continue
        raise _Fail(f"unexpected change in {change.table} row {change.key}")


def _json_same(found: Any, expected: Any) -> bool:
    """JSON values equal by JSON type too (true is not 1); numbers compare as ``values_equal`` does."""
    if isinstance(found, bool) or isinstance(expected, bool):
        return type(found) is type(expected) and found == expected
    if isinstance(found, dict) and isinstance(expected, dict):
        return found.keys() == expected.keys() and all(_json_same(found[k], expected[k]) for k in found)
    if isinstance(found, list) and isinstance(expected, list):
        return len(found) == len(expected) and all(_json_same(f, e) for f, e in zip(found, expected, strict=True))
    if isinstance(found, dict | list) or isinstance(expected, dict | list):
        return False
    return values_equal(found, expected)


def _shown(value: Any) -> Any:
    """``value`` with every object's keys sorted, so a reason reads the same after a kit's canonical JSON."""
    if isinstance(value, dict):
        return {key: _shown(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return value


def _check_after_turn(ctx: _Context, check: AfterTurnCheck) -> None:
    turns = ctx.episode.turns
    if check.turn >= len(turns):
        if any(e.tool == check.tool and not e.error for e in ctx.trace):
            raise _Fail(f"{check.tool} was called but the customer's turn {check.turn} never came")
        return
    for position, event in enumerate(ctx.trace):
        if event.tool == check.tool and not event.error and position < turns[check.turn]:
            raise _Fail(f"{check.tool} was called before the customer's turn {check.turn} (e.g. the confirmation)")


def _check_json_value(ctx: _Context, check: JsonValueCheck) -> None:
    table = ctx.episode.runtime.tables.get(check.table)
    if table is None:
        raise VCodeError(f"json_value check: {check.table!r} is not a declared table")
    key = _resolved_key(ctx, check.key)
    values = key_parameters(table, key)
    where = " AND ".join(f"{quote_identifier(c)} = :k{i}" for i, c in enumerate(table.key_columns))
    rows = ctx.episode.query(f"SELECT {quote_identifier(check.column)} FROM {quote_identifier(check.table)} "
                             f"WHERE {where}", {f"k{i}": value for i, value in enumerate(values)})
    if not rows or not isinstance(rows[0][0], str):
        raise _Fail(f"json_value check: no JSON in {check.table}.{check.column} of row {_shown(key)}")
    try:
        found = json_pointer(json.loads(rows[0][0]), check.pointer)
    except (ValueError, KeyError):
        raise _Fail(f"json_value check: {check.pointer} is not in {check.table}.{check.column} of row {_shown(key)}"
                    ) from None
    expected = _resolve_deep(ctx, check.value)
    if not _json_same(found, expected):
        raise _Fail(f"json_value check: expected {_shown(expected)!r}, got {_shown(found)!r}")


_CHECKS: dict[str, Any] = {
    "sql": _check_sql,
    "answer": _check_answer,
    "tool_called": _check_called,
    "tool_not_called": _check_not_called,
    "order": _check_order,
    "unchanged_except": _check_unchanged,
    "after_turn": _check_after_turn,
    "json_value": _check_json_value,
}


def evaluate(vcode: VCode, episode: Episode, answer: str | None, answer_key: str | None = None, *,
             credit: bool = False) -> Verdict:
    """Evaluate ``vcode`` against an episode (its trace and current state) and a final answer.

    Captures, then checks, in order; the first that does not pass decides the verdict (``fail``, or ``error`` when
    it cannot run) and, by default, ends the evaluation. With ``credit`` every capture and check is evaluated on its
    own and :attr:`Verdict.credit` is the share that passed (a check that reads a capture which failed counts as
    not passing); the outcome, reason and ``checks`` are the same either way. Checks only read the episode.
    """
    ctx = _Context(episode, answer, answer_key)
    steps: list[tuple[str | None, Any, Any]] = [(None, _capture, capture) for capture in vcode.captures]
    steps += [(check.kind, _CHECKS[check.kind], check) for check in vcode.checks]
    first: tuple[Outcome, str] | None = None
    passed: list[str] = []
    count = 0
    for kind, run, item in steps:
        try:
            run(ctx, item)
        except _Fail as failure:
            first = first or ("fail", str(failure))
        except (VCodeError, KeyError, TypeError, ValueError) as exc:
            first = first or ("error", f"verifier error: {exc}")
        else:
            count += 1
            if first is None and kind is not None:
                passed.append(kind)
            continue
        if not credit:
            break
    share = round(count / len(steps), 4) if credit else None
    outcome, reason = first or ("pass", "")
    return Verdict(outcome, reason, tuple(passed), share)
