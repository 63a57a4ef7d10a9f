"""``/api/v1/workers``: create a worker connection (a user key), and a worker's hello and claim (its token)."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Request, Response

from .. import attempts
from ..auth import get_store, principal, worker_principal
from ..http_errors import ERROR_RESPONSES
from ..records import Claim, Principal, WorkerConnection, WorkerCreate, WorkerHello
from ..store import ServiceStore

router = APIRouter(prefix="/workers", tags=["workers"], responses=ERROR_RESPONSES)


@router.post("", status_code=201, response_model=WorkerConnection, summary="Create a worker connection")
def create_worker(request: Request, body: WorkerCreate = Body(default_factory=WorkerCreate),
                  caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> WorkerConnection:
    """A one-time token (shown once) and the ``blobkit worker`` command to run on the company machine."""
    return attempts.create_worker(store, caller.workspace, body.name, str(request.base_url).rstrip("/"))


@router.post("/hello", status_code=204, summary="A worker connects", response_class=Response)
def worker_hello(said: WorkerHello, caller: Principal = Depends(worker_principal),
                 store: ServiceStore = Depends(get_store)) -> Response:
    """Record the bases the worker can run (GET /api/v1/models lists them)."""
    attempts.hello(store, caller, said)
    return Response(status_code=204)


@router.post("/claim", response_model=Claim, summary="Claim a queued job",
             responses={204: {"description": "No queued job this worker can run"}})
def claim(request: Request, said: WorkerHello, caller: Principal = Depends(worker_principal),
          store: ServiceStore = Depends(get_store)) -> Claim | Response:
    """The oldest queued job of the workspace whose base is among ``bases``, as a new attempt under a lease; of two
    workers racing for one job exactly one gets it."""
    attempts.hello(store, caller, said)
    claimed = attempts.claim(store, caller, said.bases, request.app.state.lease_seconds)
    return Response(status_code=204) if claimed is None else claimed
