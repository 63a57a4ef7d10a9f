"""The starting state: building the seed database, checking a seed file, and hashing state.

The state hash is canonical and order independent: each row is normalised by type (an
integral float equals its integer, blobs are tagged hex) and hashed as canonical JSON;
a table's digest is the sum of its row hashes modulo 2**256 plus its row count. Because
the digest is a sum, a final state's hash is the seed's digest minus the rows a run
changed plus their new values — verification never rescans the whole database.
"""

from __future__ import annotations

import difflib
import math
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from world_format.canonical import canonical_bytes, sha256_hex
from world_format.errors import WorldFormatError

from .models import Index, State, Table

MODULUS = 1 << 256


def quote_identifier(name: str) -> str:
    """Quote an SQL identifier (names are validated as [A-Za-z_][A-Za-z0-9_]* anyway)."""
    return '"' + name.replace('"', '""') + '"'


ROWID_NAMES = ("rowid", "_rowid_", "oid")
"""SQLite's names for a table's rowid; a column of the same name hides it."""


def rowid_name(table: Table) -> str | None:
    """A name that reads ``table``'s rowid in SQL (one no column takes), or None when its columns take all three."""
    taken = {column.name.casefold() for column in table.columns}
    return next((name for name in ROWID_NAMES if name not in taken), None)


