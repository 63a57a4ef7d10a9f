"""Deterministic task minting: a spec (:mod:`blobkit.builder.mint_specs`) instantiated on an anchor row.

A spec is instantiated by *executing* its reference chain in an isolated episode, so answer keys
and verifier expectations come from real observations, and arguments are threaded from earlier
reads (``$from``), never parsed from wording. A case reaches its row as a customer would
(:mod:`blobkit.builder.addressing`: identification first where the world declares it, natural keys
for internal ids); the templates themselves are in :mod:`blobkit.builder.mint_templates`. An anchor
row's key is a value, or an object of its key columns for a composite key.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from world_format.canonical import canonical_json
from world_format.chain import run_chain
from world_format.entities import Entities
from world_format.keys import normalize_key
from world_format.models import Column, Step, Table, Task, UserTurn, VCode, World
from world_format.procedure_check import ProcedureChecker
from world_format.quoting import amount, plain
from world_format.quoting import quoted as quoted  # the templates quote as answers do
from world_format.result_columns import Read, ResultSources, sql_reads
from world_format.runtime import RowChange, WorldRuntime
from world_format.seed_copy import SeedCopy
from world_format.state import quote_identifier

from .addressing import Address, Addresser
from .arguments import placeholder
from .key_order import seeded_keys
from .mint_specs import WORDINGS, TaskSpec, key_table
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
    """The connected entity the case concerns (:mod:`world_format.entities`): its anchor row's root row."""
    anchors_touched: tuple[tuple[str, Any], ...] = field(default=())
    probes: dict[str, str] = field(default_factory=dict)
    """The gate's verdict on each probe for this case (filled in when the case is gated)."""
    distractor: Task | None = None
    """The other case the gate's wrong-row probe ran on this one (filled in when the case is gated)."""


# --------------------------------------------------------------------------- shared by the templates


def key_arguments(spec: TaskSpec, role: str, table: Table, key: Any) -> dict[str, Any]:
    """The literal arguments naming anchor row ``key`` in the call of the tool playing ``role``."""
    params = spec.params(role)
    if not table.composite:
        return {params[0]: key}
    return {param: key[column] for param, column in zip(params, table.key_columns, strict=True)}


def check(kind: str, **fields: Any) -> dict[str, Any]:
    """A VCode check as plain JSON."""
    return {"kind": kind, **fields}


def answer_check(value: Any, *, field: str | None = None, others: tuple[str, ...] = (),
                 column: Column | None = None) -> dict[str, Any]:
    """A committal answer check: a number (at the column's declared precision, in its major unit) or a phrase
    that must be stated without any other value of its ``field`` and none of ``others``."""
    if isinstance(value, Decimal) or (isinstance(value, int | float) and not isinstance(value, bool)):
        number: dict[str, Any] = {"mode": "number", "value": plain(amount(value, column))}
        if column is not None and column.decimals is not None:
            number.update(decimals=column.decimals, rounding=column.rounding)
        return check("answer", **number)
    found = check("answer", mode="contains", value=str(value), others=list(others))
    return {**found, "field": field} if field else found


def declared_column(world: World, table: str | None, name: str) -> Column | None:
    """The declared column ``name`` of ``table`` (or, for a tool's result column, of any table)."""
    tables = [world.state.table(table)] if table else list(world.state.tables)
    return next((c for t in tables if t is not None for c in t.columns if c.name == name), None)


def words(world: World, table: str | None, name: str) -> str:
    """How wording names a column: its declared label, else its name with spaces."""
    column = declared_column(world, table, name)
    return column.words if column is not None else name.replace("_", " ")


def _key_condition(table: Table, key: Any) -> tuple[str, dict[str, Any]]:
    """A verifier's WHERE clause and parameters selecting the row ``key`` (``:key``, or ``:key_<column>``)."""
    if not table.composite:
        return f"{quote_identifier(table.key_columns[0])} = :key", {"key": key}
    where = " AND ".join(f"{quote_identifier(c)} = :key_{c}" for c in table.key_columns)
    return where, {f"key_{c}": key[c] for c in table.key_columns}


