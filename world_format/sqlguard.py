"""Hardened SQLite connections: limits, an authorizer and a deadline (a watchdog thread interrupts late SQL).

World SQL (tool statements, preconditions, verifier queries) only ever runs through a
connection prepared here. The authorizer denies ATTACH/DETACH, PRAGMA, transaction and
savepoint control, schema changes, extension loading and, in read mode, every write.
Host code (blobkit itself) switches the guard off with :meth:`Guard.host` for its own
bookkeeping statements.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from world_format.errors import WorldFormatError

Mode = Literal["read", "write"]

CHANGE_LOG_TABLE = "bk_changes"
TRIGGER_PREFIX = "bk_chg_"

LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: 1_000_000,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 256,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 16,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 16,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 200,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 128,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 8,
}

_ALWAYS_DENIED = {
    sqlite3.SQLITE_ATTACH,
    sqlite3.SQLITE_DETACH,
    sqlite3.SQLITE_PRAGMA,
    sqlite3.SQLITE_TRANSACTION,
    sqlite3.SQLITE_SAVEPOINT,
    sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_REINDEX,
    sqlite3.SQLITE_ANALYZE,
    sqlite3.SQLITE_CREATE_INDEX,
    sqlite3.SQLITE_CREATE_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_INDEX,
    sqlite3.SQLITE_CREATE_TEMP_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
    sqlite3.SQLITE_CREATE_TEMP_VIEW,
    sqlite3.SQLITE_CREATE_TRIGGER,
    sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_CREATE_VTABLE,
    sqlite3.SQLITE_DROP_INDEX,
    sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_INDEX,
    sqlite3.SQLITE_DROP_TEMP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_TRIGGER,
    sqlite3.SQLITE_DROP_TEMP_VIEW,
    sqlite3.SQLITE_DROP_TRIGGER,
    sqlite3.SQLITE_DROP_VIEW,
    sqlite3.SQLITE_DROP_VTABLE,
}
_WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
_SCHEMA_TABLES = {"sqlite_master", "sqlite_schema"}
_DENIED_FUNCTIONS = {"load_extension", "random", "randomblob", "sqlite_offset", "fts3_tokenizer"}
_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
_OTHER_PARAMETER = re.compile(r"(?<![\w])(\?\d*|[@$][A-Za-z_][A-Za-z0-9_]*)")
LITERALS_AND_COMMENTS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)
"""SQL string literals, quoted identifiers and comments: the spans where a word or a parameter is not SQL's own."""


def named_parameters(sql: str) -> list[str]:
    """The ``:name`` parameters of ``sql`` in first-use order (string literals and comments ignored)."""
    stripped = LITERALS_AND_COMMENTS.sub(" ", sql)
    if _OTHER_PARAMETER.search(stripped):
        raise ValueError("only :name parameters are allowed (no ?, ?NNN, @name or $name)")
    seen: list[str] = []
    for name in _NAMED_PARAMETER.findall(stripped):
        if name not in seen:
            seen.append(name)
    return seen


class _Watchdog:
    """One thread that interrupts each connection whose world SQL runs past its deadline.

    SQLite's progress handler would call back into Python (and so wait for the GIL) every few thousand
    virtual-machine steps; beside a busy Python thread every callback waits up to the interpreter's switch
    interval and a long query crawls. Instead this thread sleeps until the earliest deadline and calls
    ``sqlite3_interrupt`` (thread-safe) on a connection still inside its :meth:`Guard.world` block then; the
    statement fails with "interrupted", as a progress handler's refusal makes it fail.
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread (nor a usable lock): a fresh one
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Condition()
        self._deadlines: dict[int, tuple[float, sqlite3.Connection]] = {}
        self._wake = float("inf")
        self._thread: threading.Thread | None = None

    def arm(self, token: int, deadline: float, conn: sqlite3.Connection) -> None:
        """Interrupt ``conn`` at ``deadline`` (monotonic seconds) unless :meth:`disarm` comes first."""
        with self._lock:
            self._deadlines[token] = (deadline, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="blobkit-sql-watchdog", daemon=True)
                self._thread.start()
            if deadline < self._wake:
                self._lock.notify()

    def disarm(self, token: int) -> None:
        """Forget ``token``'s deadline (its world SQL is over)."""
        with self._lock:
            self._deadlines.pop(token, None)

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for token, (deadline, conn) in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[token]
                        with contextlib.suppress(sqlite3.ProgrammingError):  # closed in its world block: idle
                            conn.interrupt()
                self._wake = min((deadline for deadline, _ in self._deadlines.values()), default=float("inf"))
                self._lock.wait(None if self._wake == float("inf") else self._wake - now)


