"""Which stored column each result column of a tool holds values of, read from the tool's SQL.

A tool's observation is JSON whose keys are its last statement's result columns (``id``, ``customer_id``, ...). The
same key names different things in different tools (``id`` is a customer's id in ``find_customer_by_email`` and an
order's in ``list_orders``), so a value an observation shows is known to name a row of ``orders.id`` only through
the SQL that produced it. SQLite reports every column a statement reads to the connection's authorizer while it
prepares the statement; run on an empty copy of the declared schema, that gives, for each result column ``name``,
the ``table.column`` pairs read that are called ``name`` (an aliased or computed column, ``SELECT id AS refund_id``
or ``count(*)``, reads none and stays unknown). Each pair is then followed up its declared references to the column
it finally names (``orders.customer_id`` → ``customers.id``), its *root* (:func:`root_column`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from .models import Tool, World
from .sqlguard import named_parameters
from .state import create_table_sql

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


def _tool_sources(world: World, conn: sqlite3.Connection, tool: Tool) -> dict[str, frozenset[str]]:
    """One tool's :data:`ResultSources` (empty when its SQL does not prepare on the empty schema)."""
    reads: set[tuple[str, str]] = set()

    def authorize(action: int, table: str | None, column: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_READ and table and column:
            reads.add((table, column))
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)
    try:
        names: list[str] = []
        for statement in tool.statements:
            cursor = conn.execute(statement, {name: None for name in named_parameters(statement)})
            names = [column[0] for column in cursor.description or ()]
    except (sqlite3.Error, ValueError):
        return {}
    finally:
        conn.set_authorizer(None)
        conn.rollback()
    return {name: frozenset(root_column(world, f"{table}.{column}") for table, column in reads if column == name)
            for name in names if any(column == name for _, column in reads)}


def result_sources(world: World) -> dict[str, ResultSources]:
    """``{tool: its result columns' root columns}`` for every tool that runs SQL (module docstring)."""
    conn = _schema(world)
    try:
        return {tool.name: _tool_sources(world, conn, tool) for tool in world.tools if tool.statements}
    finally:
        conn.close()
