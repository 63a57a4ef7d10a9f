"""The ASGI application: :func:`create_app` composes the registered routers over one store.

Each router is one resource (:mod:`blobkit.service.routers`); they share the auth dependency
(:mod:`.auth`), the store (``app.state.store``) and the error shape (:mod:`.http_errors`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI

from blobkit import __version__

from . import http_errors
from .attempts import LEASE_S
from .routers import ROUTERS, Mount
from .store import ServiceStore

TITLE = "blobkit training service"
DESCRIPTION = ("Environments (company worlds), training jobs (downloadable kits, or recipes that workers claim and "
               "run), attempts with progress and evidence. Every request carries X-API-Key (tml-…); a key sees its "
               "own workspace only. Errors have one shape: {\"error\": {\"code\", \"message\", \"field\"?}}.")


def create_app(store: ServiceStore, routers: Sequence[Mount] | None = None, *,
               lease_seconds: float = LEASE_S) -> FastAPI:
    """The service over ``store`` with ``routers`` (default: every registered one, :data:`ROUTERS`).

    ``lease_seconds``: how long a worker's claim lasts without a heartbeat.
    """
    app = FastAPI(title=TITLE, version=__version__, description=DESCRIPTION, docs_url=None, redoc_url=None)
    app.state.store = store
    app.state.lease_seconds = lease_seconds
    http_errors.install(app)
    for mount in ROUTERS if routers is None else routers:
        app.include_router(mount.router, prefix=mount.prefix)
    return app