_WATCHDOG = _Watchdog()


class Guard:
    """Owns a connection's authorizer and time budget.

    ``mode`` decides what world SQL may do; :meth:`host` lifts every restriction for the
    duration of a ``with`` block so blobkit can run its own savepoints and bookkeeping.
    """

    def __init__(self, conn: sqlite3.Connection, tables: set[str], timeout_s: float = 2.0) -> None:
        self.conn = conn
        self.tables = tables
        self.timeout_s = timeout_s
        self.mode: Mode = "read"
        self._deadline = float("inf")
        self._host_depth = 0
        for limit, value in LIMITS.items():
            conn.setlimit(limit, value)
        conn.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if self._host_depth:
            return sqlite3.SQLITE_OK
        if source and source.startswith(TRIGGER_PREFIX):
            # blobkit's own temp triggers record changed keys into the temp change log.
            # A composite key is logged as json_object(...), hence the one function they may call.
            ok = action == sqlite3.SQLITE_INSERT and arg1 == CHANGE_LOG_TABLE and db == "temp"
            ok = ok or action == sqlite3.SQLITE_READ or (action == sqlite3.SQLITE_FUNCTION and arg2 == "json_object")
            return sqlite3.SQLITE_OK if ok else sqlite3.SQLITE_DENY
        if action in _ALWAYS_DENIED:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_READ and db == "temp":
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES and db == "main":
            # SQLite registers an eponymous virtual table (json_each, json_tree) on first use as an "update" of
            # its schema table; a statement cannot write that table itself (PRAGMA writable_schema is denied).
            return sqlite3.SQLITE_OK
        if action in _WRITES and (self.mode != "write" or db != "main" or arg1 not in self.tables):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    @contextmanager
    def host(self) -> Iterator[sqlite3.Connection]:
        """Run blobkit's own statements with no restrictions."""
        self._host_depth += 1
        try:
            yield self.conn
        finally:
            self._host_depth -= 1

    @contextmanager
    def world(self, mode: Mode, timeout_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """Run world-supplied SQL under ``mode`` with a deadline."""
        previous_mode, previous_deadline = self.mode, self._deadline
        self.mode = mode
        self._deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        _WATCHDOG.arm(id(self), self._deadline, self.conn)
        try:
            yield self.conn
        finally:
            self.mode, self._deadline = previous_mode, previous_deadline
            if previous_deadline == float("inf"):
                _WATCHDOG.disarm(id(self))
            else:
                _WATCHDOG.arm(id(self), previous_deadline, self.conn)


def open_memory_copy(seed: bytes) -> sqlite3.Connection:
    """A private in-memory connection holding a copy of the serialized database ``seed``."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.deserialize(seed)
    conn.execute("PRAGMA trusted_schema=OFF")
    conn.execute("PRAGMA foreign_keys=ON")
    try:  # the schema is parsed now, under trusted_schema=OFF, so a schema SQLite will not trust fails here, typed
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise WorldFormatError(f"the seed's schema cannot be opened safely ({exc}): CHECK constraints, defaults, "
                               "views and triggers may only use functions SQLite marks innocuous (safe in a "
                               f"schema) on SQLite {sqlite3.sqlite_version}") from None
    return conn
