"""``/api/v1/twin/environments/{env_id}/training-jobs``: the seed's training-jobs contract.

Create a kit (201) or a worker job (202), list, read (progress and results), download the kit and evidence
(``X-Content-SHA256``), cancel (``DELETE``).
"""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Response
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from .. import jobs
from ..attempts import check_artifact_name
from ..auth import get_store, principal
from ..http_errors import ERROR_RESPONSES
from ..records import ErrorBody, Principal, TrainingJob, TrainingJobList, TrainingJobRequest
from ..store import ServiceStore
from ..transfer import file_response

router = APIRouter(prefix="/twin/environments/{env_id}/training-jobs", tags=["training-jobs"],
                   responses={**ERROR_RESPONSES, 409: {"model": ErrorBody, "description": "plane_not_trainable"},
                              410: {"model": ErrorBody, "description": "lease_expired"}})


@router.post("", status_code=201, response_model=TrainingJob, summary="Create a kit or a worker job",
             responses={202: {"model": TrainingJob, "description": "A queued worker job"}})
async def create_training_job(env_id: str, response: Response,
                              request: TrainingJobRequest = Body(default_factory=TrainingJobRequest),
                              caller: Principal = Depends(principal),
                              store: ServiceStore = Depends(get_store)) -> TrainingJob:
    """``launch: manual`` (default): build the kit and answer 201 with its download and the exact ``blobkit
    train`` commands. ``launch: worker``: pin a recipe and queue it (202) for a worker to claim."""
    job = await run_in_threadpool(jobs.create_job, store, caller.workspace, env_id, request)
    if job.launch == "worker":
        response.status_code = 202
    return job


@router.get("", response_model=TrainingJobList, summary="List kits and worker jobs")
def list_training_jobs(env_id: str, caller: Principal = Depends(principal),
                       store: ServiceStore = Depends(get_store)) -> TrainingJobList:
    """The environment's jobs, oldest first."""
    return jobs.list_jobs(store, caller.workspace, env_id)


@router.get("/{job_id}", response_model=TrainingJob, summary="Read a job")
def get_training_job(env_id: str, job_id: str, caller: Principal = Depends(principal),
                     store: ServiceStore = Depends(get_store)) -> TrainingJob:
    """Progress (stage, step, loss or reward, model calls and minutes against the budget), attempts with their
    events, measured results and the replay verdict."""
    return jobs.get_job(store, caller.workspace, env_id, job_id)


@router.delete("/{job_id}", response_model=TrainingJob, summary="Cancel a job")
def cancel_training_job(env_id: str, job_id: str, caller: Principal = Depends(principal),
                        store: ServiceStore = Depends(get_store)) -> TrainingJob:
    """At once when no worker runs it; a running worker stops at its next safe point. Nothing measured is lost."""
    return jobs.cancel_job(store, caller.workspace, env_id, job_id)


@router.get("/{job_id}/kit", response_class=FileResponse, summary="Download the kit",
            responses={200: {"content": {"application/zstd": {}}, "description": "The kit archive"}})
def download_kit(env_id: str, job_id: str, caller: Principal = Depends(principal),
                 store: ServiceStore = Depends(get_store)) -> FileResponse:
    """The kit archive, with ``X-Content-SHA256`` and ``Content-Length``."""
    path, kit = jobs.kit_blob(store, caller.workspace, env_id, job_id)
    return file_response(path, kit.sha256, kit.name, "application/zstd")


@router.get("/{job_id}/artifacts/{name}", response_class=FileResponse, summary="Download evidence",
            responses={200: {"content": {"application/octet-stream": {}}, "description": "The artifact"}})
def download_artifact(env_id: str, job_id: str, name: str, caller: Principal = Depends(principal),
                      store: ServiceStore = Depends(get_store)) -> FileResponse:
    """One uploaded artifact (eval.json, per-case results, training.png, the export manifest…)."""
    path, sha256 = jobs.artifact_blob(store, caller.workspace, env_id, job_id, check_artifact_name(name))
    return file_response(path, sha256, name)
