"""Isolated episodes over a world's state, with change capture and incremental hashing.

One :class:`WorldRuntime` reads the seed in memory twice: a working copy that episodes
change inside a savepoint (rolled back when the episode ends) and a pristine copy for
"before" values (its own, or a read-only copy shared by the runtimes of one loaded world,
:attr:`world_format.loaded.LoadedWorld.seed_copy`). blobkit's own temp triggers log the primary key of every row a tool
touches, so an episode's diff and its state hash cost O(rows changed), not O(database).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from world_format.canonical import canonical_json
from world_format.errors import ToolCallError, WorldFormatError

from .executor import CompiledTool, compile_tool, execute_tool
from .keys import key_expression, key_from_sql, key_parameters, key_where, normalize_key
from .models import State, Table, World
from .seed_copy import SeedCopy
from .sqlguard import CHANGE_LOG_TABLE, TRIGGER_PREFIX, Guard, open_memory_copy
from .state import MODULUS, TableDigest, check_seed_text, normalize_value, quote_identifier, rowid_name, state_hash


def _value_sql(name: str, declared: str, strict: bool) -> str:
    """SQL rendering one column value canonically (integral reals as integers, blobs as hex).

    In a STRICT table a column only ever holds its declared type (or NULL), so INTEGER and
    TEXT columns need no CASE at all and REAL columns only the integral test; the text is
    the same as the general form's, about twice as fast to compute over a large table.
    """
    if strict and declared in ("INTEGER", "TEXT"):
        return name
    if strict and declared == "REAL":
        return f"CASE WHEN {name}=CAST({name} AS INTEGER) THEN CAST({name} AS INTEGER) ELSE {name} END"
    return (f"CASE WHEN typeof({name})='real' AND {name}=CAST({name} AS INTEGER) THEN CAST({name} AS INTEGER) "
            f"WHEN typeof({name})='blob' THEN json_object('$blob', lower(hex({name}))) ELSE {name} END")


def _row_text_sql(table: Table, strict: bool = False) -> str:
    """SQL that renders a row as canonical JSON text (integral reals as integers, blobs as hex)."""
    parts = [_value_sql(quote_identifier(column.name), column.type, strict) for column in table.columns]
    return f"json_array({', '.join(parts)})"


def _digest_text(table: str, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{table}\x00{text}".encode()).digest(), "big")


def strict_tables(conn: sqlite3.Connection) -> frozenset[str]:
    """Names of the STRICT tables of ``conn``'s main database (needs an unguarded connection)."""
    rows = conn.execute("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND strict")
    return frozenset(name for (name,) in rows)


DIGEST_BATCH_ROWS = 4096
"""Rows :func:`_table_digest` renders per statement step (one text of them all, joined by newlines)."""
_LAST_ROWID = (1 << 63) - 1


def _table_digest(conn: sqlite3.Connection, table: Table, strict: bool, check_text: bool = False) -> TableDigest:
    """One table's digest by one scan; the per-row work stays in C as far as possible.

    SQLite renders :data:`DIGEST_BATCH_ROWS` rows at a time into one text, their canonical JSON joined by newlines
    (JSON text escapes every control character, so no row's rendering holds one), taken by rowid ranges: one
    statement step, with the GIL released, per batch instead of per row, so a scan on a thread beside a busy one
    does not hand the GIL back and forth a million times. Each row's UTF-8 bytes are what is hashed, so no row is
    decoded and encoded again. ``check_text``: each batch is decoded once, so text that is not UTF-8 raises
    UnicodeDecodeError. A table whose columns take every name of its rowid is read row by row (the same digest).
    """
    rowid = rowid_name(table)
    if rowid is None:
        return _table_digest_by_row(conn, table, strict, check_text)
    prefix = f"{table.name}\x00".encode()
    sha256, from_bytes = hashlib.sha256, int.from_bytes
    sql = (f"SELECT CAST(group_concat(text, char(10)) AS BLOB), count(*), max(at) FROM "
           f"(SELECT {rowid} AS at, {_row_text_sql(table, strict)} AS text FROM {quote_identifier(table.name)} "
           f"WHERE {rowid} >= ? ORDER BY {rowid} LIMIT {DIGEST_BATCH_ROWS})")
    total, count, start = 0, 0, -(1 << 63)
    while True:
        joined, rows, last = conn.execute(sql, (start,)).fetchone()
        if not rows:
            break
        if check_text:
            joined.decode("utf-8")
        texts = joined.split(b"\n")
        if len(texts) != rows:  # pragma: no cover - a rendering never holds a newline (JSON escapes it)
            raise AssertionError(f"{table.name}: {rows} rows rendered as {len(texts)} lines")
        count += rows
        total += sum(from_bytes(sha256(prefix + text).digest(), "big") for text in texts)
        if last == _LAST_ROWID:
            break
        start = last + 1
    return TableDigest(count, total % MODULUS)


