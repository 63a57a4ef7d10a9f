"""Workers: who runs a job (``host:pid``) and whether a recorded worker may still be alive.

Liveness is the heartbeat alone. A process id says nothing once the process is gone: the id is reused
(after a reboot, in a container, or simply by the next process), so a pid check can call a dead worker
alive forever and make ``jobs cancel`` and ``jobs resume`` refuse to act. A running job's worker
heartbeats every :data:`HEARTBEAT_S` seconds from a thread of its own (:mod:`.runner`), through long
evaluations too; a heartbeat older than the store's ``stale_after_s`` (default :data:`HEARTBEAT_STALE_S`)
means the worker is gone, wherever it ran.
"""

from __future__ import annotations

import os
import socket
import time

HEARTBEAT_S = 5.0
"""Seconds between two heartbeats of a running job's worker."""
HEARTBEAT_STALE_S = 60.0
"""A worker whose heartbeat is older than this counts as gone (twelve missed heartbeats)."""


def worker_id() -> str:
    """This process as a worker: ``host:pid`` (a label for people; liveness never reads it)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_alive(worker: str | None, heartbeat_at: float | None, stale_after_s: float = HEARTBEAT_STALE_S) -> bool:
    """Whether a recorded worker may still be running: it has a heartbeat younger than ``stale_after_s``."""
    if not worker or heartbeat_at is None:
        return False
    return time.time() - heartbeat_at < stale_after_s
