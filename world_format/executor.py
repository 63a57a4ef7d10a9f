"""Executing a world's declarative tools against a guarded connection.

A call validates its arguments with jsonschema, checks that every value can be bound,
runs the preconditions, then the statements, inside a savepoint that is rolled back when
anything fails. Every failure becomes an error observation ``{"error": "..."}`` for the
model; nothing a model sends can crash the episode.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from world_format.canonical import canonical_json
from world_format.errors import ToolCallError

from .arithmetic import calculate
from .ecma_pattern import ParameterValidator
from .jsontext import lone_surrogate
from .models import Tool
from .parameters import defaults
from .sqlguard import Guard, named_parameters
from .state import normalize_value

MAX_STRING_ARGUMENT = 10_000
MAX_STRUCTURED_ARGUMENT = 100_000
"""Most characters an array or object argument may take as canonical JSON."""


@dataclass(frozen=True)
class CompiledTool:
    """A tool with its validator and the named parameters of each statement."""

    tool: Tool
    validator: jsonschema.protocols.Validator
    precondition_params: tuple[tuple[str, ...], ...]
    statement_params: tuple[tuple[str, ...], ...]
    defaults: dict[str, Any]
    """Declared defaults, bound when an argument is omitted."""
    json_fields: frozenset[str] = frozenset()
    """Result fields rendered as nested JSON (the tool's json_fields and the world's JSON columns, by name)."""
    problems: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    """What :func:`check_arguments` found wrong with arguments seen before (None: nothing), by their exact JSON
    text (:func:`_exact_key`): a build's gate sends the same arguments many times. At most ``MAX_REMEMBERED``."""


def compile_tool(tool: Tool, json_columns: frozenset[str] = frozenset()) -> CompiledTool:
    """Prepare a tool for execution (schema validator, parameter lists); ``json_columns`` names the world's JSON
    columns, whose values observations show as nested JSON."""
    return CompiledTool(
        tool=tool,
        validator=ParameterValidator(tool.parameters),
        precondition_params=tuple(tuple(named_parameters(p.sql)) for p in tool.preconditions),
        statement_params=tuple(tuple(named_parameters(sql)) for sql in tool.statements),
        defaults=defaults(tool.parameters),
        json_fields=frozenset(tool.result.json_fields) | json_columns,
    )


MAX_REMEMBERED = 4096
"""Most argument sets a compiled tool remembers the check of (then it forgets them all and starts again)."""


def check_arguments(compiled: CompiledTool, arguments: Any) -> dict[str, Any]:
    """Validate model-supplied arguments; return them with declared defaults filled in for omitted ones.

    Raises ToolCallError with a short reason. The check is a function of the arguments alone, so its outcome is
    remembered for arguments of plain JSON types (:attr:`CompiledTool.problems`)."""
    if not isinstance(arguments, dict):
        raise ToolCallError(f"arguments for {compiled.tool.name} must be a JSON object")
    key = _exact_key(arguments)
    if key is not None and key in compiled.problems:
        problem = compiled.problems[key]
    else:
        problem = _argument_problem(compiled, arguments)
        if key is not None:
            if len(compiled.problems) >= MAX_REMEMBERED:
                compiled.problems.clear()
            compiled.problems[key] = problem
    if problem is not None:
        raise ToolCallError(problem)
    return {**compiled.defaults, **arguments}


