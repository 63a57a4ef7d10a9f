"""The training service (``blobkit serve``): an ASGI app over an embedded store.

* :mod:`.store` — the SQLite store (WAL, full sync, :mod:`.migrations`), workspaces and API keys (:mod:`.keys`);
  :mod:`.blobs` — large artifacts, content-addressed on disk;
* :mod:`.records` — the typed records the routes return and the CLI prints;
* :mod:`.auth` — ``X-API-Key`` → :class:`~.records.Principal`; :mod:`.http_errors` — one JSON error shape;
* :mod:`.app` — :func:`create_app`; :mod:`.routers` — one router per resource, and the registry;
* :mod:`.server` — uvicorn on a bound socket; :mod:`.openapi` — the generated document (``spec/``).
* :mod:`.panel` — the Train panel: web pages at ``/`` and ``/twin/{env_id}`` over the same library functions.
"""

from __future__ import annotations

from .app import create_app
from .store import ServiceStore

__all__ = ["ServiceStore", "create_app"]