def _table_digest_by_row(conn: sqlite3.Connection, table: Table, strict: bool, check_text: bool) -> TableDigest:
    """:func:`_table_digest` one row per statement step (for a table with no free name for its rowid)."""
    prefix = f"{table.name}\x00".encode()
    sha256, from_bytes = hashlib.sha256, int.from_bytes
    cursor = conn.execute(f"SELECT CAST({_row_text_sql(table, strict)} AS BLOB) FROM {quote_identifier(table.name)}")
    total, count = 0, 0
    while rows := cursor.fetchmany(4096):
        count += len(rows)
        if check_text:
            b"\n".join(text for (text,) in rows).decode("utf-8")
        total += sum(from_bytes(sha256(prefix + text).digest(), "big") for (text,) in rows)
    return TableDigest(count, total % MODULUS)


def scan_digests(conn: sqlite3.Connection, tables: Sequence[Table],
                 strict: Collection[str] = frozenset(), check_text: bool = False) -> dict[str, TableDigest]:
    """Digest every table by one scan each (order independent).

    ``strict`` names the tables known to be STRICT (see :func:`strict_tables`); any other
    table is rendered with the general, type-testing SQL. Both give the same digests.
    ``check_text``: UnicodeDecodeError for text that is not UTF-8 (:func:`text_checked_digests`).
    """
    return {table.name: _table_digest(conn, table, table.name in strict, check_text) for table in tables}


def text_checked_digests(conn: sqlite3.Connection, state: State, source: str) -> dict[str, TableDigest]:
    """:func:`scan_digests` of every table of ``conn`` (an unguarded copy of a seed), which also checks that every
    text value is UTF-8: each batch of rendered rows is decoded once, and a value that is not UTF-8 fails the
    decode. WorldFormatError naming the table, row and column (:func:`world_format.state.check_seed_text`)."""
    try:
        return scan_digests(conn, state.tables, strict_tables(conn), check_text=True)
    except UnicodeDecodeError as exc:
        check_seed_text(conn, state, source)
        raise WorldFormatError(f"{source}: seed.sqlite holds text that is not UTF-8 ({exc})") from None


class DigestCache:
    """The seed's table digests, computed by the first runtime that needs them, then shared.

    One loaded world hands the same cache to every runtime it creates, so the full scan
    of the seed happens once per load, however many runtimes, episodes and probes follow.
    """

    def __init__(self, value: dict[str, TableDigest] | None = None,
                 pending: Callable[[], dict[str, TableDigest]] | None = None) -> None:
        self.value: dict[str, TableDigest] | None = value
        self.scans = 0 if value is None else 1
        self._pending = pending
        """Waits for digests being computed elsewhere (:class:`world_format.seed_checks.SeedChecks`)."""

    def ready(self) -> dict[str, TableDigest] | None:
        """The digests when known or being computed elsewhere (waiting for them then), else None."""
        if self.value is None and self._pending is not None:
            self.value, self._pending = self._pending(), None
            self.scans += 1
        return self.value

    def get(self, conn: sqlite3.Connection, tables: Sequence[Table], strict: Collection[str]) -> dict[str, TableDigest]:
        """The digests, scanning ``conn`` (a pristine copy of the seed) only the first time."""
        if self.ready() is None:
            self.value = scan_digests(conn, tables, strict)
            self.scans += 1
        assert self.value is not None
        return self.value