def state_checks(world: World, changes: list[RowChange]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SQL checks that the final state holds each change, and the unchanged_except check around them."""
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
            checks.append(check("sql", query=f"SELECT {select} FROM {table} WHERE {where}",
                                params=params, expect=[[change.after[c] for c in columns]]))
            rows.append({"table": change.table, "key": change.key})
        elif change.after is None:
            checks.append(check("sql", query=f"SELECT COUNT(*) FROM {table} WHERE {where}", params=params,
                                expect=[[0]]))
            rows.append({"table": change.table, "key": change.key})
        else:
            inserts[change.table] = inserts.get(change.table, 0) + 1
            conditions = [c for c in change.after if declared.composite or c != declared.key_columns[0]]
            where = " AND ".join(f"{quote_identifier(c)} IS :{c}" for c in conditions) or "1"
            checks.append(check("sql", query=f"SELECT COUNT(*) >= 1 FROM {table} WHERE {where}",
                                params={c: change.after[c] for c in conditions}, expect=[[1]]))
    return checks, check("unchanged_except", rows=rows, inserts=inserts)


def make_task(spec: TaskSpec, key: Any, instruction: str, steps: list[Step], answer: str | None,
              checks: list[dict[str, Any]], turns: tuple[UserTurn, ...] = ()) -> Task:
    """The minted task on row ``key``."""
    return Task(instruction=instruction, anchor={"table": spec.anchor, "key": key}, reference=tuple(steps),
                answer=answer, vcode=VCode.model_validate({"checks": checks}), template=spec.template, turns=turns)


Builder = Callable[["Minter", TaskSpec, Any, int], "Instance | None"]
SEED_ROWS_READ = 8
"""Most rows :meth:`Minter.seed_rows` reads for one argument."""
COMPLETED = "I have completed your request"
"""How a minted write says it is done; a refusal (or a hand-off) that also says it is hedging."""
CONFIRMATION = "Yes, please go ahead."
"""The customer's reply to a minted confirmation question."""


class Minter:
    """Instantiates specs on anchor rows, executing each chain to ground the task."""

    def __init__(self, world: World, runtime: WorldRuntime, seed: int, eval_percent: int,
                 serialized: bytes | SeedCopy | None = None) -> None:
        """``serialized``: the seed's bytes when the caller holds them (the entity lookups' private copy is made
        from them, one copy of the database fewer than serializing the runtime's), or a read-only copy of the
        seed to share (:attr:`world_format.loaded.LoadedWorld.seed_copy`: no copy made)."""
        self.world = world
        self.runtime = runtime
        self.seed = seed
        self.eval_percent = eval_percent
        self._missing_errors: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[Any, ...]] = {}
        if serialized is None:
            with runtime.guard.host() as conn:
                serialized = conn.serialize()
        self.sides = Sides(seed, eval_percent, Entities(world, serialized))
        self.addresser = Addresser(world, self.sides.entities, runtime, seed)
        self.procedures = ProcedureChecker.of(runtime, self.sides.entities)

    def result_sources(self, tool: str) -> ResultSources:
        """The root columns each result column of ``tool`` names (:func:`world_format.result_columns.result_sources`,
        traced once per runtime); empty for a tool without SQL."""
        return sql_reads(self.runtime).sources.get(tool, {})

    def precondition_reads(self, tool: str) -> tuple[frozenset[Read], ...] | None:
        """The columns each precondition of ``tool`` reads (:func:`world_format.result_columns.precondition_reads`,
        traced once per runtime); None when they are unknown, empty for a tool without preconditions."""
        return sql_reads(self.runtime).preconditions.get(tool, ())

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

    def address(self, spec: TaskSpec, key: Any) -> Address | None:
        """How the customer reaches row ``key`` of the spec's anchor table (None: no customer could name it)."""
        return self.addresser.address(spec.anchor, key, f"{spec.task_id}:{canonical_json(normalize_key(key))}")

    def wording(self, spec: TaskSpec, variant: int, address: Address, **values: Any) -> str:
        """One wording variant of the template, filled in, after the customer's opening."""
        text = WORDINGS[spec.template][variant % len(WORDINGS[spec.template])].format(named=address.asked, **values)
        return address.intro + text[0].upper() + text[1:]

    def variant(self, spec: TaskSpec, key: Any) -> int:
        """The seeded wording variant for this spec and row."""
        named = canonical_json(key) if isinstance(key, dict) else repr(key)
        return random.Random(f"{self.seed}:{spec.task_id}:{named}").randrange(3)

    def instantiate(self, spec: TaskSpec, key: Any, variant: int | None = None) -> Instance | None:
        """The task on row ``key``, or None when the row does not fit the template."""
        from .mint_templates import BUILDERS

        chosen = self.variant(spec, key) if variant is None else variant
        return BUILDERS[spec.template](self, spec, key, chosen)

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
                event = episode.call(tool, {**missing, **placeholder(declared, spec.extras)})
            self._missing_errors[tool] = {event.observation.get("error", "")} if event.error else set()
        return self._missing_errors[tool]

    def seed_rows(self, table: str, column: str, owner: str, value: Any) -> list[Any]:
        """``column`` of the rows of ``table`` whose ``owner`` column holds ``value``, in key order, at most
        :data:`SEED_ROWS_READ` (:data:`.arguments.SeedRows`: a customer's payment methods, an order's items)."""
        declared = key_table(self.world, table)
        order = ", ".join(quote_identifier(c) for c in declared.key_columns)
        with self.runtime.guard.host() as conn:
            found = conn.execute(f"SELECT {quote_identifier(column)} FROM {quote_identifier(table)} WHERE "
                                 f"{quote_identifier(owner)} = ? ORDER BY {order} LIMIT {SEED_ROWS_READ}",
                                 (value,)).fetchall()
        return [row[0] for row in found if row[0] is not None]

    def keys(self, table: str) -> tuple[Any, ...]:
        """The primary keys of an anchor table in a seeded order: all of them, or a seeded sample of a large table
        (:func:`.key_order.seeded_keys`).

        Read once per table (the seed never changes between episodes), so minting does at most one pass over
        each anchor table however many specs it tries.
        """
        if table not in self._keys:
            with self.runtime.guard.host() as conn:
                self._keys[table] = seeded_keys(conn, key_table(self.world, table), self.seed)
        return self._keys[table]
