"""A private, read-only copy of a seed for lookups shared between runtimes.

Objects derived from a world and its seed (entity roots, the natural keys a procedure check looks for) are made
once and shared by every fork of a runtime, so they may hold no connection a runtime owns and closes. When they
read the seed on demand rather than all at once, they read this copy, taken when they are made.

A loaded world makes one such copy of its seed (:attr:`world_format.loaded.LoadedWorld.seed_copy`) and shares it:
its runtimes read their pristine state from it and the build's entity lookups read it, instead of each holding a
copy of its own (one in-memory copy of a large seed costs about a second of page faults).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from .sqlguard import open_memory_copy


class SeedCopies:
    """The in-memory copies of one loaded seed that are shared or handed over rather than made again.

    * :meth:`shared`: one read-only :class:`SeedCopy`, made by whoever asks first (from any thread) and kept;
    * :meth:`take_spare`: a connection already holding an unchanged copy of the seed (the loader's, once its checks
      no longer read it), handed to the first caller and then forgotten: the first runtime's working copy.
    """

    def __init__(self, spare: sqlite3.Connection | None = None) -> None:
        self._lock = threading.Lock()
        self._shared: SeedCopy | None = None
        self._spare = spare

    def shared(self, seed: bytes) -> SeedCopy:
        """The shared read-only copy of ``seed`` (the same bytes every call), made on the first call."""
        with self._lock:
            if self._shared is None:
                self._shared = SeedCopy(seed)
            return self._shared

    def take_spare(self) -> sqlite3.Connection | None:
        """The spare connection, once (the caller owns it from then on), else None."""
        with self._lock:
            spare, self._spare = self._spare, None
            return spare


class SeedCopy:
    """A read-only in-memory copy of the database ``conn`` holds (later writes to ``conn`` are not seen), or of
    the serialized database ``conn`` (the seed's bytes: no serialization, one copy fewer); reads from several
    threads are serialised."""

    def __init__(self, conn: sqlite3.Connection | bytes) -> None:
        self._conn = open_memory_copy(conn if isinstance(conn, bytes) else conn.serialize())
        self._conn.execute("PRAGMA query_only=ON")
        self._lock = threading.Lock()

    @property
    def connection(self) -> sqlite3.Connection:
        """The copy's read-only connection itself, for a runtime's pristine state (:class:`WorldRuntime`'s
        ``pristine``). It may be used from several threads (SQLite's serialized mode, ``sqlite3.threadsafety``
        3); whoever uses it must not close it or change its settings."""
        return self._conn

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Every row of one read-only statement (a list of tuples)."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()
