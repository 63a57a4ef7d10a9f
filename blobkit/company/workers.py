"""Workers: who runs a job (``host:pid``) and whether a recorded worker may still be alive."""

from __future__ import annotations

import os
import socket
import time

HEARTBEAT_STALE_S = 120.0
"""A worker on another host whose heartbeat is older than this counts as gone."""


def worker_id() -> str:
    """This process as a worker: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_alive(worker: str | None, heartbeat_at: float | None) -> bool:
    """Whether a recorded worker may still be running.

    On this host the pid decides; for another host, a heartbeat younger than
    ``HEARTBEAT_STALE_S`` counts as alive (we cannot see its processes).
    """
    if not worker:
        return False
    host, _, pid_text = worker.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return heartbeat_at is not None and time.time() - heartbeat_at < HEARTBEAT_STALE_S
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