def sql_literal(value: str | int | float | bool) -> str:
    """A declared default as an SQL literal ('text' with quotes doubled, numbers as written, booleans 1/0)."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    return "'" + value.replace("'", "''") + "'"


def check_json_columns(conn: sqlite3.Connection, state: State, source: str) -> None:
    """Every value of a column declared ``json_data`` is valid JSON text (WorldFormatError naming the first row)."""
    for table in state.tables:
        for column in table.columns:
            if not column.json_data:
                continue
            name = quote_identifier(column.name)
            bad = conn.execute(f"SELECT rowid FROM {quote_identifier(table.name)} WHERE {name} IS NOT NULL "
                               f"AND (typeof({name}) <> 'text' OR NOT json_valid({name})) LIMIT 1").fetchone()
            if bad is not None:
                raise WorldFormatError(f"{source}: table {table.name!r} column {column.name!r} is declared "
                                       f"json_data but row {bad[0]} holds no valid JSON text")


def create_table_sql(table: Table) -> str:
    """The CREATE TABLE statement (STRICT) for a declared table."""
    parts = []
    for column in table.columns:
        text = f"{quote_identifier(column.name)} {column.type}"
        if column.primary_key and not table.composite:
            text += " PRIMARY KEY"
        if column.not_null:
            text += " NOT NULL"
        if column.unique:
            text += " UNIQUE"
        if column.default is not None:
            text += f" DEFAULT {sql_literal(column.default)}"
        if column.references:
            ref_table, ref_column = column.references.split(".")
            text += f" REFERENCES {quote_identifier(ref_table)}({quote_identifier(ref_column)})"
        parts.append(text)
    if table.composite:
        parts.append(f"PRIMARY KEY ({', '.join(quote_identifier(column) for column in table.key_columns)})")
    parts += [f"CHECK ({check})" for check in table.checks]
    return f"CREATE TABLE {quote_identifier(table.name)} ({', '.join(parts)}) STRICT"


def create_index_sql(index: Index) -> str:
    """The CREATE INDEX statement of a declared index."""
    columns = ", ".join(quote_identifier(column) for column in index.columns)
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX {quote_identifier(index.name)} ON {quote_identifier(index.table)} ({columns})"


def schema_statements(state: State) -> list[tuple[str, str]]:
    """(where, CREATE statement) of every declared table, index, view and trigger, in creation order."""
    statements = [(f"/state/tables/{i}", create_table_sql(table)) for i, table in enumerate(state.tables)]
    statements += [(f"/state/indexes/{i}", create_index_sql(index)) for i, index in enumerate(state.indexes)]
    statements += [(f"/state/views/{view.name}", view.sql) for view in state.views]
    statements += [(f"/state/triggers/{trigger.name}", trigger.sql) for trigger in state.triggers]
    return statements


def load_order(tables: Sequence[Table]) -> list[Table]:
    """The tables in dependency order: each after the tables it references, else in declaration order.

    A stable topological sort: among the tables whose parents are all loaded, the first declared goes next, so a
    declaration already in dependency order loads as declared. Tables on a cycle of references (and
    self-references) load in declaration order once nothing else can; the foreign-key check after loading
    judges them.
    """
    names = {table.name for table in tables}
    parents = {table.name: {c.references.split(".")[0] for c in table.columns if c.references} & names - {table.name}
               for table in tables}
    ordered: list[Table] = []
    left = list(tables)
    while left:
        done = {table.name for table in ordered}
        ready = next((table for table in left if parents[table.name] <= done), left[0])
        ordered.append(ready)
        left.remove(ready)
    return ordered


def build_seed(state: State, source: str) -> bytes:
    """Create the seed database from inline rows, loaded in dependency order (:func:`load_order`); return it
    serialized. WorldFormatError naming the row for a row SQLite refuses or a reference to a missing row."""
    assert state.rows is not None
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN")
        for index, table in enumerate(state.tables):
            _run_declared(conn, create_table_sql(table), f"{source}: /state/tables/{index}")
        for index, declared in enumerate(state.indexes):
            _run_declared(conn, create_index_sql(declared), f"{source}: /state/indexes/{index}")
        unknown = sorted(set(state.rows) - {table.name for table in state.tables})
        if unknown:
            raise WorldFormatError(f"{source}: /state/rows/{unknown[0]}: rows given for an undeclared table")
        conn.execute("PRAGMA defer_foreign_keys=ON")  # a cycle (or a row naming a later row) is checked below
        positions = {table.name: _insert_rows(conn, table, state.rows.get(table.name, []), source)
                     for table in load_order(state.tables)}
        for view in state.views:
            _run_declared(conn, view.sql, f"{source}: /state/views/{view.name}")
        for trigger in state.triggers:
            _run_declared(conn, trigger.sql, f"{source}: /state/triggers/{trigger.name}")
        check_json_columns(conn, state, source)
        violations = conn.execute("PRAGMA foreign_key_check").fetchall()
        if violations:
            table_name, rowid, parent, _ = violations[0]
            raise WorldFormatError(f"{source}: /state/rows/{table_name}/{positions[table_name][rowid]}: references "
                                   f"a missing {parent} row")
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


def _insert_rows(conn: sqlite3.Connection, table: Table, rows: Sequence[Sequence[Any]], source: str) -> dict[int, int]:
    """Insert the rows; return each row's rowid to its position in ``rows`` (for errors found after loading)."""
    positions: dict[int, int] = {}
    width = len(table.columns)
    placeholders = ", ".join("?" for _ in table.columns)
    statement = f"INSERT INTO {quote_identifier(table.name)} VALUES ({placeholders})"
    for index, row in enumerate(rows):
        where = f"{source}: /state/rows/{table.name}/{index}"
        if len(row) != width:
            raise WorldFormatError(f"{where}: expected {width} values (one per column), got {len(row)}")
        try:
            rowid = conn.execute(statement, [_storable(value, where) for value in row]).lastrowid
        except sqlite3.Error as exc:
            raise WorldFormatError(f"{where}: {exc}") from None
        if rowid is not None:
            positions[rowid] = index
    return positions


