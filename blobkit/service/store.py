"""The service store: one SQLite database (WAL, synchronous=FULL, named migrations) plus content-addressed blobs.

Layout of a store directory::

    DIR/service.sqlite     workspaces, API keys (salted hashes only), environments, training jobs, attempts
    DIR/blobs/ab/<sha256>  worlds, kits, uploaded evidence and exports (:mod:`.blobs`)

Each thread gets its own connection (the ASGI server runs sync routes in a thread pool). Writes take
``BEGIN IMMEDIATE`` so one writer at a time decides (a claim race has one winner); readers read a
consistent snapshot while a writer writes (WAL). Every statement binds its values. JSON cells are read
through :meth:`ServiceStore.cell`, which names the table, row and column of a damaged one.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from blobkit.cells import json_cell
from blobkit.errors import AuthError, JobError

from . import keys
from .blobs import BlobStore
from .migrations import migrate
from .records import Principal

DB_FILE = "service.sqlite"
BLOBS_DIR = "blobs"
WORKSPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def check_workspace(name: str) -> str:
    """A workspace name: 1-64 of lowercase letters, digits, ``-`` and ``_``."""
    if not 1 <= len(name) <= 64 or not set(name) <= WORKSPACE_CHARS:
        raise JobError(f"workspace {name!r}: use 1-64 lowercase letters, digits, '-' or '_'")
    return name


class ServiceStore:
    """A service store directory; safe to share between threads (one connection per thread)."""

    def __init__(self, root: Path, *, create: bool = True) -> None:
        self.root = Path(root).resolve()
        self.db = self.root / DB_FILE
        if not self.db.is_file():
            if not create:
                raise JobError(f"{self.root}: no service store here ({DB_FILE} is missing); create one with "
                               f"blobkit serve keys create --store {self.root} --workspace NAME")
            self.root.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.root / BLOBS_DIR)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self.write() as conn:
            migrate(conn, self.root)

    # ------------------------------------------------------------------ connections and transactions

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.db, timeout=30.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA busy_timeout = 30000")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute("PRAGMA foreign_keys = ON")
            except sqlite3.DatabaseError as exc:
                raise JobError(f"{self.db}: not a usable service store: {exc}") from None
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> ServiceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: one writer at a time, no upgrade deadlocks)."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise JobError(f"{self.db}: not a usable service store: {exc}") from None
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot across tables."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    @staticmethod
    def cell(text: str | None, where: str, field: str) -> Any:
        """A JSON cell's value; StoreCorruptError naming ``where`` (the row) and ``field`` when it is damaged."""
        return json_cell(text, where, field, "the other records are unaffected")

    def migrations(self) -> list[str]:
        """The names of the applied migrations, in the order they were applied."""
        with self.read() as conn:
            return [name for (name,) in conn.execute("SELECT name FROM schema_migrations ORDER BY applied_at, name")]

    # ------------------------------------------------------------------ workspaces and keys

    def ensure_workspace(self, conn: sqlite3.Connection, workspace: str) -> None:
        """Create ``workspace`` if it does not exist (inside the caller's write transaction)."""
        conn.execute("INSERT OR IGNORE INTO workspaces (name, created_at) VALUES (?, ?)",
                     (check_workspace(workspace), time.time()))

    def create_key(self, workspace: str, role: str = "user", worker_id: str | None = None) -> str:
        """A new API key of ``workspace`` (created if new); returns the key, which the store never holds."""
        made = keys.new_key()
        with self.write() as conn:
            self.ensure_workspace(conn, workspace)
            conn.execute("INSERT INTO api_keys (id, workspace, role, worker_id, salt, digest, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (made.key_id, workspace, role, worker_id, made.salt, made.digest, time.time()))
        return made.key

    def resolve_key(self, key: str | None) -> Principal:
        """The principal an ``X-API-Key`` value stands for; AuthError when missing, malformed, unknown or revoked."""
        if not key:
            raise AuthError("missing X-API-Key header; create a key with blobkit serve keys create --store DIR "
                            "--workspace NAME")
        parts = keys.split_key(key)
        if parts is None:
            raise AuthError("X-API-Key is not a blobkit key (tml- followed by 64 hex digits)")
        key_id, secret = parts
        row = self.conn.execute("SELECT workspace, role, worker_id, salt, digest, revoked_at FROM api_keys "
                                "WHERE id = ?", (key_id,)).fetchone()
        if row is None or row[5] is not None or not keys.matches(row[3], row[4], secret):
            raise AuthError("X-API-Key is not valid (unknown or revoked key)")
        return Principal(workspace=row[0], key_id=key_id, role=row[1], worker_id=row[2])

    def revoke_keys(self, worker_id: str) -> None:
        """Revoke every key of one worker."""
        with self.write() as conn:
            conn.execute("UPDATE api_keys SET revoked_at = ? WHERE worker_id = ? AND revoked_at IS NULL",
                         (time.time(), worker_id))
