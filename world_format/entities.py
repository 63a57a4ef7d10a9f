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
a customer whose orders are training rows. Rows are read from the seed when a lookup first needs them (by
primary key, or by a unique column's index), never all at once: a build asks about a few thousand rows however
large the seed is.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from world_format.canonical import canonical_json
from world_format.keys import key_expression, key_from_sql, key_parameters, key_where, normalize_key
from world_format.models import Column, Step, Table, World
from world_format.seed_copy import SeedCopy
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
    """The root of every row of a seed, looked up on demand.

    Each row is read when a lookup first needs it (by its primary key, through SQLite's index on it) and
    remembered, so a build that asks about a few thousand rows reads a few thousand rows, however large the seed.
    The lookups read a private, read-only copy of the seed taken when the object is made (later writes to
    ``conn`` are not seen, :class:`world_format.seed_copy.SeedCopy`; ``conn`` may be the serialized seed itself),
    so the object may be shared by runtimes.
    """

    def __init__(self, world: World, conn: sqlite3.Connection | bytes | SeedCopy) -> None:
        """``conn``: the seed, as a connection or its serialized bytes (a private copy is made), or a read-only
        copy of it to share (:attr:`world_format.loaded.LoadedWorld.seed_copy`, no copy made)."""
        self._world = world
        self._tables = {table.name: table for table in world.state.tables}
        self.seed = conn if isinstance(conn, SeedCopy) else SeedCopy(conn)
        """The private copy of the seed every lookup reads (shared with other on-demand readers of the seed)."""
        self._keys: dict[Row, Any] = {}
        self._missing: set[Row] = set()
        self._parent: dict[Row, tuple[Row, Any] | None] = {}
        self._root: dict[Row, Row] = {}
        self._values: dict[tuple[str, str], dict[Any, tuple[str, Any]]] = {}
        self._held: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        self._anchored = {(table, column) for tool in world.tools for target in tool.anchors.values()
                          for table, column in [target.split(".")]
                          if table in self._tables and column not in self._tables[table].key_columns}

    def _column_values(self, table: Table, column: str) -> dict[Any, tuple[str, Any]]:
        """Each value of ``column`` to (canonical key, key) of the first row holding it, in the table's scan order
        (read once per column: for a reference or natural key that is no unique column)."""
        found = self._values.get((table.name, column))
        if found is None:
            name = quote_identifier(table.name)
            found = {}
            for value, key in self.seed.rows(f"SELECT {quote_identifier(column)}, {key_expression(table, name)} "
                                          f"FROM {name}"):
                normal = normalize_key(key_from_sql(table, key))
                found.setdefault(value, (canonical_json(normal), normal))
            self._values[(table.name, column)] = found
        return found

    def _unique(self, table: Table, column: str) -> bool:
        """Whether at most one row of ``table`` holds any one value of ``column`` (so an indexed lookup finds it)."""
        declared = next((c for c in table.columns if c.name == column), None)
        if declared is not None and declared.unique:
            return True
        return any(index.unique and index.table == table.name and tuple(index.columns) == (column,)
                   for index in self._world.state.indexes)

    def _row_by(self, table: Table, column: str, value: Any) -> tuple[str, Any] | None:
        """(canonical key, key) of the first row of ``table`` whose ``column`` equals ``value`` (as a Python
        dictionary of the column's values would find it), or None."""
        if not self._unique(table, column):
            return self._column_values(table, column).get(value)
        key = self._row_holding(table, {column: value})
        return None if key is None else (canonical_json(key), key)

    def _known(self, row: Row, key: Any) -> bool:
        """Whether the seed holds row ``row`` (key ``key``, normalised); reads it (and its owner) the first time."""
        if row in self._keys:
            return True
        if row in self._missing:
            return False
        table = self._tables.get(row[0])
        if table is None or not self._read(table, row, key):
            self._missing.add(row)
            return False
        return True

    def _read(self, table: Table, row: Row, key: Any) -> bool:
        """Read row ``row`` by its key: remember its key and its owner's row; False when no row has that key."""
        name = quote_identifier(table.name)
        owner = owning_reference(table)
        parent_select = f", {name}.{quote_identifier(owner.name)}" if owner else ", NULL"
        if isinstance(key, dict) != table.composite or (table.composite and set(key) != set(table.key_columns)):
            return False
        found = [(stored, parent) for stored, parent in
                 self.seed.rows(f"SELECT {key_expression(table, name)}{parent_select} FROM {name} WHERE "
                             f"{key_where(table)}", key_parameters(table, key))
                 if canonical_json(normalize_key(key_from_sql(table, stored))) == row[1]]
        if not found:
            return False
        stored, value = found[-1]
        self._keys[row] = normalize_key(key_from_sql(table, stored))
        self._parent[row] = self._owner_row(owner, value)
        return True

    def _owner_row(self, owner: Column | None, value: Any) -> tuple[Row, Any] | None:
        """The row (and its key) an owning reference's value names, or None (no owner, a null, no such table)."""
        if owner is None or owner.references is None or value is None:
            return None
        parent_table, parent_column = owner.references.split(".")
        target = self._tables.get(parent_table)
        if target is None:
            return None
        if target.key_columns == (parent_column,):
            key = normalize_key(value)
            return (target.name, canonical_json(key)), key
        # a reference to a unique column (or one column of a composite key): the key of the row holding the value
        found = self._row_by(target, parent_column, value)
        return None if found is None else ((target.name, found[0]), found[1])

    def root(self, table: str, key: Any) -> tuple[str, Any]:
        """The root row (table, key) of the entity row ``key`` of ``table`` belongs to (itself when unknown)."""
        normal = normalize_key(key)
        start = (table, canonical_json(normal))
        if not self._known(start, normal):
            return table, normal
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
            return key if self._known((table, canonical_json(key)), key) else None
        if len(columns) > 1:
            return self._row_holding(declared, columns)
        for column, value in columns.items():
            if (table, column) not in self._anchored:
                continue
            found = self._row_by(declared, column, value)
            if found is not None:
                return found[1]
        return None

    def _row_holding(self, table: Table, columns: dict[str, Any]) -> Any:
        """The key of the first row of ``table`` holding every one of ``columns``' values (a unique column's value;
        several columns that name one row together: a booking and a flight, a name and a zip code), compared
        exactly, or None. Remembered per table and values."""
        remembered = (table.name, tuple(sorted(columns.items())))
        if remembered in self._held:
            return self._held[remembered]
        name = quote_identifier(table.name)
        names = sorted(columns)
        wanted = [columns[column] for column in names]
        where = " AND ".join(f"{quote_identifier(column)} = ?" for column in names)
        found = None
        for *values, key in self.seed.rows(f"SELECT {', '.join(quote_identifier(c) for c in names)}, "
                                           f"{key_expression(table, name)} FROM {name} WHERE {where}", tuple(wanted)):
            if values == wanted:
                found = normalize_key(key_from_sql(table, key))
                break
        self._held[remembered] = found
        return found

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
            if parent is None or not self._known(*parent):
                self._root[row] = row
                path.pop()
                break
            row = parent[0]
        root = self._root[row]
        for member in path:
            self._root[member] = root
        return root