@dataclass(frozen=True)
class ToolEvent:
    """One call in a trace: what was asked and what the world answered."""

    tool: str
    arguments: Any
    observation: Any
    error: bool
    effect: str | None = None
    """The tool's declared effect ("read" or "write"), or None for a tool the world does not have."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"tool": self.tool, "arguments": self.arguments, "observation": self.observation, "error": self.error}


@dataclass(frozen=True)
class Said:
    """Something the agent told the customer in an episode, besides its final answer."""

    position: int
    """How many calls the trace held when it was said."""
    text: str
    """What the agent wrote."""
    kind: Literal["ask", "remark"]
    """ask: a turn without tool calls that the customer answered; remark: text beside tool calls."""
    accepted: bool = True
    """ask: whether the customer took it as the question their scripted reply answers (else they replied that
    the question was unclear)."""
    problem: str = ""
    """ask, not accepted: why the question was not what the customer's reply answers."""
    reply: str = ""
    """ask: what the customer replied."""


@dataclass(frozen=True)
class FieldValues:
    """The values a column holds, as answer text: for finding which of them an answer states."""

    by_first_token: dict[str, tuple[str, ...]]
    """Each value's normalized text (see :func:`world_format.values.normalize_text`), keyed by its first token."""

    @classmethod
    def of(cls, values: Iterable[Any]) -> FieldValues:
        """Index the given values (their text, normalized)."""
        from .values import normalize_text

        index: dict[str, set[str]] = {}
        for value in values:
            text = normalize_text(str(normalize_value(value)))
            if text:
                index.setdefault(text.split(" ", 1)[0], set()).add(text)
        return cls({token: tuple(sorted(texts)) for token, texts in index.items()})

    def stated_in(self, normalized_answer: str) -> list[str]:
        """The values that occur in an already-normalized answer as whole tokens (sorted, each once)."""
        padded = f" {normalized_answer} "
        found = {text for token in set(normalized_answer.split()) for text in self.by_first_token.get(token, ())
                 if f" {text} " in padded}
        return sorted(found)

    def every(self) -> list[str]:
        """Every value's normalized text, sorted."""
        return sorted(text for texts in self.by_first_token.values() for text in texts)


