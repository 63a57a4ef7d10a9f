"""Deterministic task minting from a world's tools, anchor tables and seed rows.

A :class:`TaskSpec` is a task family (a template bound to tools and fields); it is
instantiated on an anchor row by *executing* its reference chain in an isolated episode,
so answer keys and verifier expectations come from real observations, and arguments are
threaded from earlier reads (``$from``), never parsed from wording.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from world_format.canonical import content_id
from world_format.chain import run_chain
from world_format.models import Anchor, ArgRef, Column, Step, Task, Tool, VCode, World
from world_format.runtime import RowChange, WorldRuntime
from world_format.state import quote_identifier
from world_format.values import rounded, to_decimal

from .sides import Side, side_of

TEMPLATES = ("lookup_field", "find_then_read", "write_ok", "write_refused", "aggregate_count", "aggregate_total")

WORDINGS: dict[str, tuple[str, ...]] = {
    "lookup_field": ("What is the {field} of {label} {key}?", "Can you tell me the {field} for {label} {key}?",
                     "I need the {field} on {label} {key}, please."),
    "find_then_read": ("How many {noun} does the {label} with {nk} {nv} have?",
                       "The {label} with {nk} {nv} wants to know how many {noun} they have.",
                       "Please count the {noun} of the {label} whose {nk} is {nv}."),
    "write_ok": ("Please {action} {label} {key}{details}.", "Could you {action} {label} {key}{details} for me?",
                 "I'd like you to {action} {label} {key}{details}."),
    "aggregate_count": ("How many {noun} does {label} {key} have?", "Count the {noun} of {label} {key}, please.",
                        "What is the number of {noun} for {label} {key}?"),
    "aggregate_total": ("What is the total {field} across the {noun} of {label} {key}?",
                        "Add up the {field} of all {noun} for {label} {key}.",
                        "Sum the {field} over the {noun} of {label} {key}, please."),
}
WORDINGS["write_refused"] = WORDINGS["write_ok"]


@dataclass(frozen=True)
class TaskSpec:
    """A task family: a template bound to an anchor table, tools and (maybe) a field."""

    template: str
    anchor: str
    tools: tuple[tuple[str, str], ...]
    field: str | None = None
    extras: tuple[tuple[str, Any], ...] = ()

    @property
    def task_id(self) -> str:
        """Content hash of the family definition."""
        return content_id({"template": self.template, "anchor": self.anchor, "tools": list(self.tools),
                           "field": self.field, "extras": [list(item) for item in self.extras]}, "t-")

    def tool(self, role: str) -> str:
        """The tool playing ``role`` (lookup, find, list, write...)."""
        return dict(self.tools)[role]

    def param(self, role: str) -> str:
        """The anchor parameter of the tool playing ``role``."""
        return dict(self.tools)[role + "_param"]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"template": self.template, "anchor": self.anchor, "tools": dict(self.tools), "field": self.field,
                "extras": dict(self.extras)}


@dataclass(frozen=True)
class Instance:
    """A spec instantiated on one anchor row: a concrete task."""

    spec_id: str
    key: Any
    task: Task
    side: Side
    """train or eval: decided from the anchor row when the case is made (:func:`~blobkit.builder.sides.side_of`)."""
    anchors_touched: tuple[tuple[str, Any], ...] = field(default=())
    probes: dict[str, str] = field(default_factory=dict)
    """The gate's verdict on each probe for this case (filled in when the case is gated)."""
    distractor: Task | None = None
    """The other case the gate's wrong-row probe ran on this one (filled in when the case is gated)."""


# --------------------------------------------------------------------------- discovering specs


def _anchor_params(tool: Tool, table: str, column: str) -> list[str]:
    return [name for name, ref in tool.anchors.items() if ref == f"{table}.{column}"]


def _required(tool: Tool) -> list[str]:
    required = tool.parameters.get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def _keyed_tools(world: World, anchor: Anchor, effect: str, shapes: tuple[str, ...]) -> Iterator[tuple[Tool, str]]:
    pk = _pk(world, anchor.table)
    for tool in world.tools:
        if tool.effect != effect or tool.result.shape not in shapes:
            continue
        params = _anchor_params(tool, anchor.table, pk)
        if params:
            yield tool, params[0]


def _pk(world: World, table: str) -> str:
    declared = world.state.table(table)
    assert declared is not None
    return declared.primary_key


