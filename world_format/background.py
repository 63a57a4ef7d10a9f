"""Work started on a thread now and waited for later (a build checks and digests its seed while it mints).

SQLite releases the GIL while a statement steps, so a full-table check on one connection runs beside Python
work on another; the caller waits for the result where it needs it, and the work's exception is raised there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``work()`` running on a daemon thread from the moment this is made."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as exc:  # handed to whoever waits, raised there
            self._error = exc

    def done(self) -> bool:
        """Whether the work has finished (successfully or not)."""
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Wait for the work to finish, whatever its outcome (its exception stays for :meth:`result`)."""
        self._thread.join()

    def result(self) -> T:
        """Wait for the work; return its value or raise its exception."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def start_import(module: str) -> Background[object]:
    """Import ``module`` on a thread (a slow import overlapping work that releases the GIL); a later plain
    ``import`` of it waits for this one through Python's import lock."""
    import importlib

    return Background(lambda: importlib.import_module(module), f"blobkit-import-{module}")
