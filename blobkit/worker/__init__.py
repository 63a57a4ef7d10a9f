"""The worker (``blobkit worker``): connects to a training service, claims jobs and runs them on this machine.

* :mod:`.client` — the HTTP client: hello, claim, heartbeat, uploads (sha256 declared), finish;
* :mod:`.attempt` — one claimed job run through the company pipeline in a local job store, with a reporter
  thread that heartbeats, streams progress and obeys cancellation;
* :mod:`.loop` — claim and run, once or for ever (``--supervise``).
"""

from __future__ import annotations

from .loop import work

__all__ = ["work"]
