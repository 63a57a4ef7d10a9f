"""``/api/v1/training-jobs``: the workspace's jobs by id, over every environment (what ``blobkit jobs --server``
reads)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from .. import jobs
from ..auth import get_store, principal
from ..http_errors import ERROR_RESPONSES
from ..records import Principal, TrainingJob, TrainingJobList
from ..store import ServiceStore

router = APIRouter(prefix="/training-jobs", tags=["training-jobs"], responses=ERROR_RESPONSES)


@router.get("", response_model=TrainingJobList, summary="List the workspace's jobs")
def list_all(caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> TrainingJobList:
    """Kits and worker jobs of every environment, oldest first."""
    return jobs.list_workspace_jobs(store, caller.workspace)


@router.get("/{job_id}", response_model=TrainingJob, summary="Read a job by id")
def read(job_id: str, caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> TrainingJob:
    """The job, as under its environment."""
    return jobs.get_job(store, caller.workspace, jobs.env_of(store, caller.workspace, job_id), job_id)


@router.delete("/{job_id}", response_model=TrainingJob, summary="Cancel a job by id")
def cancel(job_id: str, caller: Principal = Depends(principal),
           store: ServiceStore = Depends(get_store)) -> TrainingJob:
    """As ``DELETE`` under its environment."""
    return jobs.cancel_job(store, caller.workspace, jobs.env_of(store, caller.workspace, job_id), job_id)
