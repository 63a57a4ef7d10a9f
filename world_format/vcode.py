"""The VCode interpreter: declarative verifier programs evaluated by blobkit's own code.

A verdict has three outcomes. ``pass`` needs every check to pass; the first failing check
makes it ``fail``; a check that cannot be evaluated (a query that does not run, a
malformed pointer) makes it ``error`` — and an error is never a pass.
"""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

from world_format.errors import BlobkitError, VCodeError

from .models import (
    AnswerCheck,
    Capture,
    OrderCheck,
    Ref,
    SqlCheck,
    ToolCalledCheck,
    ToolNotCalledCheck,
    UnchangedExceptCheck,
    VCode,
)
from .runtime import Episode, ToolEvent
from .state import normalize_value

Outcome = Literal["pass", "fail", "error"]
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


@dataclass(frozen=True)
class Verdict:
    """The outcome of a verifier on one episode, with the reason of the first non-pass."""

    outcome: Outcome
    reason: str = ""
    checks: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """True only for a pass (an error is never a pass)."""
        return self.outcome == "pass"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"outcome": self.outcome, "reason": self.reason, "checks": list(self.checks)}


class _Fail(Exception):
    """A check failed (internal control flow)."""


def normalize_text(text: str) -> str:
    """Case-folded, NFKC, punctuation replaced by spaces (keeping . @ - inside tokens), spaces collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s.@-]", " ", text)
    text = re.sub(r"(?<!\w)[.\-]|[.\-](?!\w)", " ", text)
    return " ".join(text.split())


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


def values_equal(left: Any, right: Any) -> bool:
    """Equality with typed normalization (25 == 25.0; bools are ints; strings exact)."""
    left, right = normalize_value(left), normalize_value(right)
    if isinstance(left, int | float) and isinstance(right, int | float):
        return abs(float(left) - float(right)) <= 1e-9 * max(1.0, abs(float(left)))
    return bool(type(left) is type(right) and left == right)


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


def _arguments_match(ctx: _Context, wanted: dict[str, Any], arguments: Any) -> bool:
    if not isinstance(arguments, dict):
        return False
    return all(name in arguments and values_equal(arguments[name], ctx.resolve(value))
               for name, value in wanted.items())


def _check_sql(ctx: _Context, check: SqlCheck) -> None:
    params = {name: ctx.resolve(value) for name, value in check.params.items()}
    try:
        rows = ctx.episode.query(check.query, params)
    except (sqlite3.Error, sqlite3.Warning, OverflowError, BlobkitError) as exc:
        raise VCodeError(f"sql check could not run: {exc}") from None
    expected = [[ctx.resolve(value) for value in row] for row in check.expect]
    same = len(rows) == len(expected) and all(
        len(got) == len(want) and all(values_equal(g, w) for g, w in zip(got, want, strict=True))
        for got, want in zip(rows, expected, strict=True)
    )
    if not same:
        raise _Fail(f"sql check: expected {expected[:3]}, got {[list(r) for r in rows[:3]]}")


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
        ok = bool(normalize_text(text)) and f" {normalize_text(text)} " in f" {normalize_text(answer)} "
    elif check.mode == "regex":
        try:
            ok = re.search(text, answer) is not None
        except re.error as exc:
            raise VCodeError(f"answer regex does not compile: {exc}") from None
    elif check.mode == "number":
        numbers = _NUMBER.findall(answer)
        try:
            ok = bool(numbers) and values_equal(float(numbers[-1].replace(",", "")), float(text))
        except ValueError:
            raise VCodeError(f"number check value {text!r} is not a number") from None
    else:
        ok = _json_field_equals(answer, check.pointer or "", value)
    if not ok:
        raise _Fail(f"answer check ({check.mode}) failed against {text[:80]!r}")


def _json_field_equals(answer: str, pointer: str, value: Any) -> bool:
    try:
        return values_equal(json_pointer(json.loads(answer), pointer), value)
    except (ValueError, KeyError):
        return False


def _check_called(ctx: _Context, check: ToolCalledCheck) -> None:
    for event in ctx.trace:
        usable = check.allow_error or not event.error
        if event.tool == check.tool and usable and _arguments_match(ctx, check.arguments, event.arguments):
            return
    raise _Fail(f"{check.tool} was not called with {dict(check.arguments)}")


def _check_not_called(ctx: _Context, check: ToolNotCalledCheck) -> None:
    for event in ctx.trace:
        if event.tool == check.tool and _arguments_match(ctx, check.arguments, event.arguments):
            raise _Fail(f"{check.tool} was called but must not be")


def _check_order(ctx: _Context, check: OrderCheck) -> None:
    wanted = list(check.tools)
    for event in ctx.trace:
        if wanted and not event.error and event.tool == wanted[0]:
            wanted.pop(0)
    if wanted:
        raise _Fail(f"calls out of order: {wanted[0]} missing after its predecessors")


def _check_unchanged(ctx: _Context, check: UnchangedExceptCheck) -> None:
    allowed = {(row.table, json.dumps(normalize_value(ctx.resolve(row.key)))) for row in check.rows}
    inserted: dict[str, int] = {}
    for change in ctx.episode.changes():
        if (change.table, json.dumps(change.key)) in allowed:
            continue
        if change.before is None and change.table in check.inserts:
            inserted[change.table] = inserted.get(change.table, 0) + 1
            if inserted[change.table] <= check.inserts[change.table]:
                continue
        raise _Fail(f"unexpected change in {change.table} row {change.key}")


_CHECKS: dict[str, Any] = {
    "sql": _check_sql,
    "answer": _check_answer,
    "tool_called": _check_called,
    "tool_not_called": _check_not_called,
    "order": _check_order,
    "unchanged_except": _check_unchanged,
}


def evaluate(vcode: VCode, episode: Episode, answer: str | None, answer_key: str | None = None) -> Verdict:
    """Evaluate ``vcode`` against an episode (its trace and current state) and a final answer."""
    ctx = _Context(episode, answer, answer_key)
    passed: list[str] = []
    try:
        for capture in vcode.captures:
            _capture(ctx, capture)
        for check in vcode.checks:
            _CHECKS[check.kind](ctx, check)
            passed.append(check.kind)
    except _Fail as failure:
        return Verdict("fail", str(failure), tuple(passed))
    except (VCodeError, KeyError, TypeError, ValueError) as exc:
        return Verdict("error", f"verifier error: {exc}", tuple(passed))
    return Verdict("pass", "", tuple(passed))

