"""Deterministic task minting: a spec (:mod:`blobkit.builder.mint_specs`) instantiated on an anchor row.

A spec is instantiated by *executing* its reference chain in an isolated episode, so answer keys
and verifier expectations come from real observations, and arguments are threaded from earlier
reads (``$from``), never parsed from wording. An anchor row's key is a value, or an object of its
key columns for a composite key; every call that names the row passes one argument per key column.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from blobkit.wording import counted, sentence
from world_format.canonical import canonical_json
from world_format.chain import run_chain
from world_format.keys import key_expression, key_from_sql, normalize_key
from world_format.models import ArgRef, Column, Step, Table, Task, UserTurn, VCode, World
from world_format.runtime import RowChange, WorldRuntime
from world_format.state import quote_identifier
from world_format.values import rounded, to_decimal

from .entities import Entities
from .mint_specs import WORDINGS, TaskSpec, _extras, key_table
from .sides import Side, Sides


@dataclass(frozen=True)
class Instance:
    """A spec instantiated on one anchor row: a concrete task."""

    spec_id: str
    key: Any
    task: Task
    side: Side
    """train or eval: decided from the anchor row's entity when the case is made (:class:`.sides.Sides`)."""
    entity: str = ""
    """The connected entity the case concerns (:mod:`blobkit.builder.entities`): its anchor row's root row."""
    anchors_touched: tuple[tuple[str, Any], ...] = field(default=())
    probes: dict[str, str] = field(default_factory=dict)
    """The gate's verdict on each probe for this case (filled in when the case is gated)."""
    distractor: Task | None = None
    """The other case the gate's wrong-row probe ran on this one (filled in when the case is gated)."""


# --------------------------------------------------------------------------- instantiating


def _from_first(column: str) -> ArgRef:
    """An argument threaded from the first step's observation."""
    return ArgRef.model_validate({"$from": 0, "pointer": f"/{column}"})


def key_arguments(spec: TaskSpec, role: str, table: Table, key: Any) -> dict[str, Any]:
    """The arguments naming anchor row ``key`` in the call of the tool playing ``role``."""
    params = spec.params(role)
    if not table.composite:
        return {params[0]: key}
    return {param: key[column] for param, column in zip(params, table.key_columns, strict=True)}


def threaded_key_arguments(spec: TaskSpec, role: str, table: Table) -> dict[str, Any]:
    """The key arguments of ``role``'s call threaded from the first step's observation (the looked-up row)."""
    return {param: _from_first(column) for param, column in zip(spec.params(role), table.key_columns, strict=True)}


def key_text(table: Table, key: Any) -> str:
    """How wording names an anchor row: its key, or each key column and value of a composite key."""
    if not table.composite:
        return str(key)
    return ", ".join(f"{_words(column)} {key[column]}" for column in table.key_columns)


def row_key(table: Table, row: dict[str, Any]) -> Any:
    """The key of an observed row (None when it lacks a key column)."""
    if any(column not in row for column in table.key_columns):
        return None
    return normalize_key({c: row[c] for c in table.key_columns}) if table.composite else row[table.key_columns[0]]


def _words(name: str) -> str:
    return name.replace("_", " ")


def _check(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, **fields}


def _answer_check(value: Any, *, field: str | None = None, others: tuple[str, ...] = (),
                  column: Column | None = None) -> dict[str, Any]:
    """A committal answer check: a number (at the column's declared precision) or a phrase that must be stated
    without any other value of its ``field`` and none of ``others``."""
    if isinstance(value, Decimal) or (isinstance(value, int | float) and not isinstance(value, bool)):
        number: dict[str, Any] = {"mode": "number", "value": _plain(value)}
        if column is not None and column.decimals is not None:
            number.update(decimals=column.decimals, rounding=column.rounding)
        return _check("answer", **number)
    check = _check("answer", mode="contains", value=str(value), others=list(others))
    return {**check, "field": field} if field else check


def _plain(value: Any) -> Any:
    """An integer stays an integer; a real or decimal becomes the exact decimal text it stands for."""
    if isinstance(value, int):
        return value
    number = to_decimal(value)
    assert number is not None
    return int(number) if number == number.to_integral_value() else format(number, "f")


def _declared_column(world: World, table: str | None, name: str) -> Column | None:
    """The declared column ``name`` of ``table`` (or, for a tool's result column, of any table)."""
    tables = [world.state.table(table)] if table else list(world.state.tables)
    return next((c for t in tables if t is not None for c in t.columns if c.name == name), None)


