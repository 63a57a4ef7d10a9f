"""Semantic validation of a loaded world.

Structure is checked by the models; here we check meaning against the seed: names are
unique and resolve, tool SQL prepares under the tool's own permissions, named SQL
parameters match the JSON-Schema properties, reference chains use declared tools with
arguments that validate, and verifiers only use what exists.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import jsonschema

from world_format.errors import WorldFormatError

from .chain import threaded
from .declaration import check_column_ref, check_declaration
from .ecma_pattern import ParameterValidator
from .executor import compile_tool
from .family import fill, first_family_row, slots
from .keys import check_key
from .loaded import LoadedWorld
from .models import (
    AfterTurnCheck,
    AnswerCheck,
    ArgRef,
    JsonValueCheck,
    Ref,
    SqlCheck,
    Task,
    Tool,
    ToolCalledCheck,
    ToolNotCalledCheck,
    UnchangedExceptCheck,
    VCode,
    World,
)
from .parameters import check_parameter_schema
from .runtime import WorldRuntime
from .sqlguard import Mode, named_parameters

TOP_LEVEL_KEYWORDS = {"type", "properties", "required", "additionalProperties", "description", "title"}


def validate_world(loaded: LoadedWorld, runtime: WorldRuntime | None = None) -> None:
    """Raise WorldFormatError (naming the JSON pointer) for the first semantic problem.

    ``runtime`` lets a caller that needs one anyway (the builder) validate on it instead of
    on a fresh copy of the seed; every trial statement is rolled back either way.
    """
    world, source = loaded.world, str(loaded.path)
    check_declaration(world, source)
    own = runtime is None
    runtime = loaded.runtime() if runtime is None else runtime
    try:
        for index, tool in enumerate(world.tools):
            _check_tool(runtime, tool, f"{source}: /tools/{index}")
        for index, task in enumerate(world.tasks):
            _check_task(runtime, task, f"{source}: /tasks/{index}")
    finally:
        if own:
            runtime.close()


# --------------------------------------------------------------------------- tools


def _check_parameters(tool: Tool, where: str) -> set[str]:
    """The tool's parameter names, once its schema is one blobkit honours (see :mod:`world_format.parameters`)."""
    schema = tool.parameters
    if schema.get("type") != "object" or not isinstance(schema.get("properties", {}), dict):
        raise WorldFormatError(f"{where}/parameters: must be an object schema with properties")
    if schema.get("additionalProperties") is not False:
        raise WorldFormatError(f"{where}/parameters: must set additionalProperties to false")
    unsupported = sorted(set(schema) - TOP_LEVEL_KEYWORDS)
    if unsupported:
        raise WorldFormatError(f"{where}/parameters: keyword {unsupported[0]!r} is not supported for tool "
                               f"{tool.name!r} (supported: {', '.join(sorted(TOP_LEVEL_KEYWORDS))})")
    properties: dict[str, Any] = schema.get("properties", {})
    for name, prop in properties.items():
        check_parameter_schema(tool.name, name, prop, f"{where}/parameters/properties/{name}")
    try:
        ParameterValidator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise WorldFormatError(f"{where}/parameters: not a valid JSON Schema for tool {tool.name!r}: "
                               f"{exc.message}") from None
    return set(properties)


def _prepare(runtime: WorldRuntime, sql: str, mode: Mode, where: str) -> tuple[list[str], bool]:
    """Run ``sql`` once with NULL parameters inside a rolled-back savepoint; return (params, returns_rows)."""
    try:
        names = named_parameters(sql)
    except ValueError as exc:
        raise WorldFormatError(f"{where}: {exc}") from None
    guard = runtime.guard
    with guard.host() as conn:
        conn.execute("SAVEPOINT bk_validate")
    try:
        with guard.world(mode) as conn:
            try:
                cursor = conn.execute(sql, {name: None for name in names})
                returns_rows = cursor.description is not None
            except sqlite3.IntegrityError:  # prepared fine; NULL trial values broke a constraint
                upper = sql.upper()
                returns_rows = upper.lstrip().startswith(("SELECT", "WITH")) or "RETURNING" in upper
    except (sqlite3.Error, sqlite3.Warning) as exc:
        message = str(exc)
        if "not authorized" in message:
            message = "uses an operation world SQL may not perform (ATTACH, PRAGMA, transactions, schema changes"
            message += ", or a write in a read tool)" if mode == "read" else ")"
        raise WorldFormatError(f"{where}: SQL does not prepare: {message}") from None
    finally:
        with guard.host() as conn:
            conn.execute("ROLLBACK TO bk_validate")
            conn.execute("RELEASE bk_validate")
    return names, returns_rows