def _extras(tool: Tool, key_param: str) -> tuple[tuple[str, Any], ...] | None:
    """Values for required non-key parameters (enum or schema examples); None when unsupported."""
    values = []
    properties = tool.parameters.get("properties", {})
    for name in _required(tool):
        if name == key_param:
            continue
        prop = properties.get(name, {})
        options = prop.get("enum") or prop.get("examples")
        if not options:
            return None
        values.append((name, options[0]))
    return tuple(values)


def discover_specs(world: World) -> dict[str, list[TaskSpec]]:
    """Every spec each template can make from the world, grouped by template."""
    found: dict[str, list[TaskSpec]] = {template: [] for template in TEMPLATES}
    for anchor in world.state.anchors:
        lookups = list(_keyed_tools(world, anchor, "read", ("row",)))
        lists = [(t, p) for t, p in _keyed_tools(world, anchor, "read", ("rows",)) if t.result_noun]
        for tool, param in lookups:
            if len(_required(tool)) == 1:
                for column in anchor.answer_fields:
                    found["lookup_field"].append(TaskSpec("lookup_field", anchor.table,
                                                          (("lookup", tool.name), ("lookup_param", param)), column))
        for natural in anchor.natural_keys:
            for finder in world.tools:
                finder_params = _anchor_params(finder, anchor.table, natural)
                if finder.effect == "read" and finder.result.shape == "row" and finder_params:
                    for lister, list_param in lists:
                        roles: Roles = (("find", finder.name), ("find_param", finder_params[0]), ("list", lister.name),
                                 ("list_param", list_param))
                        found["find_then_read"].append(TaskSpec("find_then_read", anchor.table, roles, natural))
        for lister, param in lists:
            roles = (("list", lister.name), ("list_param", param))
            found["aggregate_count"].append(TaskSpec("aggregate_count", anchor.table, roles))
            found["aggregate_total"].append(TaskSpec("aggregate_total", anchor.table, roles))
        if lookups:
            lookup, lookup_param = lookups[0]
            for writer, param in _keyed_tools(world, anchor, "write", ("row", "rows", "affected")):
                extras = _extras(writer, param)
                if extras is None or not writer.preconditions:
                    continue
                roles = (("lookup", lookup.name), ("lookup_param", lookup_param), ("write", writer.name),
                         ("write_param", param))
                for template in ("write_ok", "write_refused"):
                    found[template].append(TaskSpec(template, anchor.table, roles, None, extras))
    return found


def select_specs(world: World, count: int, seed: int) -> list[TaskSpec]:
    """Up to ``count`` specs, rotating over templates so kits are not monotonous (seeded)."""
    found = discover_specs(world)
    rng = random.Random(f"{seed}:select")
    queues = {template: rng.sample(found[template], len(found[template])) for template in TEMPLATES}
    chosen: list[TaskSpec] = []
    while len(chosen) < count and any(queues.values()):
        for template in TEMPLATES:
            if queues[template] and len(chosen) < count:
                chosen.append(queues[template].pop())
    return chosen


# --------------------------------------------------------------------------- instantiating


def _from_first(column: str) -> ArgRef:
    """An argument threaded from the first step's observation."""
    return ArgRef.model_validate({"$from": 0, "pointer": f"/{column}"})


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