def _key_condition(table: Table, key: Any) -> tuple[str, dict[str, Any]]:
    """A verifier's WHERE clause and parameters selecting the row ``key`` (``:key``, or ``:key_<column>``)."""
    if not table.composite:
        return f"{quote_identifier(table.key_columns[0])} = :key", {"key": key}
    where = " AND ".join(f"{quote_identifier(c)} = :key_{c}" for c in table.key_columns)
    return where, {f"key_{c}": key[c] for c in table.key_columns}


def _state_checks(world: World, changes: list[RowChange]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    inserts: dict[str, int] = {}
    for change in changes:
        declared = key_table(world, change.table)
        table = quote_identifier(change.table)
        where, params = _key_condition(declared, change.key)
        if change.before is not None and change.after is not None:
            columns = [c for c in change.after if change.after[c] != change.before.get(c)]
            select = ", ".join(quote_identifier(c) for c in columns)
            checks.append(_check("sql", query=f"SELECT {select} FROM {table} WHERE {where}",
                                 params=params, expect=[[change.after[c] for c in columns]]))
            rows.append({"table": change.table, "key": change.key})
        elif change.after is None:
            checks.append(_check("sql", query=f"SELECT COUNT(*) FROM {table} WHERE {where}", params=params,
                                 expect=[[0]]))
            rows.append({"table": change.table, "key": change.key})
        else:
            inserts[change.table] = inserts.get(change.table, 0) + 1
            conditions = [c for c in change.after if declared.composite or c != declared.key_columns[0]]
            where = " AND ".join(f"{quote_identifier(c)} IS :{c}" for c in conditions) or "1"
            checks.append(_check("sql", query=f"SELECT COUNT(*) >= 1 FROM {table} WHERE {where}",
                                 params={c: change.after[c] for c in conditions}, expect=[[1]]))
    return checks, _check("unchanged_except", rows=rows, inserts=inserts)


Builder = Callable[["Minter", TaskSpec, Any, int], "Instance | None"]
CONFIRMATION = "Yes, please go ahead."
"""The customer's reply to a minted confirmation question."""


class Minter:
    """Instantiates specs on anchor rows, executing each chain to ground the task."""

    def __init__(self, world: World, runtime: WorldRuntime, seed: int, eval_percent: int) -> None:
        self.world = world
        self.runtime = runtime
        self.seed = seed
        self.eval_percent = eval_percent
        self._missing_errors: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[Any, ...]] = {}
        with runtime.guard.host() as conn:
            self.sides = Sides(seed, eval_percent, Entities(world, conn))

    def instance(self, spec: TaskSpec, key: Any, task: Task) -> Instance | None:
        """The spec's task on anchor row ``key``, on the side of that row's entity."""
        return self.on_side(spec.task_id, spec.anchor, key, task)

    def on_side(self, task_id: str, table: str, key: Any, task: Task) -> Instance | None:
        """Task ``task`` about row ``key`` of ``table`` as a case, on the side of the row's entity; None when its
        reference chain also names a row of an entity on the other side (no side could hold the case cleanly)."""
        side = self.sides.side(table, key)
        touched = {(table, canonical_json(normalize_key(key))): (table, key)}
        for other_table, other_key in self.sides.entities.rows_named(task.reference):
            touched.setdefault((other_table, canonical_json(other_key)), (other_table, other_key))
        if any(self.sides.side(t, k) != side for t, k in touched.values()):
            return None
        return Instance(task_id, key, task, side, self.sides.entity(table, key), tuple(touched.values()))

    def wording(self, spec: TaskSpec, key: Any, variant: int, **values: Any) -> str:
        """One wording variant of the template, filled in."""
        anchor = self.world.state.anchor(spec.anchor)
        assert anchor is not None
        text = WORDINGS[spec.template][variant % len(WORDINGS[spec.template])]
        return text.format(label=anchor.label, key=key_text(key_table(self.world, spec.anchor), key), **values)

    def variant(self, spec: TaskSpec, key: Any) -> int:
        """The seeded wording variant for this spec and row."""
        named = canonical_json(key) if isinstance(key, dict) else repr(key)
        return random.Random(f"{self.seed}:{spec.task_id}:{named}").randrange(3)

    def instantiate(self, spec: TaskSpec, key: Any, variant: int | None = None) -> Instance | None:
        """The task on row ``key``, or None when the row does not fit the template."""
        chosen = self.variant(spec, key) if variant is None else variant
        return _BUILDERS[spec.template](self, spec, key, chosen)

    def run(self, steps: list[Step]) -> tuple[list[Any], list[bool], list[RowChange]] | None:
        """Execute steps in an isolated episode; (observations, errors, changes) or None if a step broke."""
        with self.runtime.episode() as episode:
            result = run_chain(episode, steps)
            if not result.clean:
                return None
            return [e.observation for e in result.events], [e.error for e in result.events], episode.changes()

    def missing_row_errors(self, spec: TaskSpec, role: str) -> set[str]:
        """Errors a write returns for a row that does not exist (not a real refusal reason)."""
        tool = spec.tool(role)
        if tool not in self._missing_errors:
            declared = self.world.tool(tool)
            assert declared is not None
            missing = {param: -987654321 for param in spec.params(role)}
            with self.runtime.episode() as episode:
                event = episode.call(tool, {**missing, **dict(_extras(declared, spec.params(role)) or ())})
            self._missing_errors[tool] = {event.observation.get("error", "")} if event.error else set()
        return self._missing_errors[tool]

    def keys(self, table: str) -> tuple[Any, ...]:
        """All primary keys of an anchor table, in a seeded order.

        Read and shuffled once per table (the seed never changes between episodes), so
        minting does one pass over each anchor table however many specs it tries.
        """
        if table not in self._keys:
            declared = key_table(self.world, table)
            order = ", ".join(quote_identifier(column) for column in declared.key_columns)
            with self.runtime.guard.host() as conn:
                rows = conn.execute(f"SELECT {key_expression(declared, quote_identifier(table))} "
                                    f"FROM {quote_identifier(table)} ORDER BY {order}").fetchall()
            keys = [normalize_key(key_from_sql(declared, row[0])) for row in rows]
            random.Random(f"{self.seed}:{table}:keys").shuffle(keys)
            self._keys[table] = tuple(keys)
        return self._keys[table]


