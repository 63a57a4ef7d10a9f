"""Which stored column each result column of a tool holds values of, read from the tool's SQL.

A tool's observation is JSON whose keys are its last statement's result columns (``id``, ``customer_id``, ...). The
same key names different things in different tools (``id`` is a customer's id in ``find_customer_by_email`` and an
order's in ``list_orders``), so a value an observation shows is known to name a row of ``orders.id`` only through
the SQL that produced it. SQLite reports every column a statement reads to the connection's authorizer while it
prepares the statement; run on an empty copy of the declared schema, that gives, for each result column ``name``,
the ``table.column`` pairs read that are called ``name`` (an aliased or computed column, ``SELECT id AS refund_id``
or ``count(*)``, reads none and stays unknown). Each pair is then followed up its declared references to the column
it finally names (``orders.customer_id`` → ``customers.id``), its *root* (:func:`root_column`).

The same authorizer tells which stored columns a tool's preconditions read (:func:`precondition_reads`): what
the tool's decision depends on, so that a minted turn can restate those values before it decides.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .models import Tool, World
from .sqlguard import LITERALS_AND_COMMENTS, named_parameters
from .state import create_table_sql

if TYPE_CHECKING:
    from .runtime import WorldRuntime

ResultSources = Mapping[str, frozenset[str]]
"""``{result column: the root columns ("table.column") its values name}``; a column absent is unknown."""


def root_column(world: World, column: str) -> str:
    """``column`` ("table.column") followed up its declared references to the column it finally names (itself when
    it references nothing; a reference cycle stops where it would repeat)."""
    seen = {column}
    while True:
        table_name, _, name = column.partition(".")
        table = world.state.table(table_name)
        declared = next((c for c in table.columns if c.name == name), None) if table else None
        if declared is None or declared.references is None or declared.references in seen:
            return column
        column = declared.references
        seen.add(column)


def _schema(world: World) -> sqlite3.Connection:
    """An in-memory database holding the declared tables, empty (checks, defaults and references as declared)."""
    conn = sqlite3.connect(":memory:")
    for table in world.state.tables:
        conn.execute(create_table_sql(table))
    return conn


Read = tuple[str, str]
"""A stored column an SQL statement reads: ``(table, column)``."""


def _reads(conn: sqlite3.Connection, statement: str) -> tuple[set[Read], list[str]]:
    """The columns ``statement`` reads (SQLite's SQLITE_READ events while it runs on ``conn``) and its result
    columns' names; sqlite3.Error (or ValueError for a parameter other than ``:name``) when it does not run."""
    reads: set[Read] = set()

    def authorize(action: int, table: str | None, column: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_READ and table and column:
            reads.add((table, column))
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)
    try:
        cursor = conn.execute(statement, {name: None for name in named_parameters(statement)})
        return reads, [column[0] for column in cursor.description or ()]
    finally:
        conn.set_authorizer(None)
        conn.rollback()


def _tool_sources(world: World, conn: sqlite3.Connection, tool: Tool) -> dict[str, frozenset[str]]:
    """One tool's :data:`ResultSources` (empty when its SQL does not prepare on the empty schema)."""
    reads: set[Read] = set()
    try:
        names: list[str] = []
        for statement in tool.statements:
            read, names = _reads(conn, statement)
            reads |= read
    except (sqlite3.Error, ValueError):
        return {}
    return {name: frozenset(root_column(world, f"{table}.{column}") for table, column in reads if column == name)
            for name in names if any(column == name for _, column in reads)}


def _sources(world: World, conn: sqlite3.Connection) -> dict[str, ResultSources]:
    return {tool.name: _tool_sources(world, conn, tool) for tool in world.tools if tool.statements}


def _precondition_reads(conn: sqlite3.Connection, tool: Tool) -> tuple[frozenset[Read], ...] | None:
    try:
        return tuple(frozenset(_reads(conn, p.sql)[0]) for p in tool.preconditions)
    except (sqlite3.Error, ValueError):
        return None


def result_sources(world: World) -> dict[str, ResultSources]:
    """``{tool: its result columns' root columns}`` for every tool that runs SQL (module docstring)."""
    conn = _schema(world)
    try:
        return _sources(world, conn)
    finally:
        conn.close()


PreconditionReads = Mapping[str, tuple[frozenset[Read], ...] | None]
"""``{tool: the columns each of its preconditions reads, in order}`` (None: a precondition does not run)."""


def precondition_reads(world: World) -> dict[str, tuple[frozenset[Read], ...] | None]:
    """``{tool: the columns each of its preconditions reads, in order}`` for every tool with preconditions; None for
    a tool one of whose preconditions does not run on the empty schema (what it reads is then unknown)."""
    conn = _schema(world)
    try:
        return {tool.name: _precondition_reads(conn, tool) for tool in world.tools if tool.preconditions}
    finally:
        conn.close()


_SELECT = re.compile(r"^\s*SELECT\s+", re.IGNORECASE)
_TOKEN = re.compile(LITERALS_AND_COMMENTS.pattern + r"|[()]|\bFROM\b", re.IGNORECASE | re.DOTALL)


def _spaced(sql: str) -> str:
    return " ".join(sql.split())


def _selected_expression(precondition_sql: str) -> str | None:
    """The expression a one-column precondition selects, whitespace collapsed: the text between SELECT and its
    top-level FROM (a FROM inside parentheses, a quoted string or a comment belongs to the expression), or, with no
    top-level FROM, the whole rest when it names a ``:parameter`` (``NOT EXISTS (SELECT 1 FROM legs WHERE booking_id
    = :booking_id ...)`` reads rows by the call's argument; ``SELECT 1`` reads nothing and gives None)."""
    start = _SELECT.match(precondition_sql)
    if start is None:
        return None
    depth = 0
    for token in _TOKEN.finditer(precondition_sql, start.end()):
        text = token.group(0)
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
        elif text.upper() == "FROM" and depth == 0:
            return _spaced(precondition_sql[start.end():token.start()]) or None
    rest = _spaced(precondition_sql[start.end():])
    try:
        return rest if rest and named_parameters(rest) else None
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def stating_column(precondition_sql: str, statement: str) -> str | None:
    """The result column of ``statement`` computed by the expression ``precondition_sql`` selects, written the same
    way up to whitespace (``SELECT warranty_until >= '2026-03-16' FROM devices WHERE id = :device_id`` and
    ``SELECT ..., warranty_until >= '2026-03-16' AS under_warranty FROM devices ...`` give ``under_warranty``):
    the column that shows the value the precondition decides on when both read the same row; None when there is
    none. A textual match of the selected expression only: an expression written differently is not recognised,
    and the caller's SQL must read the row the precondition reads (the minter asks it of the anchor row's look-up).
    Memoised: the minter asks it for every case of a write, with the same two statements."""
    expression = _selected_expression(precondition_sql)
    if expression is None:
        return None
    shown = re.search(r"(?:SELECT|,)\s*" + re.escape(expression) + r"\s+AS\s+\"?(\w+)\"?\s*(?:,|FROM\s)",
                      _spaced(statement), re.IGNORECASE)
    return shown.group(1) if shown else None


@dataclass(frozen=True)
class SqlReads:
    """What a world's SQL reads, traced on one empty copy of its schema."""

    sources: Mapping[str, ResultSources]
    """:func:`result_sources`."""
    preconditions: PreconditionReads
    """:func:`precondition_reads`."""


MEMO_KEY = "world_format.sql_reads"


def sql_reads(runtime: WorldRuntime) -> SqlReads:
    """The runtime's world's :class:`SqlReads`, traced once per runtime and its forks (:attr:`WorldRuntime.memo`:
    the minter and the gate share one empty schema, never one per episode)."""
    found = runtime.memo.get(MEMO_KEY)
    if not isinstance(found, SqlReads):
        world, conn = runtime.world, _schema(runtime.world)
        try:
            found = SqlReads(_sources(world, conn), {tool.name: _precondition_reads(conn, tool)
                                                     for tool in world.tools if tool.preconditions})
        finally:
            conn.close()
        runtime.memo[MEMO_KEY] = found
    return found
