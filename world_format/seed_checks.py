"""A packaged seed's full-read checks, run on a thread while the caller goes on (a build mints meanwhile).

The checks that read every row of the seed (foreign keys, UTF-8 text, JSON columns) and the seed digest, whose
pass is the text check (:func:`world_format.runtime.text_checked_digests`), run on the loader's own connection
on a background thread; the cheap checks (``quick_check``, the schema) have already passed, so nothing reads a
database SQLite finds corrupt. The digests are handed over as soon as they are known; the verdict is waited for
before anything is published. When several checks fail, the failure reported is the one :func:`check_seed`
would raise (foreign keys, then text, then JSON), whatever order they ran in.
"""

from __future__ import annotations

import sqlite3
import threading

from world_format.errors import WorldFormatError

from .background import Background
from .models import State
from .runtime import text_checked_digests
from .state import TableDigest, check_foreign_keys, check_json_columns

ORDER = ("foreign keys", "text", "json")
"""The checks in the order :func:`world_format.state.check_seed_rows` runs them (and reports the first failure)."""


class SeedChecks:
    """The full-read checks of a seed, running on a thread on ``conn`` (which they close when done)."""

    def __init__(self, conn: sqlite3.Connection, state: State, source: str) -> None:
        self._conn, self._state, self._source = conn, state, source
        self._digests: dict[str, TableDigest] | None = None
        self._digested = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        self._job = Background(self._run, "blobkit-seed-checks")

    def _run(self) -> WorldFormatError | None:
        failed: dict[str, WorldFormatError] = {}
        try:
            try:  # the digest first: the first probe needs it, the verdict only publishing
                self._digests = text_checked_digests(self._conn, self._state, self._source)
            except WorldFormatError as exc:
                failed["text"] = exc
            finally:
                self._digested.set()
            for name, check in (("foreign keys",
                                 lambda: check_foreign_keys(self._conn, self._state, self._source)),
                                ("json", lambda: check_json_columns(self._conn, self._state, self._source))):
                try:
                    check()
                except WorldFormatError as exc:
                    failed[name] = exc
        finally:
            with self._closing:
                self._conn.close()
                self._closed = True
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
        """Stop the check running now (the verdict is then an interrupted-statement error, never a pass)."""
        with self._closing:
            if not self._closed:
                self._conn.interrupt()