def _storable(value: Any, where: str) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise WorldFormatError(f"{where}: integer {value} does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise WorldFormatError(f"{where}: non-finite number")
    return value


_SQL_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\[[^\]]*\]|`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_$]*"
                        r"|\d+(?:\.\d+)?|<>|!=|<=|>=|==|\|\||\S")


def sql_tokens(sql: str, identifiers: frozenset[str] = frozenset()) -> list[str]:
    """SQL as SQLite reads it: whitespace and the quoting of identifiers do not matter, nor does case outside
    string literals.

    A double-quoted token is an identifier only when it names one (``identifiers``, compared
    case-insensitively, as SQLite compares names); otherwise SQLite reads it as a string literal (its
    "double-quoted string" compatibility rule, https://www.sqlite.org/quirks.html#dblquote), so it becomes
    that literal, compared case-sensitively: ``CHECK (tier IN ("gold"))`` is not ``CHECK (tier IN ("GOLD"))``.
    Bracketed and backticked tokens are always identifiers.
    """
    known = {name.upper() for name in identifiers}
    tokens = []
    for token in _SQL_TOKEN.findall(sql or ""):
        if token[0] == '"':
            name = token[1:-1].replace('""', '"')
            token = name.upper() if name.upper() in known else "'" + name.replace("'", "''") + "'"
        elif token[0] in "[`":
            token = token[1:-1].replace("``", "`").upper()
        tokens.append(token if token.startswith("'") else token.upper())
    return tokens


def declared_names(state: State) -> frozenset[str]:
    """Every name the declaration gives: tables, their columns, indexes, views and triggers."""
    names = {table.name for table in state.tables} | {c.name for table in state.tables for c in table.columns}
    names |= {index.name for index in state.indexes} | {view.name for view in state.views}
    return frozenset(names | {trigger.name for trigger in state.triggers})


def _difference(expected: list[str], found: list[str]) -> str:
    """The first place two token lists part, in words (what the seed adds, lacks or changes)."""
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=expected, b=found, autojunk=False).get_opcodes():
        if tag == "insert":
            return f"the seed adds {' '.join(found[j1:j2])!r}"
        if tag == "delete":
            return f"the seed lacks {' '.join(expected[i1:i2])!r}"
        if tag == "replace":
            return f"the seed has {' '.join(found[j1:j2])!r} where the declaration has {' '.join(expected[i1:i2])!r}"
    return "they differ"


