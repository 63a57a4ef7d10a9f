"""Futures: every Tinker operation returns ``{request_id}`` at once and its outcome later, via ``retrieve_future``.

An :class:`Outcome` is a JSON result, a protobuf result (forward/backward and sampling) or an error
in the SDK's ``{"error", "category"}`` shape (``User`` for what the caller can fix, ``Server``
otherwise). ``retrieve_future`` holds the poll until the outcome is ready or ``hold`` seconds pass
(then ``try_again``: the SDK polls again at once, so the hold keeps it from spinning). A request id
belongs to the workspace that submitted it; outcomes are kept for ``ttl`` seconds after they are
ready, so a poll lost on the network can be repeated.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from blobkit.errors import NotFoundError


@dataclass(frozen=True)
class Outcome:
    """A finished operation."""

    kind: Literal["json", "proto", "error"]
    json: dict[str, Any] | None = None
    proto: bytes | None = None
    """Serialized ``ForwardBackwardOutput`` or ``SampleResponse``."""

    @classmethod
    def error(cls, message: str, category: Literal["User", "Server", "Unknown"] = "User") -> Outcome:
        """The SDK's ``RequestFailedResponse`` (the client raises ``RequestFailedError``)."""
        return cls("error", json={"error": message, "category": category})


@dataclass
class Pending:
    """A submitted request."""

    request_id: str
    workspace: str
    future: Future[Outcome] = field(default_factory=Future)
    created_at: float = field(default_factory=time.monotonic)
    done_at: float | None = None


class FutureTable:
    """Every request in flight or recently finished, by id; thread-safe."""

    def __init__(self, ttl: float = 600.0) -> None:
        self.ttl = ttl
        self._pending: dict[str, Pending] = {}
        self._idempotent: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def submit(self, workspace: str, idempotency_key: str | None = None) -> tuple[Pending, bool]:
        """(the request, True when new). A resend with the same ``idempotency_key`` gets the first request back."""
        with self._lock:
            if idempotency_key and (workspace, idempotency_key) in self._idempotent:
                existing = self._pending.get(self._idempotent[(workspace, idempotency_key)])
                if existing is not None:
                    return existing, False
            pending = Pending("req-" + secrets.token_hex(12), workspace)
            self._pending[pending.request_id] = pending
            if idempotency_key:
                self._idempotent[(workspace, idempotency_key)] = pending.request_id
            pending.future.add_done_callback(lambda _: setattr(pending, "done_at", time.monotonic()))
            return pending, True

    def get(self, workspace: str, request_id: str) -> Pending:
        """The request; NotFoundError for an unknown id, or one another workspace submitted."""
        with self._lock:
            pending = self._pending.get(request_id)
        if pending is None or pending.workspace != workspace:
            raise NotFoundError(f"no request {request_id!r} in this workspace (finished requests are kept "
                                f"{int(self.ttl)} s)")
        return pending

    async def wait(self, workspace: str, request_id: str, hold: float) -> Outcome | None:
        """The request's outcome, or None when it is not ready within ``hold`` seconds."""
        pending = self.get(workspace, request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending.future)), hold)
        except TimeoutError:
            return None

    def sweep(self) -> None:
        """Forget outcomes older than ``ttl``."""
        now = time.monotonic()
        with self._lock:
            old = [rid for rid, p in self._pending.items() if p.done_at is not None and now - p.done_at > self.ttl]
            for rid in old:
                del self._pending[rid]
            keep = set(self._pending)
            self._idempotent = {k: v for k, v in self._idempotent.items() if v in keep}
