"""Training requests run in ``seq_id`` order per model, whatever order they arrive in.

The SDK numbers every request of one training client (forward/backward, optim_step, save, load)
``1, 2, 3, …`` and may send the chunks of one batch in parallel, the first chunk last. A
:class:`SeqQueue` holds a request until every lower number of its model has been dispatched, then
hands it and its held successors to the engine in order. A request whose predecessor never comes is
failed after ``wait`` seconds (:meth:`SeqQueue.expired`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Held:
    seq_id: int
    run: Callable[[], None]
    fail: Callable[[str], None]
    arrived: float = field(default_factory=time.monotonic)


class SeqQueue:
    """The ordering of one model's requests."""

    def __init__(self, first: int = 1) -> None:
        self.next_seq = first
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()

    def offer(self, seq_id: int | None, run: Callable[[], None],
              fail: Callable[[str], None]) -> list[Callable[[], None]]:
        """Add a request; return what may be dispatched now, in order (``run`` itself when it is next).

        Raises ValueError for a number already dispatched or held (a stale or duplicated request).
        """
        with self._lock:
            if seq_id is None:
                return [run]
            if seq_id < self.next_seq or seq_id in self._held:
                raise ValueError(f"seq_id {seq_id} was already received for this model (next expected "
                                 f"{self.next_seq})")
            self._held[seq_id] = Held(seq_id, run, fail)
            ready = []
            while self.next_seq in self._held:
                ready.append(self._held.pop(self.next_seq).run)
                self.next_seq += 1
            return ready

    def expire(self, wait: float) -> None:
        """Fail held requests older than ``wait`` seconds (their predecessor never came)."""
        now = time.monotonic()
        with self._lock:
            old = [held for held in self._held.values() if now - held.arrived > wait]
            for held in old:
                del self._held[held.seq_id]
            missing = self.next_seq
        for held in old:
            held.fail(f"request seq_id {held.seq_id} waited {int(wait)} s for seq_id {missing} of the same model, "
                      "which never arrived")

    def drop(self, reason: str) -> None:
        """Fail every held request with ``reason``."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for item in held:
            item.fail(reason)
