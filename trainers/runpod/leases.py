"""Job leases: one file per running job, so that :func:`trainers.runpod.leftovers.sweep` leaves its pod alone."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from world_format.canonical import atomic_write_json

LEASE_TTL_SECONDS = 600.0
"""A lease held on another host counts as live this long after its last heartbeat."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobRegistry:
    """One lease file per running job (named like its pod): what the sweep must leave alone."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def claim(self, name: str, **fields: Any) -> None:
        """Create or refresh the lease of job ``name`` (pid, host and a heartbeat time)."""
        atomic_write_json(self._path(name), {"name": name, "pid": os.getpid(), "host": socket.gethostname(),
                                             "heartbeat": time.time(), **fields})

    def release(self, name: str) -> None:
        """Drop the lease (the pod is gone)."""
        self._path(name).unlink(missing_ok=True)

    def owns(self, name: str) -> bool:
        """True when a live job holds the lease: its process runs on this host, or another host renewed it lately."""
        try:
            lease = json.loads(self._path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if lease.get("host") == socket.gethostname():
            return isinstance(lease.get("pid"), int) and _pid_alive(lease["pid"])
        heartbeat = lease.get("heartbeat")
        return isinstance(heartbeat, int | float) and time.time() - heartbeat < LEASE_TTL_SECONDS