def _state_checks(world: World, changes: list[RowChange]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    inserts: dict[str, int] = {}
    for change in changes:
        pk = _pk(world, change.table)
        table = quote_identifier(change.table)
        if change.before is not None and change.after is not None:
            columns = [c for c in change.after if change.after[c] != change.before.get(c)]
            select = ", ".join(quote_identifier(c) for c in columns)
            checks.append(_check("sql", query=f"SELECT {select} FROM {table} WHERE {quote_identifier(pk)} = :key",
                                 params={"key": change.key}, expect=[[change.after[c] for c in columns]]))
            rows.append({"table": change.table, "key": change.key})
        elif change.after is None:
            checks.append(_check("sql", query=f"SELECT COUNT(*) FROM {table} WHERE {quote_identifier(pk)} = :key",
                                 params={"key": change.key}, expect=[[0]]))
            rows.append({"table": change.table, "key": change.key})
        else:
            inserts[change.table] = inserts.get(change.table, 0) + 1
            conditions = [c for c in change.after if c != pk]
            where = " AND ".join(f"{quote_identifier(c)} IS :{c}" for c in conditions) or "1"
            checks.append(_check("sql", query=f"SELECT COUNT(*) >= 1 FROM {table} WHERE {where}",
                                 params={c: change.after[c] for c in conditions}, expect=[[1]]))
    return checks, _check("unchanged_except", rows=rows, inserts=inserts)


Builder = Callable[["Minter", TaskSpec, Any, int], "Instance | None"]
Roles = tuple[tuple[str, str], ...]


class Minter:
    """Instantiates specs on anchor rows, executing each chain to ground the task."""

    def __init__(self, world: World, runtime: WorldRuntime, seed: int, eval_percent: int) -> None:
        self.world = world
        self.runtime = runtime
        self.seed = seed
        self.eval_percent = eval_percent
        self._missing_errors: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[Any, ...]] = {}

    def instance(self, spec: TaskSpec, key: Any, task: Task) -> Instance:
        """The spec's task on anchor row ``key``, on that row's side of the split."""
        return Instance(spec.task_id, key, task, side_of(self.seed, spec.anchor, key, self.eval_percent),
                        ((spec.anchor, key),))

    def wording(self, spec: TaskSpec, key: Any, variant: int, **values: Any) -> str:
        """One wording variant of the template, filled in."""
        anchor = self.world.state.anchor(spec.anchor)
        assert anchor is not None
        text = WORDINGS[spec.template][variant % len(WORDINGS[spec.template])]
        return text.format(label=anchor.label, key=key, **values)

    def variant(self, spec: TaskSpec, key: Any) -> int:
        """The seeded wording variant for this spec and row."""
        return random.Random(f"{self.seed}:{spec.task_id}:{key!r}").randrange(3)

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

    def missing_row_errors(self, tool: str, param: str) -> set[str]:
        """Errors a write returns for a row that does not exist (not a real refusal reason)."""
        if tool not in self._missing_errors:
            with self.runtime.episode() as episode:
                event = episode.call(tool, {param: -987654321, **dict(self._extras_for(tool))})
            self._missing_errors[tool] = {event.observation.get("error", "")} if event.error else set()
        return self._missing_errors[tool]

    def _extras_for(self, tool_name: str) -> tuple[tuple[str, Any], ...]:
        tool = self.world.tool(tool_name)
        assert tool is not None
        return _extras(tool, next(iter(tool.anchors), "")) or ()

    def keys(self, table: str) -> tuple[Any, ...]:
        """All primary keys of an anchor table, in a seeded order.

        Read and shuffled once per table (the seed never changes between episodes), so
        minting does one pass over each anchor table however many specs it tries.
        """
        if table not in self._keys:
            pk = _pk(self.world, table)
            with self.runtime.guard.host() as conn:
                rows = conn.execute(f"SELECT {quote_identifier(pk)} FROM {quote_identifier(table)} "
                                    f"ORDER BY {quote_identifier(pk)}").fetchall()
            keys = [row[0] for row in rows]
            random.Random(f"{self.seed}:{table}:keys").shuffle(keys)
            self._keys[table] = tuple(keys)
        return self._keys[table]


def _task(spec: TaskSpec, key: Any, instruction: str, steps: list[Step], answer: str | None,
          checks: list[dict[str, Any]]) -> Task:
    return Task(instruction=instruction, anchor={"table": spec.anchor, "key": key}, reference=tuple(steps),
                answer=answer, vcode=VCode.model_validate({"checks": checks}), template=spec.template)


