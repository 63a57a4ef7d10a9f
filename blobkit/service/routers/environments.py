"""``/api/v1/twin/environments``: register a world (at most 1 MiB over HTTP), list and read environments."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from .. import environments
from ..auth import get_store, principal
from ..bodies import read_limited
from ..http_errors import ERROR_RESPONSES
from ..records import Environment, EnvironmentList, ErrorBody, Principal
from ..store import ServiceStore

router = APIRouter(prefix="/twin/environments", tags=["environments"], responses=ERROR_RESPONSES)

WORLD_BODY = {"requestBody": {"required": True, "description": "A world.json, or a packaged world as .tar.zst "
                                                                "(at most 1 MiB)",
                              "content": {"application/json": {"schema": {"type": "object"}},
                                          "application/zstd": {"schema": {"type": "string", "format": "binary"}}}}}


@router.post("", status_code=201, response_model=Environment, summary="Register a world",
             responses={413: {"model": ErrorBody, "description": "Body over 1 MiB"}}, openapi_extra=WORLD_BODY)
async def add_environment(request: Request, lease_hours: float | None = Query(None, gt=0, le=87600,
                                                                              description="Serving lease in hours"),
                          caller: Principal = Depends(principal),
                          store: ServiceStore = Depends(get_store)) -> Environment:
    """Load and inspect the world exactly as ``blobkit company inspect`` does (identity, tools, procedures,
    trainability with reasons) and keep it. An invalid world is 422 and nothing is kept."""
    data = await read_limited(request, environments.MAX_UPLOAD_BYTES, environments.TOO_LARGE_HINT)
    return await run_in_threadpool(environments.add_world, store, caller.workspace, data, lease_hours)


@router.get("", response_model=EnvironmentList, summary="List environments")
def list_environments(caller: Principal = Depends(principal),
                      store: ServiceStore = Depends(get_store)) -> EnvironmentList:
    """The caller's environments, worlds and cluster planes, oldest first."""
    return environments.list_environments(store, caller.workspace)


@router.get("/{env_id}", response_model=Environment, summary="Read an environment")
def get_environment(env_id: str, caller: Principal = Depends(principal),
                    store: ServiceStore = Depends(get_store)) -> Environment:
    """One environment of the caller's workspace."""
    return environments.get_environment(store, caller.workspace, env_id)