def _task(spec: TaskSpec, key: Any, instruction: str, steps: list[Step], answer: str | None,
          checks: list[dict[str, Any]], turns: tuple[UserTurn, ...] = ()) -> Task:
    return Task(instruction=instruction, anchor={"table": spec.anchor, "key": key}, reference=tuple(steps),
                answer=answer, vcode=VCode.model_validate({"checks": checks}), template=spec.template, turns=turns)


def _lookup_field(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    tool, column, table = spec.tool("lookup"), spec.field or "", key_table(m.world, spec.anchor)
    arguments = key_arguments(spec, "lookup", table, key)
    steps = [Step(tool=tool, arguments=arguments)]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][0], dict) or ran[0][0].get(column) is None:
        return None
    value = ran[0][0][column]
    anchor = m.world.state.anchor(spec.anchor)
    assert anchor is not None
    answer = sentence(f"The {_words(column)} of {anchor.label} {key_text(table, key)} is {value}")
    field = f"{spec.anchor}.{column}"
    checks = [_check("tool_called", tool=tool, arguments=arguments),
              _answer_check(value, field=field, column=_declared_column(m.world, spec.anchor, column)),
              _check("unchanged_except")]
    instruction = m.wording(spec, key, variant, field=_words(column))
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _find_then_read(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    natural, table = spec.field or "", key_table(m.world, spec.anchor)
    pk = table.primary_key  # discovery pairs natural keys only with single-column keys
    with m.runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {quote_identifier(natural)} FROM {quote_identifier(spec.anchor)} "
                           f"WHERE {quote_identifier(pk)} = ?", (key,)).fetchone()
    if row is None or row[0] is None:
        return None
    natural_value = row[0]
    finder, lister = spec.tool("find"), spec.tool("list")
    steps = [Step(tool=finder, arguments={spec.param("find"): natural_value}),
             Step(tool=lister, arguments=threaded_key_arguments(spec, "list", table))]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][1], list) or not ran[0][1] or ran[0][0].get(pk) != key:
        return None
    count = len(ran[0][1])
    anchor = m.world.state.anchor(spec.anchor)
    lister_tool = m.world.tool(lister)
    assert anchor is not None and lister_tool is not None
    noun = lister_tool.result_noun or "records"
    answer = f"The {anchor.label} with {_words(natural)} {natural_value} has {counted(count, noun)}."
    checks = [_check("tool_called", tool=finder, arguments={spec.param("find"): natural_value}),
              _check("tool_called", tool=lister, arguments=key_arguments(spec, "list", table, key)),
              _answer_check(count), _check("unchanged_except")]
    instruction = m.wording(spec, key, variant, noun=noun, nk=_words(natural), nv=natural_value)
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _write(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    lookup, writer, table = spec.tool("lookup"), spec.tool("write"), key_table(m.world, spec.anchor)
    refused = spec.template == "write_refused"
    write_args: dict[str, Any] = {**threaded_key_arguments(spec, "write", table), **dict(spec.extras)}
    looked_up = key_arguments(spec, "lookup", table, key)
    steps = [Step(tool=lookup, arguments=looked_up), Step(tool=writer, arguments=write_args, expect_error=refused)]
    ran = m.run(steps)
    if ran is None:
        return None
    observations, _errors, changes = ran
    anchor, tool = m.world.state.anchor(spec.anchor), m.world.tool(writer)
    assert anchor is not None and tool is not None
    action, named = tool.action or _words(tool.name), key_text(table, key)
    turns: tuple[UserTurn, ...] = ()
    if spec.template == "write_confirmed":
        turns = (UserTurn(after_step=1, assistant=f"I found {anchor.label} {named}. Shall I {action} it now?",
                          user=CONFIRMATION),)
    details = "".join(f" ({_words(name)}: {value})" for name, value in spec.extras)
    instruction = m.wording(spec, key, variant, action=action, details=details)
    base = [_check("tool_called", tool=lookup, arguments=looked_up)]
    if refused:
        reason = observations[1].get("error", "")
        if reason in m.missing_row_errors(spec, "write") or changes:
            return None
        answer = sentence(f"I can't {action} {anchor.label} {named}: {reason}")
        others = tuple(sorted({p.error for p in tool.preconditions} | {tool.result.not_found} - {reason}))
        checks = base + [_answer_check(reason, others=others), _check("unchanged_except")]
    else:
        if not changes:
            return None
        answer = f"Done: I have completed your request to {action} {anchor.label} {named}."
        state_checks, unchanged = _state_checks(m.world, changes)
        written = {**key_arguments(spec, "write", table, key), **dict(spec.extras)}
        checks = base + [_check("tool_called", tool=writer, arguments=written)] + state_checks + [unchanged]
        if turns:
            checks.append(_check("after_turn", tool=writer, turn=0))
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks, turns))


