"""Interruptions as part of the contract: SIGINT and SIGTERM are noted, and acted on at safe points.

While :func:`deferred_interrupts` is active (on the main thread), a SIGINT or SIGTERM does not raise
wherever the interpreter happens to be (inside an SQLite statement, between a temp file and its
rename); it is recorded, and the code asks at its own safe points:

- :meth:`Interrupts.check` raises :class:`~world_format.errors.InterruptError` (exit code 130, one
  line) where stopping means writing nothing (a build between its stages);
- :meth:`Interrupts.reason` returns ``"interrupt"`` for a training run's stop condition, so it ends at
  the next step boundary and still exports, evaluates and records ``stopped_by: interrupt``.

A second signal raises InterruptError at once ("again to stop at once"). Off the main thread the
handlers cannot be installed and nothing changes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .errors import InterruptError

SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_REASON = "interrupt"
"""What a training run records as ``stopped_by`` when it was interrupted."""


@dataclass
class Interrupts:
    """The signal received while deferring, if any; polled at safe points."""

    received: str | None = None
    """``SIGINT`` or ``SIGTERM``, once one arrived."""
    notify: Callable[[str], None] | None = None
    """Told (one line) when the first signal arrives."""
    first_notice: str = "interrupted: stopping at the next safe point (again to stop at once)"
    _count: int = field(default=0, repr=False)

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: note the first signal, raise InterruptError on the second."""
        self._count += 1
        self.received = self.received or signal.Signals(signum).name
        if self._count > 1:
            raise InterruptError(f"interrupted twice ({self.received}): stopped at once")
        if self.notify is not None:
            self.notify(self.first_notice)

    def check(self, where: str, written: str = "nothing was written") -> None:
        """Raise InterruptError ``interrupted (SIGNAL) during WHERE; WRITTEN`` once a signal arrived."""
        if self.received:
            raise InterruptError(f"interrupted ({self.received}) during {where}; {written}")

    def reason(self) -> str | None:
        """``"interrupt"`` once a signal arrived, else None (a :data:`trainers.budget.Stop`)."""
        return STOP_REASON if self.received else None


@contextmanager
def deferred_interrupts(notify: Callable[[str], None] | None = None,
                        first_notice: str | None = None) -> Iterator[Interrupts]:
    """Defer SIGINT and SIGTERM for the block (main thread only); restore the previous handlers after it."""
    interrupts = Interrupts(notify=notify)
    if first_notice is not None:
        interrupts.first_notice = first_notice
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {sig: signal.signal(sig, interrupts.handle) for sig in SIGNALS}
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