def _argument_problem(compiled: CompiledTool, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` cannot be sent to the tool (the ToolCallError's message), else None."""
    broken = lone_surrogate(arguments)
    if broken is not None:
        return (f"invalid arguments for {compiled.tool.name} at {broken.lstrip('/')}: a lone UTF-16 surrogate is no "
                "character")
    error = jsonschema.exceptions.best_match(compiled.validator.iter_errors(arguments))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path)
        return f"invalid arguments for {compiled.tool.name}{' at ' + where if where else ''}: {error.message[:200]}"
    for name, value in arguments.items():
        problem = _unbindable(value)
        if problem:
            return f"invalid arguments for {compiled.tool.name}: {name} {problem}"
    return None


_PLAIN = (str, int, float, bool, type(None))


def _exact_key(arguments: dict[str, Any]) -> str | None:
    """The JSON text of ``arguments`` when every value in it is of a plain JSON type exactly (dict with text keys,
    list, str, int, float, bool, None; no subclass, no tuple), so that equal texts are equal arguments, key order and
    1 against 1.0 included; else None (not remembered)."""
    try:
        return json.dumps(arguments) if _plain(arguments) else None
    except RecursionError:  # nested too deep to walk: checked every time, as jsonschema can
        return None


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _plain(item) for key, item in value.items())
    if kind is list:
        return all(_plain(item) for item in value)
    return kind in _PLAIN


def _unbindable(value: Any) -> str | None:
    """Why a validated argument cannot be bound (out of range, not finite, too long), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return "is out of range"
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if isinstance(value, str) and len(value) > MAX_STRING_ARGUMENT:
        return "is too long"
    if isinstance(value, dict | list):
        if len(canonical_json(value)) > MAX_STRUCTURED_ARGUMENT:
            return "is too long"
        inner = value.values() if isinstance(value, dict) else value
        return next((problem for item in inner if (problem := _unbindable(item))), None)
    return None


def bind_value(value: Any) -> Any:
    """A value as SQL receives it: scalars normalised, arrays and objects as canonical JSON text."""
    if isinstance(value, dict | list):
        return canonical_json(value)
    return normalize_value(value)


def _bind(names: tuple[str, ...], arguments: dict[str, Any]) -> dict[str, Any]:
    return {name: bind_value(arguments.get(name)) for name in names}


def _row_dict(cursor: sqlite3.Cursor, row: tuple[Any, ...], json_fields: frozenset[str]) -> dict[str, Any]:
    return {column[0]: _json_or_value(value) if column[0] in json_fields else normalize_value(value)
            for column, value in zip(cursor.description, row, strict=True)}


def _json_or_value(value: Any) -> Any:
    """JSON text as the nested value it holds (never an escaped string in an observation)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return normalize_value(value)


def execute_tool(guard: Guard, compiled: CompiledTool, arguments: Any) -> Any:
    """Run one call; return its observation (JSON-able) or raise ToolCallError.

    A pure tool (effect none) runs no SQL: its validated call is recorded in the trace and answered
    ``{"status": "recorded"}`` (plus the tool's ``message``), or by its built-in (``calculate``:
    ``{"result": "1142.51"}``, :mod:`world_format.arithmetic`).
    """
    arguments = check_arguments(compiled, arguments)
    tool = compiled.tool
    if tool.builtin == "calculate":
        try:
            return {"result": calculate(str(arguments.get("expression", "")))}
        except ValueError as exc:
            raise ToolCallError(f"cannot calculate: {exc}") from None
    if tool.effect == "none":
        recorded: dict[str, Any] = {"status": "recorded"}
        return {**recorded, "message": tool.result.message} if tool.result.message else recorded
    with guard.host() as conn:
        conn.execute("SAVEPOINT bk_call")
    try:
        with guard.world("write" if tool.effect == "write" else "read") as conn:
            for precondition, names in zip(tool.preconditions, compiled.precondition_params, strict=True):
                row = conn.execute(precondition.sql, _bind(names, arguments)).fetchone()
                if row is None or not row[0]:
                    raise ToolCallError(precondition.error)
            observation = _run_statements(conn, compiled, arguments)
    except ToolCallError:
        _rollback_call(guard)
        raise
    except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError) as exc:
        _rollback_call(guard)
        raise ToolCallError(_sqlite_message(exc)) from None
    with guard.host() as conn:
        conn.execute("RELEASE bk_call")
    return observation


def _run_statements(conn: sqlite3.Connection, compiled: CompiledTool, arguments: dict[str, Any]) -> Any:
    tool = compiled.tool
    affected = 0
    cursor: sqlite3.Cursor | None = None
    for sql, names in zip(tool.statements, compiled.statement_params, strict=True):
        cursor = conn.execute(sql, _bind(names, arguments))
        if cursor.description is None:
            affected += max(cursor.rowcount, 0)
    assert cursor is not None
    shape = tool.result.shape
    if shape == "affected":
        return {"affected": affected}
    if cursor.description is None:
        raise ToolCallError(f"tool {tool.name} is misdeclared: its last statement returns no rows")
    if shape == "row":
        row = cursor.fetchone()
        if row is None:
            raise ToolCallError(tool.result.not_found)
        return _row_dict(cursor, row, compiled.json_fields)
    rows = cursor.fetchmany(tool.result.max_rows)
    return [_row_dict(cursor, row, compiled.json_fields) for row in rows]


def _rollback_call(guard: Guard) -> None:
    with guard.host() as conn:
        conn.execute("ROLLBACK TO bk_call")
        conn.execute("RELEASE bk_call")


def _sqlite_message(exc: BaseException) -> str:
    text = str(exc)
    if "interrupted" in text:
        return "the request took too long and was stopped"
    if "not authorized" in text:
        return "the request tried an operation this tool may not perform"
    if isinstance(exc, sqlite3.IntegrityError):
        return f"the change was refused: {text[:200]}"
    return f"the request failed: {text[:200]}"
