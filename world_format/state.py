"""The starting state: building the seed database, checking a seed file, and hashing state.

The state hash is canonical and order independent: each row is normalised by type (an
integral float equals its integer, blobs are tagged hex) and hashed as canonical JSON;
a table's digest is the sum of its row hashes modulo 2**256 plus its row count. Because
the digest is a sum, a final state's hash is the seed's digest minus the rows a run
changed plus their new values — verification never rescans the whole database.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from world_format.canonical import canonical_bytes, sha256_hex
from world_format.errors import WorldFormatError

from .models import State, Table

MODULUS = 1 << 256


def quote_identifier(name: str) -> str:
    """Quote an SQL identifier (names are validated as [A-Za-z_][A-Za-z0-9_]* anyway)."""
    return '"' + name.replace('"', '""') + '"'


def create_table_sql(table: Table) -> str:
    """The CREATE TABLE statement (STRICT) for a declared table."""
    parts = []
    for column in table.columns:
        text = f"{quote_identifier(column.name)} {column.type}"
        if column.primary_key:
            text += " PRIMARY KEY"
        if column.not_null:
            text += " NOT NULL"
        if column.unique:
            text += " UNIQUE"
        if column.references:
            ref_table, ref_column = column.references.split(".")
            text += f" REFERENCES {quote_identifier(ref_table)}({quote_identifier(ref_column)})"
        parts.append(text)
    return f"CREATE TABLE {quote_identifier(table.name)} ({', '.join(parts)}) STRICT"


def build_seed(state: State, source: str) -> bytes:
    """Create the seed database from inline rows; return it serialized."""
    assert state.rows is not None
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN")
        for table in state.tables:
            conn.execute(create_table_sql(table))
        unknown = sorted(set(state.rows) - {table.name for table in state.tables})
        if unknown:
            raise WorldFormatError(f"{source}: /state/rows/{unknown[0]}: rows given for an undeclared table")
        for table in state.tables:
            _insert_rows(conn, table, state.rows.get(table.name, []), source)
        for view in state.views:
            _run_declared(conn, view.sql, f"{source}: /state/views/{view.name}")
        for trigger in state.triggers:
            _run_declared(conn, trigger.sql, f"{source}: /state/triggers/{trigger.name}")
        violations = conn.execute("PRAGMA foreign_key_check").fetchall()
        if violations:
            table_name, rowid, parent, _ = violations[0]
            raise WorldFormatError(f"{source}: /state/rows/{table_name}: row {rowid} references a missing {parent}")
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        return conn.serialize()
    finally:
        conn.close()


def _run_declared(conn: sqlite3.Connection, sql: str, where: str) -> None:
    try:
        conn.execute(sql)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        raise WorldFormatError(f"{where}: {exc}") from None


def _insert_rows(conn: sqlite3.Connection, table: Table, rows: Sequence[Sequence[Any]], source: str) -> None:
    width = len(table.columns)
    placeholders = ", ".join("?" for _ in table.columns)
    statement = f"INSERT INTO {quote_identifier(table.name)} VALUES ({placeholders})"
    for index, row in enumerate(rows):
        where = f"{source}: /state/rows/{table.name}/{index}"
        if len(row) != width:
            raise WorldFormatError(f"{where}: expected {width} values (one per column), got {len(row)}")
        try:
            conn.execute(statement, [_storable(value, where) for value in row])
        except sqlite3.Error as exc:
            raise WorldFormatError(f"{where}: {exc}") from None


def _storable(value: Any, where: str) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise WorldFormatError(f"{where}: integer {value} does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise WorldFormatError(f"{where}: non-finite number")
    return value


def check_seed(conn: sqlite3.Connection, state: State, source: str) -> None:
    """Refuse a seed that is corrupt or holds anything the world does not declare."""
    try:
        result = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        raise WorldFormatError(f"{source}: seed.sqlite is not a valid database: {exc}") from None
    if result != [("ok",)]:
        raise WorldFormatError(f"{source}: seed.sqlite failed quick_check: {result[0][0]}")
    declared_tables = {table.name: table for table in state.tables}
    declared_views = {view.name: view.sql for view in state.views}
    declared_triggers = {trigger.name: trigger.sql for trigger in state.triggers}
    found_tables: set[str] = set()
    entries = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name").fetchall()
    for kind, name, _table_name, sql in entries:
        where = f"{source}: seed.sqlite {kind} {name!r}"
        if kind == "table":
            if (sql or "").upper().startswith("CREATE VIRTUAL TABLE"):
                raise WorldFormatError(f"{where}: virtual tables are not allowed")
            if name not in declared_tables:
                raise WorldFormatError(f"{where}: not declared in /state/tables")
            _check_columns(conn, declared_tables[name], where)
            found_tables.add(name)
        elif kind == "view":
            if declared_views.get(name) != sql:
                raise WorldFormatError(f"{where}: undeclared view (declare it in /state/views)")
        elif kind == "trigger":
            if declared_triggers.get(name) != sql:
                raise WorldFormatError(f"{where}: undeclared trigger (declare it in /state/triggers)")
        elif kind != "index":
            raise WorldFormatError(f"{where}: unexpected schema entry")
    missing = sorted(set(declared_tables) - found_tables)
    if missing:
        raise WorldFormatError(f"{source}: seed.sqlite lacks declared table {missing[0]!r} (/state/tables)")
    if conn.execute("PRAGMA foreign_key_check").fetchone():
        raise WorldFormatError(f"{source}: seed.sqlite violates a declared foreign key")


def _check_columns(conn: sqlite3.Connection, table: Table, where: str) -> None:
    info = conn.execute(f"PRAGMA table_info({quote_identifier(table.name)})").fetchall()
    found = [(row[1], str(row[2]).upper(), bool(row[5])) for row in info]
    wanted = [(column.name, column.type, column.primary_key) for column in table.columns]
    if found != wanted:
        raise WorldFormatError(f"{where}: columns {found} differ from the declaration {wanted}")


# --------------------------------------------------------------------------- hashing


def normalize_value(value: Any) -> Any:
    """Typed normalization: integral floats become ints, blobs become tagged hex, bools ints."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$blob": bytes(value).hex()}
    return value


@dataclass(frozen=True)
class TableDigest:
    """Order-independent digest of one table: row count and sum of row hashes."""

    rows: int
    total: int

    def apply(self, removed: Iterable[int], added: Iterable[int]) -> TableDigest:
        """The digest after removing and adding the given row hashes."""
        removed, added = list(removed), list(added)
        total = (self.total - sum(removed) + sum(added)) % MODULUS
        return TableDigest(self.rows - len(removed) + len(added), total)


def state_hash(digests: Mapping[str, TableDigest]) -> str:
    """The state hash from table digests."""
    summary = {name: [digest.rows, format(digest.total, "064x")] for name, digest in digests.items()}
    return sha256_hex(canonical_bytes(summary))