@dataclass(frozen=True)
class RowChange:
    """A row that differs between the starting and the current state."""

    table: str
    key: Any
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class WorldRuntime:
    """Executes tools of one world against isolated episodes of its seed state."""

    def __init__(self, world: World, seed: bytes, *, timeout_s: float = 2.0,
                 digests: DigestCache | None = None, memo: dict[str, Any] | None = None,
                 pristine: SeedCopy | None = None, working: sqlite3.Connection | None = None) -> None:
        """``pristine``: a shared read-only copy of the same ``seed`` to read the starting state from (the runtime
        neither changes nor closes it); without it the runtime makes a private one. ``working``: a connection from
        :func:`world_format.sqlguard.open_memory_copy` of ``seed``, never written and no longer used by anyone else,
        to take as the working copy (the runtime owns and closes it); without it the runtime makes one."""
        self.world = world
        self.tables = {table.name: table for table in world.state.tables}
        self.conn = open_memory_copy(seed) if working is None else working
        self._owns_pristine = pristine is None
        if pristine is None:
            self.pristine = open_memory_copy(seed)
            self.pristine.execute("PRAGMA query_only=ON")
        else:
            self.pristine = pristine.connection
        self.conn.execute("PRAGMA recursive_triggers=ON")
        self.strict = strict_tables(self.pristine)
        self._install_change_log()
        self.guard = Guard(self.conn, set(self.tables), timeout_s=timeout_s)
        json_columns = frozenset(c.name for table in world.state.tables for c in table.columns if c.json_data)
        self.tools: dict[str, CompiledTool] = {tool.name: compile_tool(tool, json_columns) for tool in world.tools}
        self.digests = DigestCache() if digests is None else digests
        self.memo: dict[str, Any] = {} if memo is None else memo
        """Objects derived from the world and its seed alone (entity roots, the procedure checker), computed once
        by whichever module needs them and shared with every fork: they must hold no connection."""
        self._in_episode = False
        self._fields: dict[tuple[str, str], FieldValues] = {}

    def _install_change_log(self) -> None:
        self.conn.execute(f"CREATE TEMP TABLE {CHANGE_LOG_TABLE}(tbl TEXT NOT NULL, pk)")
        for table in self.tables.values():
            name, literal = quote_identifier(table.name), "'" + table.name + "'"
            for event, keys in (("INSERT", ["NEW"]), ("UPDATE", ["OLD", "NEW"]), ("DELETE", ["OLD"])):
                inserts = " ".join(f"INSERT INTO {CHANGE_LOG_TABLE} VALUES ({literal}, {key_expression(table, k)});"
                                   for k in keys)
                trigger = quote_identifier(f"{TRIGGER_PREFIX}{table.name}_{event.lower()}")
                self.conn.execute(f"CREATE TEMP TRIGGER {trigger} AFTER {event} ON main.{name} BEGIN {inserts} END")

    @property
    def seed_digests(self) -> dict[str, TableDigest]:
        """Digests of the seed state (one scan of the pristine copy, shared through :attr:`digests`)."""
        return self.digests.get(self.pristine, list(self.tables.values()), self.strict)

    @property
    def seed_hash(self) -> str:
        """State hash of the seed."""
        return state_hash(self.seed_digests)

    def field_values(self, table: str, column: str) -> FieldValues:
        """The distinct non-null values of ``table.column`` in the starting state (read once, then cached)."""
        key = (table, column)
        if key not in self._fields:
            declared = self.tables.get(table)
            if declared is None or column not in {c.name for c in declared.columns}:
                raise WorldFormatError(f"{table}.{column} is not a declared column")
            rows = self.pristine.execute(f"SELECT DISTINCT {quote_identifier(column)} FROM {quote_identifier(table)} "
                                         f"WHERE {quote_identifier(column)} IS NOT NULL")
            self._fields[key] = FieldValues.of(value for (value,) in rows)
        return self._fields[key]

    def starting_rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Every row of one read-only statement over the starting state (a list of tuples): read on the working copy
        when no episode is open (it then holds the starting state, and no other thread reads it), else on the
        pristine copy (which the seed's background checks may be reading meanwhile)."""
        if self._in_episode:
            return self.pristine.execute(sql, params).fetchall()
        with self.guard.host() as conn:
            return conn.execute(sql, params).fetchall()

    @contextmanager
    def episode(self) -> Iterator[Episode]:
        """An isolated episode: every change is rolled back when the block ends."""
        if self._in_episode:
            raise RuntimeError("episodes of one runtime cannot nest")
        self._in_episode = True
        with self.guard.host() as conn:
            conn.execute("SAVEPOINT bk_episode")
        try:
            yield Episode(self)
        finally:
            with self.guard.host() as conn:
                conn.execute("ROLLBACK TO bk_episode")
                conn.execute("RELEASE bk_episode")
            self._in_episode = False

    def fork(self) -> WorldRuntime:
        """Another runtime on the same seed, with its own connections (sharing the seed digests and the time budget).

        Episodes of one runtime cannot overlap; episodes run side by side (a batch of cases decoded together)
        each take a fork.
        """
        return WorldRuntime(self.world, self.pristine.serialize(), timeout_s=self.guard.timeout_s,
                            digests=self.digests, memo=self.memo)

    def close(self) -> None:
        """Close the runtime's connections (the pristine copy only when it is the runtime's own)."""
        self.conn.close()
        if self._owns_pristine:
            self.pristine.close()


@dataclass
class Episode:
    """The state of one isolated run: its trace and access to its current state."""

    runtime: WorldRuntime
    trace: list[ToolEvent] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    """For each scripted user turn delivered so far, how many calls the trace held when it came."""
    said: list[Said] = field(default_factory=list)
    """What the agent told the customer so far besides its final answer, in order (:class:`Said`)."""

    def deliver_turn(self) -> int:
        """Record that the next scripted user turn reached the agent now; return its index."""
        self.turns.append(len(self.trace))
        return len(self.turns) - 1

    def say(self, text: str, kind: Literal["ask", "remark"], accepted: bool = True, problem: str = "",
            reply: str = "") -> None:
        """Record what the agent told the customer (a question the customer answered, or text beside calls)."""
        self.said.append(Said(len(self.trace), text, kind, accepted, problem, reply))

    def call(self, tool: str, arguments: Any) -> ToolEvent:
        """Execute one tool call; errors become error observations, never exceptions."""
        compiled = self.runtime.tools.get(tool) if isinstance(tool, str) else None
        if compiled is None:
            event = ToolEvent(str(tool), arguments, {"error": f"unknown tool {tool!r}"}, True)
        else:
            try:
                observation = execute_tool(self.runtime.guard, compiled, arguments)
                event = ToolEvent(tool, arguments, observation, False, compiled.tool.effect)
            except ToolCallError as exc:
                event = ToolEvent(tool, arguments, {"error": str(exc)}, True, compiled.tool.effect)
        self.trace.append(event)
        return event

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a verifier's read-only query on the current state."""
        with self.runtime.guard.world("read") as conn:
            cursor = conn.execute(sql, {key: normalize_value(value) for key, value in params.items()})
            if cursor.description is None:
                raise WorldFormatError("a verifier query must return rows")
            return [tuple(normalize_value(value) for value in row) for row in cursor.fetchmany(1000)]

    def _changed_keys(self) -> list[tuple[str, Any]]:
        with self.runtime.guard.host() as conn:
            rows = conn.execute(f"SELECT DISTINCT tbl, pk FROM temp.{CHANGE_LOG_TABLE}").fetchall()
        keys = [(table, key_from_sql(self.runtime.tables[table], key)) for table, key in rows]
        return sorted(keys, key=lambda item: (item[0], canonical_json(normalize_key(item[1]))))

    def _row(self, conn: sqlite3.Connection, table: Table, key: Any, as_text: bool) -> Any:
        select = _row_text_sql(table, table.name in self.runtime.strict) if as_text else "*"
        sql = f"SELECT {select} FROM {quote_identifier(table.name)} WHERE {key_where(table)}"
        cursor = conn.execute(sql, key_parameters(table, key))
        row = cursor.fetchone()
        if row is None or as_text:
            return None if row is None else row[0]
        return {column[0]: normalize_value(value) for column, value in zip(cursor.description, row, strict=True)}

    def changes(self) -> list[RowChange]:
        """Rows that differ from the seed, sorted by table and key."""
        result = []
        with self.runtime.guard.host() as conn:
            for table_name, key in self._changed_keys():
                table = self.runtime.tables[table_name]
                before = self._row(self.runtime.pristine, table, key, as_text=False)
                after = self._row(conn, table, key, as_text=False)
                if before != after:
                    result.append(RowChange(table_name, normalize_key(key), before, after))
        return result

    def state_hash(self) -> str:
        """State hash of the current state, computed from the seed digest and the changed rows."""
        digests = dict(self.runtime.seed_digests)
        with self.runtime.guard.host() as conn:
            for table_name, key in self._changed_keys():
                table = self.runtime.tables[table_name]
                before = self._row(self.runtime.pristine, table, key, as_text=True)
                after = self._row(conn, table, key, as_text=True)
                removed = [] if before is None else [_digest_text(table_name, before)]
                added = [] if after is None else [_digest_text(table_name, after)]
                digests[table_name] = digests[table_name].apply(removed, added)
        return state_hash(digests)


def full_state_hash(conn: sqlite3.Connection, tables: Sequence[Table]) -> str:
    """Hash a database by scanning every table (cross-checks the incremental hash)."""
    return state_hash(scan_digests(conn, tables))