def _check_tool(runtime: WorldRuntime, tool: Tool, where: str) -> None:
    properties = _check_parameters(tool, where)
    if tool.confirm and tool.effect != "write":
        raise WorldFormatError(f"{where}/confirm: only a write tool asks the customer to confirm it")
    if tool.builtin == "calculate" and (tool.parameters.get("required") != ["expression"]
                                        or (tool.parameters.get("properties", {}).get("expression") or {}).get("type")
                                        != "string"):
        raise WorldFormatError(f"{where}/parameters: the calculate builtin takes exactly one required string "
                               "parameter, expression")
    if tool.effect == "none":  # a pure tool runs no SQL: its arguments are only validated and recorded (its
        # anchors say which rows they name, for the split and the procedure checks)
        compile_tool(tool)
        return
    _check_sql(runtime, tool, properties, where)


def _check_sql(runtime: WorldRuntime, tool: Tool, properties: set[str], where: str) -> None:
    mode: Mode = "write" if tool.effect == "write" else "read"
    used: set[str] = set()
    for index, precondition in enumerate(tool.preconditions):
        names, returns_rows = _prepare(runtime, precondition.sql, "read", f"{where}/preconditions/{index}/sql")
        if not returns_rows:
            raise WorldFormatError(f"{where}/preconditions/{index}/sql: a precondition must be a SELECT")
        used.update(names)
    returns_rows = False
    for index, sql in enumerate(tool.statements):
        names, returns_rows = _prepare(runtime, sql, mode, f"{where}/statements/{index}")
        used.update(names)
    unknown = sorted(used - properties)
    if unknown:
        raise WorldFormatError(f"{where}: SQL parameter :{unknown[0]} is not a property of /parameters")
    unused = sorted(properties - used)
    if unused:
        raise WorldFormatError(f"{where}/parameters/properties/{unused[0]}: declared but never used by the SQL")
    if tool.result.shape != "affected" and not returns_rows:
        raise WorldFormatError(f"{where}/result/shape: {tool.result.shape!r} needs a last statement that returns rows")
    for name, ref in tool.anchors.items():
        if name not in properties:
            raise WorldFormatError(f"{where}/anchors/{name}: not a parameter of the tool")
        check_column_ref(runtime.world, ref, f"{where}/anchors/{name}")
    compile_tool(tool)


# --------------------------------------------------------------------------- tasks


def _check_family(runtime: WorldRuntime, task: Task, where: str) -> None:
    """A family's query is a parameterless SELECT with rows, and its first row fills in a valid task."""
    assert task.family is not None
    try:
        names = named_parameters(task.family.query)
    except ValueError as exc:
        raise WorldFormatError(f"{where}/family/query: {exc}") from None
    if names:
        raise WorldFormatError(f"{where}/family/query: must be a SELECT without parameters")
    if not slots(task):
        raise WorldFormatError(f"{where}: a family task must use at least one {{{{column}}}} slot")
    # One run, read-only under the world's authorizer, which refuses a write or any other operation there.
    row = first_family_row(runtime, task, where)
    if row is None:
        raise WorldFormatError(f"{where}/family/query: returns no rows, so the family has no cases")
    _check_task(runtime, fill(task, row, where), where)


def _check_task(runtime: WorldRuntime, task: Task, where: str) -> None:
    if task.family is not None:
        _check_family(runtime, task, where)
        return
    world = runtime.world
    table = world.state.table(task.anchor.table)
    if table is None or world.state.anchor(task.anchor.table) is None:
        raise WorldFormatError(f"{where}/anchor/table: {task.anchor.table!r} is not an anchor table")
    check_key(table, task.anchor.key, f"{where}/anchor/key")
    previous = 0
    for index, turn in enumerate(task.turns):
        if not previous <= turn.after_step <= len(task.reference):
            raise WorldFormatError(f"{where}/turns/{index}/after_step: turns come in order, after 0 to "
                                   f"{len(task.reference)} reference steps")
        previous = turn.after_step
    for index, row in enumerate(task.distractors):
        declared = world.state.table(row.table)
        if declared is None:
            raise WorldFormatError(f"{where}/distractors/{index}/table: {row.table!r} is not a declared table")
        check_key(declared, row.key, f"{where}/distractors/{index}/key")
    for index, step in enumerate(task.reference):
        step_where = f"{where}/reference/{index}"
        tool = world.tool(step.tool)
        if tool is None:
            raise WorldFormatError(f"{step_where}/tool: unknown tool {step.tool!r}")
        literal = {name: value for name, value in step.arguments.items() if not threaded(value)}
        for name, value in step.arguments.items():
            if any(ref.from_step >= index for ref in _arg_refs(value)):
                raise WorldFormatError(f"{step_where}/arguments/{name}: $from must name an earlier step")
        threaded_names = set(step.arguments) - set(literal)
        for error in runtime.tools[step.tool].validator.iter_errors(literal):
            if error.validator == "required" and all(name in threaded_names for name in _missing(error)):
                continue
            raise WorldFormatError(f"{step_where}/arguments: {error.message}")
    _check_vcode(runtime, task, f"{where}/vcode")