def _lookup_field(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    tool, param, column = spec.tool("lookup"), spec.param("lookup"), spec.field or ""
    steps = [Step(tool=tool, arguments={param: key})]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][0], dict) or ran[0][0].get(column) is None:
        return None
    value = ran[0][0][column]
    anchor = m.world.state.anchor(spec.anchor)
    assert anchor is not None
    answer = f"The {_words(column)} of {anchor.label} {key} is {value}."
    field = f"{spec.anchor}.{column}"
    checks = [_check("tool_called", tool=tool, arguments={param: key}),
              _answer_check(value, field=field, column=_declared_column(m.world, spec.anchor, column)),
              _check("unchanged_except")]
    instruction = m.wording(spec, key, variant, field=_words(column))
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _find_then_read(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    natural, pk = spec.field or "", _pk(m.world, spec.anchor)
    with m.runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {quote_identifier(natural)} FROM {quote_identifier(spec.anchor)} "
                           f"WHERE {quote_identifier(pk)} = ?", (key,)).fetchone()
    if row is None or row[0] is None:
        return None
    natural_value = row[0]
    finder, lister = spec.tool("find"), spec.tool("list")
    steps = [Step(tool=finder, arguments={spec.param("find"): natural_value}),
             Step(tool=lister, arguments={spec.param("list"): _from_first(pk)})]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][1], list) or not ran[0][1] or ran[0][0].get(pk) != key:
        return None
    count = len(ran[0][1])
    anchor = m.world.state.anchor(spec.anchor)
    lister_tool = m.world.tool(lister)
    assert anchor is not None and lister_tool is not None
    noun = lister_tool.result_noun or "records"
    answer = f"The {anchor.label} with {_words(natural)} {natural_value} has {count} {noun}."
    checks = [_check("tool_called", tool=finder, arguments={spec.param("find"): natural_value}),
              _check("tool_called", tool=lister, arguments={spec.param("list"): key}),
              _answer_check(count), _check("unchanged_except")]
    instruction = m.wording(spec, key, variant, noun=noun, nk=_words(natural), nv=natural_value)
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _write(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    lookup, writer = spec.tool("lookup"), spec.tool("write")
    pk = _pk(m.world, spec.anchor)
    refused = spec.template == "write_refused"
    write_args: dict[str, Any] = {spec.param("write"): _from_first(pk)}
    write_args.update(dict(spec.extras))
    steps = [Step(tool=lookup, arguments={spec.param("lookup"): key}),
             Step(tool=writer, arguments=write_args, expect_error=refused)]
    ran = m.run(steps)
    if ran is None:
        return None
    observations, _errors, changes = ran
    anchor, tool = m.world.state.anchor(spec.anchor), m.world.tool(writer)
    assert anchor is not None and tool is not None
    action = tool.action or _words(tool.name)
    key_args = {spec.param("write"): key, **dict(spec.extras)}
    details = "".join(f" ({_words(name)}: {value})" for name, value in spec.extras)
    instruction = m.wording(spec, key, variant, action=action, details=details)
    base = [_check("tool_called", tool=lookup, arguments={spec.param("lookup"): key})]
    if refused:
        reason = observations[1].get("error", "")
        if reason in m.missing_row_errors(writer, spec.param("write")) or changes:
            return None
        answer = f"I can't {action} {anchor.label} {key}: {reason}."
        others = tuple(sorted({p.error for p in tool.preconditions} | {tool.result.not_found} - {reason}))
        checks = base + [_answer_check(reason, others=others), _check("unchanged_except")]
    else:
        if not changes:
            return None
        answer = f"Done: I did {action} {anchor.label} {key} as requested."
        state_checks, unchanged = _state_checks(m.world, changes)
        checks = base + [_check("tool_called", tool=writer, arguments=key_args)] + state_checks + [unchanged]
    return m.instance(spec, key, _task(spec, key, instruction, steps, answer, checks))


def _aggregate(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    lister, param = spec.tool("list"), spec.param("list")
    steps = [Step(tool=lister, arguments={param: key})]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][0], list) or not ran[0][0]:
        return None
    rows: list[dict[str, Any]] = ran[0][0]
    anchor, tool = m.world.state.anchor(spec.anchor), m.world.tool(lister)
    assert anchor is not None and tool is not None
    noun = tool.result_noun or "records"
    if spec.template == "aggregate_count":
        value: Any = len(rows)
        declared = None
        answer = f"{anchor.label.capitalize()} {key} has {value} {noun}."
        instruction = m.wording(spec, key, variant, noun=noun)
    else:
        column = _numeric_column(rows)
        if column is None:
            return None
        declared = _declared_column(m.world, None, column)
        value = sum((to_decimal(row[column]) or Decimal(0) for row in rows), Decimal(0))
        if declared is not None and declared.decimals is not None:
            value = rounded(value, declared.decimals, declared.rounding)
        answer = f"The sum of {_words(column)} across the {noun} of {anchor.label} {key} is {_plain(value)}."
        instruction = m.wording(spec, key, variant, noun=noun, field=_words(column))
    checks = [_check("tool_called", tool=lister, arguments={param: key}),
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
    "aggregate_count": _aggregate,
    "aggregate_total": _aggregate,
}