def _aggregate(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    lister, table = spec.tool("list"), key_table(m.world, spec.anchor)
    arguments = key_arguments(spec, "list", table, key)
    steps = [Step(tool=lister, arguments=arguments)]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][0], list) or not ran[0][0]:
        return None
    rows: list[dict[str, Any]] = ran[0][0]
    anchor, tool = m.world.state.anchor(spec.anchor), m.world.tool(lister)
    assert anchor is not None and tool is not None
    noun, named = tool.result_noun or "records", key_text(table, key)
    if spec.template == "aggregate_count":
        value: Any = len(rows)
        declared = None
        answer = f"{anchor.label.capitalize()} {named} has {counted(value, noun)}."
        instruction = m.wording(spec, key, variant, noun=noun)
    else:
        column = _numeric_column(rows)
        if column is None:
            return None
        declared = _declared_column(m.world, None, column)
        value = sum((to_decimal(row[column]) or Decimal(0) for row in rows), Decimal(0))
        if declared is not None and declared.decimals is not None:
            value = rounded(value, declared.decimals, declared.rounding)
        answer = f"Across the {noun} of {anchor.label} {named}, the {_words(column)} adds up to {_plain(value)}."
        instruction = m.wording(spec, key, variant, noun=noun, field=_words(column))
    checks = [_check("tool_called", tool=lister, arguments=arguments),
              _answer_check(value, column=declared if spec.template == "aggregate_total" else None),
              _check("unchanged_except")]
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _numeric_column(rows: list[dict[str, Any]]) -> str | None:
    for column, value in rows[0].items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        is_key = column == "id" or column.endswith("_id")
        if numeric and not is_key and all(isinstance(row.get(column), int | float) for row in rows):
            return column
    return None


_BUILDERS: dict[str, Builder] = {
    "lookup_field": _lookup_field,
    "find_then_read": _find_then_read,
    "write_ok": _write,
    "write_refused": _write,
    "write_confirmed": _write,
    "aggregate_count": _aggregate,
    "aggregate_total": _aggregate,
}