def _arg_refs(value: Any) -> list[ArgRef]:
    if isinstance(value, ArgRef):
        return [value]
    if isinstance(value, list):
        return [ref for item in value for ref in _arg_refs(item)]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in _arg_refs(item)]
    return []


def _missing(error: jsonschema.ValidationError) -> list[str]:
    required = error.validator_value if isinstance(error.validator_value, list) else []
    instance = error.instance if isinstance(error.instance, dict) else {}
    return [name for name in required if name not in instance]


def _refs(value: Any) -> list[Ref]:
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in _refs(item)]
    if isinstance(value, list | tuple):
        return [ref for item in value for ref in _refs(item)]
    return []


def _check_vcode(runtime: WorldRuntime, task: Task, where: str) -> None:
    vcode: VCode = task.vcode
    world = runtime.world
    captures = {capture.name for capture in vcode.captures}
    for index, capture in enumerate(vcode.captures):
        if world.tool(capture.tool) is None:
            raise WorldFormatError(f"{where}/captures/{index}/tool: unknown tool {capture.tool!r}")
    for index, check in enumerate(vcode.checks):
        check_where = f"{where}/checks/{index}"
        for ref in _refs(_check_values(check)):
            if ref.ref == "answer_key" and task.answer is None:
                raise WorldFormatError(f"{check_where}: refers to answer_key but the task has no answer")
            if ref.ref.startswith("capture.") and ref.ref.split(".", 1)[1] not in captures:
                raise WorldFormatError(f"{check_where}: refers to undeclared {ref.ref}")
        if isinstance(check, ToolCalledCheck | ToolNotCalledCheck) and world.tool(check.tool) is None:
            raise WorldFormatError(f"{check_where}/tool: unknown tool {check.tool!r}")
        if check.kind == "order":
            for name in check.tools:
                if world.tool(name) is None:
                    raise WorldFormatError(f"{check_where}/tools: unknown tool {name!r}")
        if isinstance(check, UnchangedExceptCheck):
            for r_index, row in enumerate(check.rows):
                declared = world.state.table(row.table)
                if declared is None:
                    raise WorldFormatError(f"{check_where}/rows/{r_index}/table: {row.table!r} is not a declared table")
                if not isinstance(row.key, Ref):
                    check_key(declared, row.key, f"{check_where}/rows/{r_index}/key")
        if isinstance(check, SqlCheck):
            names, returns_rows = _prepare(runtime, check.query, "read", f"{check_where}/query")
            if not returns_rows or set(names) != set(check.params):
                raise WorldFormatError(f"{check_where}: query must be a SELECT whose parameters are exactly /params")
        _check_targets(world, task, check, check_where)


def _check_targets(world: World, task: Task, check: Any, where: str) -> None:
    """What an answer, after_turn or json_value check names exists: the field, the tool, the turn, the column."""
    if isinstance(check, AnswerCheck) and check.field is not None:
        check_column_ref(world, check.field, f"{where}/field")
    if isinstance(check, AfterTurnCheck):
        if world.tool(check.tool) is None:
            raise WorldFormatError(f"{where}/tool: unknown tool {check.tool!r}")
        if check.turn >= len(task.turns):
            raise WorldFormatError(f"{where}/turn: the task has {len(task.turns)} scripted user turn(s)")
    if isinstance(check, JsonValueCheck):
        table = world.state.table(check.table)
        column = next((c for c in table.columns if c.name == check.column), None) if table else None
        if table is None or column is None or not column.json_data:
            raise WorldFormatError(f"{where}: {check.table}.{check.column} is not a column declared json_data")
        if not isinstance(check.key, Ref):
            check_key(table, check.key, f"{where}/key")


def _check_values(check: Any) -> list[Any]:
    values: list[Any] = []
    for name in ("params", "arguments", "value", "expect", "rows"):
        value = getattr(check, name, None)
        if isinstance(value, dict):
            values.extend(value.values())
        elif isinstance(value, list | tuple):
            for item in value:
                values.extend(item if isinstance(item, list) else [getattr(item, "key", item)])
        elif value is not None:
            values.append(value)
    return values
