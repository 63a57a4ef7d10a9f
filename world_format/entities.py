"""Connected entities: the root row every row of the seed belongs to, following declared foreign keys.

A row's *owning reference* is the column its table declares as ``owner``, or the one column of the table that
declares ``references`` to another table (a table with several must declare its owner: :func:`owner_problem`).
Following owning references from a row until a row has none (or its
value is null, or names no row) reaches the row's *root*; the root and every row that reaches it form
one entity — a customer with their orders, the orders' items and refunds. Other references do not join
entities: a self-reference (an employee's manager) is a hierarchy, and a second reference (an order
item's product) points into shared reference data, which would otherwise make the whole seed one entity.
A cycle of owning references is one entity, rooted at its least row (by table, then canonical key).

The split (the builder's sides) puts whole entities on one side, so no held-out case concerns
a customer whose orders are training rows. Everything is read once, from the seed, in one query per table.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from world_format.canonical import canonical_json
from world_format.keys import key_expression, key_from_sql, normalize_key
from world_format.models import Column, Step, Table, World
from world_format.state import quote_identifier

Row = tuple[str, str]
"""A row: (table, canonical JSON of its key)."""


def _outward(table: Table) -> list[Column]:
    """The columns referencing another table (a self-reference is a hierarchy, never an owner)."""
    return [c for c in table.columns if c.references and c.references.split(".")[0] != table.name]


def owning_reference(table: Table) -> Column | None:
    """The column whose reference makes a row part of its parent's entity: the declared ``owner``, else the table's
    only reference to another table (None: the table's rows are roots)."""
    outward = _outward(table)
    if table.owner is not None:
        return next((c for c in outward if c.name == table.owner), None)
    return outward[0] if outward else None


def owner_problem(table: Table) -> str | None:
    """Why the table's owning reference cannot be read from its declaration (None when it can): an ``owner`` that is
    no column referencing another table, or several such columns and no ``owner``."""
    outward = [c.name for c in _outward(table)]
    if table.owner is not None and table.owner not in outward:
        return (f"owner {table.owner!r} is not a column of {table.name!r} that references another table "
                f"(those are {outward or 'none'})")
    if table.owner is None and len(outward) > 1:
        return (f"table {table.name!r} references other tables by {outward}: declare which one owns its rows as "
                f'"owner" (a row belongs to the entity of the row its owner names; the others are shared data)')
    return None


def entity_id(table: str, key: Any) -> str:
    """The id of the entity rooted at row ``key`` of ``table``: ``customers:17``, ``flights:{"flight_date":...}``."""
    return f"{table}:{canonical_json(normalize_key(key))}"


class Entities:
    """The root of every row of a seed (read once; lookups are dictionary reads)."""

    def __init__(self, world: World, conn: sqlite3.Connection) -> None:
        self._keys: dict[Row, Any] = {}
        self._parent: dict[Row, Row] = {}
        self._world = world
        tables = {table.name: table for table in world.state.tables}
        for table in world.state.tables:
            self._read(conn, table, tables)
        self._root: dict[Row, Row] = {}
        self._by_column: dict[tuple[str, str], dict[Any, Any]] = {}
        for tool in world.tools:
            for target in tool.anchors.values():
                table_name, column = target.split(".")
                named = tables.get(table_name)
                if named is None or column in named.key_columns or (table_name, column) in self._by_column:
                    continue
                self._by_column[(table_name, column)] = self._column_keys(conn, named, column)

    @staticmethod
    def _column_keys(conn: sqlite3.Connection, table: Table, column: str) -> dict[Any, Any]:
        """Each value of a (natural-key) column, to the key of the first row holding it."""
        name = quote_identifier(table.name)
        found = conn.execute(f"SELECT {quote_identifier(column)}, {key_expression(table, name)} FROM {name}").fetchall()
        values: dict[Any, Any] = {}
        for value, key in found:
            values.setdefault(value, normalize_key(key_from_sql(table, key)))
        return values

    def _read(self, conn: sqlite3.Connection, table: Table, tables: dict[str, Table]) -> None:
        name = quote_identifier(table.name)
        owner = owning_reference(table)
        parent_select = f", {name}.{quote_identifier(owner.name)}" if owner else ""
        rows = conn.execute(f"SELECT {key_expression(table, name)}{parent_select} FROM {name}").fetchall()
        lookup: dict[Any, str] | None = None
        target: Table | None = None
        if owner is not None and owner.references:
            parent_table, parent_column = owner.references.split(".")
            target = tables.get(parent_table)
            if target is not None and target.key_columns != (parent_column,):
                # a reference to a unique column (or one column of a composite key): map its values to keys
                found = conn.execute(f"SELECT {quote_identifier(parent_column)}, "
                                     f"{key_expression(target, quote_identifier(parent_table))} "
                                     f"FROM {quote_identifier(parent_table)}").fetchall()
                lookup = {}
                for value, key in found:
                    lookup.setdefault(value, canonical_json(normalize_key(key_from_sql(target, key))))
        for row in rows:
            key = normalize_key(key_from_sql(table, row[0]))
            me = (table.name, canonical_json(key))
            self._keys[me] = key
            if target is None or row[1] is None:
                continue
            parent = lookup.get(row[1]) if lookup is not None else canonical_json(normalize_key(row[1]))
            if parent is not None:
                self._parent[me] = (target.name, parent)

    def root(self, table: str, key: Any) -> tuple[str, Any]:
        """The root row (table, key) of the entity row ``key`` of ``table`` belongs to (itself when unknown)."""
        start = (table, canonical_json(normalize_key(key)))
        if start not in self._keys:
            return table, normalize_key(key)
        found = self._resolve(start)
        return found[0], self._keys[found]

    def rows_named(self, steps: tuple[Step, ...]) -> list[tuple[str, Any]]:
        """The rows a reference chain names by literal arguments (:meth:`rows_named_by` of each step)."""
        return [row for step in steps for row in self.rows_named_by(step.tool, step.arguments)]

    def rows_named_by(self, tool_name: str, arguments: dict[str, Any]) -> list[tuple[str, Any]]:
        """The rows one call names by literal arguments: each parameter the tool declares in ``anchors``
        ("table.column": the key, a key column or a natural key); threaded or missing arguments name nothing."""
        tool = self._world.tool(tool_name)
        if tool is None:
            return []
        named: dict[str, dict[str, Any]] = {}
        for param, target in tool.anchors.items():
            value = arguments.get(param)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                table, column = target.split(".")
                named.setdefault(table, {})[column] = value
        found = []
        for table, columns in named.items():
            key = self._key_of(table, columns)
            if key is not None:
                found.append((table, key))
        return found

    def _key_of(self, table: str, columns: dict[str, Any]) -> Any:
        declared = self._world.state.table(table)
        if declared is None:
            return None
        if all(column in columns for column in declared.key_columns):
            key = normalize_key({c: columns[c] for c in declared.key_columns} if declared.composite
                                else columns[declared.key_columns[0]])
            return key if (table, canonical_json(key)) in self._keys else None
        for column, value in columns.items():
            key = self._by_column.get((table, column), {}).get(value)
            if key is not None:
                return key
        return None

    def entity(self, table: str, key: Any) -> str:
        """The entity id of row ``key`` of ``table`` (:func:`entity_id` of its root)."""
        return entity_id(*self.root(table, key))

    def _resolve(self, start: Row) -> Row:
        path: list[Row] = []
        seen: dict[Row, int] = {}
        row = start
        while row not in self._root:
            if row in seen:  # a cycle of owning references: rooted at its least row
                cycle_root = min(path[seen[row]:])
                for member in path[seen[row]:]:
                    self._root[member] = cycle_root
                path = path[: seen[row]]
                break
            seen[row] = len(path)
            path.append(row)
            parent = self._parent.get(row)
            if parent is None or parent not in self._keys:
                self._root[row] = row
                path.pop()
                break
            row = parent
        root = self._root[row]
        for member in path:
            self._root[member] = root
        return root
