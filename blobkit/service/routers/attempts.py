"""``/api/v1/attempts/{attempt_id}``: the claiming worker's source download, heartbeats, uploads and finish."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse

from .. import attempts, jobs
from ..auth import get_store, worker_principal
from ..http_errors import ERROR_RESPONSES
from ..records import Artifact, Attempt, AttemptFinish, AttemptReport, ErrorBody, LeaseState, Principal
from ..store import ServiceStore
from ..transfer import SHA_HEADER, file_response, receive_upload

router = APIRouter(prefix="/attempts/{attempt_id}", tags=["attempts"],
                   responses={**ERROR_RESPONSES, 409: {"model": ErrorBody, "description": "The lease was lost"}})
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary"}}}},
    "parameters": [{"name": SHA_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
                    "description": "sha256 of the body; a mismatch stores nothing"}]}


@router.get("", response_model=Attempt, summary="Read an attempt")
def read_attempt(attempt_id: str, caller: Principal = Depends(worker_principal),
                 store: ServiceStore = Depends(get_store)) -> Attempt:
    """The calling worker's attempt."""
    return attempts.get_attempt(store, caller, attempt_id)


@router.get("/source", response_class=FileResponse, summary="Download the recipe's world")
def download_source(attempt_id: str, caller: Principal = Depends(worker_principal),
                    store: ServiceStore = Depends(get_store)) -> FileResponse:
    """The world source the recipe pins, with ``X-Content-SHA256``."""
    path, sha256 = attempts.attempt_source(store, caller, attempt_id)
    return file_response(path, sha256, "source")


@router.post("/heartbeat", response_model=LeaseState, summary="Heartbeat and report progress")
def heartbeat(attempt_id: str, report: AttemptReport, request: Request, caller: Principal = Depends(worker_principal),
              store: ServiceStore = Depends(get_store)) -> LeaseState:
    """Renew the lease, record progress, usage, checkpoints and new events; ``cancel_requested`` says stop."""
    return attempts.heartbeat(store, caller, attempt_id, report, request.app.state.lease_seconds)


@router.put("/artifacts/{name}", status_code=201, response_model=Artifact, summary="Upload evidence",
            openapi_extra=UPLOAD_BODY)
async def upload_artifact(attempt_id: str, name: str, request: Request, caller: Principal = Depends(worker_principal),
                          store: ServiceStore = Depends(get_store)) -> Artifact:
    """Store one file of evidence; its sha256 is checked on arrival against ``X-Content-SHA256``."""
    attempts.check_artifact_name(name)
    attempts.get_attempt(store, caller, attempt_id)
    ref = await receive_upload(request, store)
    job_id = attempts.add_artifact(store, caller, attempt_id, name, ref.sha256, ref.bytes)
    env_id = jobs.env_of(store, caller.workspace, job_id)
    return Artifact(name=name, sha256=ref.sha256, bytes=ref.bytes, attempt_id=attempt_id,
                    download_url=f"{jobs.jobs_url(env_id, job_id)}/artifacts/{name}")


@router.post("/finish", status_code=204, summary="End the attempt", response_class=Response)
def finish(attempt_id: str, report: AttemptFinish, caller: Principal = Depends(worker_principal),
           store: ServiceStore = Depends(get_store)) -> Response:
    """Record how the run ended and what it measured; a failed attempt leaves the job claimable."""
    attempts.finish(store, caller, attempt_id, report)
    return Response(status_code=204)
