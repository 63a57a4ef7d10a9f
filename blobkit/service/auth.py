"""Authentication: every request carries ``X-API-Key``; it resolves to a :class:`~.records.Principal`.

Routers depend on :func:`principal` (any key) or :func:`worker_principal` (a worker connection's key);
every query they make is filtered by ``principal.workspace``, so another workspace's ids read as
not found. :func:`get_store` gives the app's :class:`~.store.ServiceStore`.
"""

from __future__ import annotations

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader

from blobkit.errors import ForbiddenError

from .records import Principal
from .store import ServiceStore

API_KEY_HEADER = "X-API-Key"
api_key = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                       description="A workspace's API key (tml-…): blobkit serve keys create, or POST /api/v1/workers")


def get_store(request: Request) -> ServiceStore:
    """The store the app was created with."""
    store: ServiceStore = request.app.state.store
    return store


def principal(key: str | None = Security(api_key), store: ServiceStore = Depends(get_store)) -> Principal:
    """The caller; AuthError (401) without a valid key."""
    return store.resolve_key(key)


def worker_principal(caller: Principal = Depends(principal)) -> Principal:
    """The caller, who must be a worker connection (403 for a user key)."""
    if caller.role != "worker" or caller.worker_id is None:
        raise ForbiddenError("this route is for workers: use the token from POST /api/v1/workers "
                             "(blobkit worker --server URL --token T)")
    return caller
