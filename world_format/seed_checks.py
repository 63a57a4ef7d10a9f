"""A packaged seed's full-read checks, run on a thread while the caller goes on (a build mints meanwhile).

The checks that read every row of the seed (foreign keys, UTF-8 text, JSON columns) and the seed digest, whose
pass is the text check (:func:`world_format.runtime.text_checked_digests`), run on a background thread on a
private in-memory copy of the seed made there and closed when they end (on the loaded world's shared copy, which
its runtimes read their starting state from, every such read would wait for the check's statement: SQLite
serializes the statements of one connection), while the loader's own copy becomes the first runtime's working
copy; the cheap checks (``quick_check``, the schema) have already passed on that same seed, so nothing reads a
database SQLite finds corrupt. The digests are
handed over as soon as they are known; the verdict is waited for before anything is published. When several
checks fail, the failure reported is the one :func:`check_seed` would raise (foreign keys, then text, then JSON),
whatever order they ran in.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

from world_format.errors import WorldFormatError

from .background import Background
from .models import State
from .runtime import text_checked_digests
from .state import TableDigest, check_foreign_keys, check_json_columns

ORDER = ("foreign keys", "text", "json")
"""The checks in the order :func:`world_format.state.check_seed_rows` runs them (and reports the first failure)."""


class SeedChecks:
    """The full-read checks of a seed, running on a thread on the connection ``connect()`` returns there (a private
    copy of the seed, made on that thread), which they only read and close when they end."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], state: State, source: str) -> None:
        self._connect, self._state, self._source = connect, state, source
        self._conn: sqlite3.Connection | None = None
        self._digests: dict[str, TableDigest] | None = None
        self._digested = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        self._job = Background(self._run, "blobkit-seed-checks")

    def _run(self) -> WorldFormatError | None:
        failed: dict[str, WorldFormatError] = {}
        conn: sqlite3.Connection | None = None
        try:
            try:  # the digest first: the first probe needs it, the verdict only publishing
                conn = self._connect()
                with self._closing:
                    if self._closed:  # cancelled before the checks had a connection
                        raise sqlite3.OperationalError("interrupted")
                    self._conn = conn
                self._digests = text_checked_digests(conn, self._state, self._source)
            except WorldFormatError as exc:
                failed["text"] = exc
            finally:
                self._digested.set()
            for name, check in (("foreign keys", check_foreign_keys), ("json", check_json_columns)):
                if conn is None:  # no copy to read (its failure is the text check's)
                    break
                try:
                    check(conn, self._state, self._source)
                except WorldFormatError as exc:
                    failed[name] = exc
        finally:
            with self._closing:
                self._conn, self._closed = None, True
            if conn is not None:
                conn.close()
        return next((failed[name] for name in ORDER if name in failed), None)

    def digests(self) -> dict[str, TableDigest]:
        """The seed's table digests, once the digest pass is done (the verdict's failure if it failed)."""
        self._digested.wait()
        if self._digests is None:
            self.verdict()
            raise AssertionError("the digest pass failed without a failure")  # pragma: no cover
        return self._digests

    def failure(self) -> WorldFormatError | None:
        """Wait for every check; the first failure in :data:`ORDER`, or None when the seed passed them all."""
        return self._job.result()

    def verdict(self) -> None:
        """Wait for every check; raise the first failure (WorldFormatError)."""
        failure = self.failure()
        if failure is not None:
            raise failure

    def cancel(self) -> None:
        """Stop the check running now (the verdict is then an interrupted-statement error, never a pass). On a
        shared connection this interrupts its other statements running now too (the caller is giving up)."""
        with self._closing:
            if self._conn is not None:
                self._conn.interrupt()
            self._closed = True