def declared_schema(state: State) -> dict[tuple[str, str], str | None]:
    """``sqlite_schema`` as the declaration creates it: (type, name) → CREATE statement (None for SQLite's own
    automatic indexes)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for where, sql in schema_statements(state):
            _run_declared(conn, sql, where)
        return {(kind, name): sql for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_schema")}
    finally:
        conn.close()


def check_seed(conn: sqlite3.Connection, state: State, source: str,
               check_text: Callable[[], object] | None = None, *, rows: bool = True) -> None:
    """Refuse a seed that is corrupt or whose schema is not exactly what the world declares.

    Every table, index, view and trigger must be declared, and each CREATE statement must read as the
    declaration's own (same columns, types, constraints, collations, defaults, STRICT), so two seeds
    that behave differently never pass as the same world. The refusal names the entry and the first
    difference. Then, unless ``rows`` is False (the caller runs them itself, :mod:`world_format.seed_checks`),
    the checks that read every row (:func:`check_seed_rows`, given ``check_text``).
    """
    try:
        result = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        raise WorldFormatError(f"{source}: seed.sqlite is not a valid database: {exc}") from None
    if result != [("ok",)]:
        raise WorldFormatError(f"{source}: seed.sqlite failed quick_check: {result[0][0]}")
    expected, names = declared_schema(state), declared_names(state)
    found = {(kind, name): sql for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_schema")}
    for (kind, name), sql in sorted(found.items()):
        where = f"{source}: seed.sqlite {kind} {name!r}"
        if (sql or "").upper().startswith("CREATE VIRTUAL TABLE"):
            raise WorldFormatError(f"{where}: virtual tables are not allowed")
        if (kind, name) not in expected:
            section = {"table": "/state/tables", "index": "/state/indexes", "view": "/state/views",
                       "trigger": "/state/triggers"}.get(kind)
            hint = f": not declared in {section}" if section else ": the world does not declare it"
            raise WorldFormatError(f"{where}: undeclared {kind}{hint}")
        seed_tokens, declared_tokens = sql_tokens(sql or "", names), sql_tokens(expected[(kind, name)] or "", names)
        if seed_tokens != declared_tokens:
            diff = _difference(declared_tokens, seed_tokens)
            raise WorldFormatError(f"{where}: differs from its declaration: {diff}")
    missing = sorted(set(expected) - set(found))
    if missing:
        kind, name = missing[0]
        raise WorldFormatError(f"{source}: seed.sqlite lacks declared {kind} {name!r}")
    if rows:
        check_seed_rows(conn, state, source, check_text)


def _dangling_sql(child: str, column: str, parent: str, parent_column: str) -> str:
    """A query that returns a row when some non-NULL ``child.column`` names no ``parent.parent_column``."""
    c, p = quote_identifier(column), quote_identifier(parent_column)
    return (f"SELECT 1 FROM {quote_identifier(child)} AS child WHERE child.{c} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {quote_identifier(parent)} AS parent WHERE parent.{p} = child.{c}) LIMIT 1")


def foreign_key_checks(state: State) -> list[str]:
    """Statements that return a row when a declared reference of the seed names no row: one anti-join per
    reference, else ``PRAGMA foreign_key_check(table)``.

    The pragma reads every row of a child table; the anti-join gives its verdict by scanning the child column's
    index (covering: the values alone) where the world declares one, stopping at the first dangling value (less
    than half the pragma's time on a million-row seed). Same verdict: a declared reference is one column naming its
    parent's primary key or a unique column, in STRICT tables whose schema is the declaration's own (checked before
    rows are read), BINARY collation, so a parent matches when its value equals the child's. A table with a
    reference between columns of different declared types is left to the pragma: there ``=`` would convert
    types otherwise than the foreign-key lookup does.
    """
    found: list[str] = []
    for table in state.tables:
        mixed = False
        for column in (c for c in table.columns if c.references):
            parent_name, _, parent_column = (column.references or "").partition(".")
            parent = state.table(parent_name)
            target = None if parent is None else next((c for c in parent.columns if c.name == parent_column), None)
            if target is None or target.type != column.type:
                mixed = True
            else:
                found.append(_dangling_sql(table.name, column.name, parent_name, parent_column))
        if mixed:
            found.append(f"PRAGMA foreign_key_check({quote_identifier(table.name)})")
    return found


def check_foreign_keys(conn: sqlite3.Connection, state: State, source: str) -> None:
    """Every reference of the seed names an existing row (:func:`foreign_key_checks`; ``PRAGMA foreign_key_check``'s
    verdict)."""
    if any(conn.execute(sql).fetchone() for sql in foreign_key_checks(state)):
        raise WorldFormatError(f"{source}: seed.sqlite violates a declared foreign key")


def check_seed_rows(conn: sqlite3.Connection, state: State, source: str,
                    check_text: Callable[[], object] | None = None) -> None:
    """The seed checks that read every row, in this order: foreign keys, UTF-8 text, JSON columns.

    ``check_text`` replaces :func:`check_seed_text` with a pass that also checks every text value (the loader's
    seed digest, :func:`world_format.runtime.text_checked_digests`: one pass instead of two).
    """
    check_foreign_keys(conn, state, source)
    if check_text is None:
        check_seed_text(conn, state, source)
    else:
        check_text()
    check_json_columns(conn, state, source)


def check_seed_text(conn: sqlite3.Connection, state: State, source: str) -> None:
    """Every text value of the seed is valid UTF-8 (WorldFormatError naming table, column and rowid otherwise).

    SQLite stores whatever bytes it is given as TEXT; a value that is not UTF-8 (an encoded lone surrogate,
    a Latin-1 byte) could be neither read back into a tool's observation nor hashed. A seed built from a
    single-file world never holds one: its JSON text is checked when it loads.
    """
    for table in state.tables:
        for column in table.columns:
            name = quote_identifier(column.name)
            rows = conn.execute(f"SELECT rowid, CAST({name} AS BLOB) FROM {quote_identifier(table.name)} "
                                f"WHERE typeof({name}) = 'text'")
            for rowid, data in rows:
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise WorldFormatError(f"{source}: seed.sqlite table {table.name!r} row {rowid} column "
                                           f"{column.name!r}: not UTF-8 text (byte {exc.start}); store text as "
                                           "UTF-8 (an encoded lone surrogate is no character)") from None


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
