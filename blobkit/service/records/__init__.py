"""The service's typed records: what crosses from the store to the routes, the CLI and the worker.

Every record is a strict frozen pydantic model whose field docstrings become the OpenAPI schema:
:mod:`.base` (the caller, the error shape), :mod:`.environments`, :mod:`.jobs` (training jobs, recipes,
attempts, progress, the worker's reports).
"""

from __future__ import annotations

from .base import ErrorBody, ErrorDetail, Principal, Record
from .environments import AnchorInfo, Environment, EnvironmentList, ToolInfo, Trainability, WorldInfo
from .jobs import (
    Artifact,
    ArtifactPin,
    Attempt,
    AttemptFinish,
    AttemptReport,
    BasePin,
    Check,
    CheckpointPin,
    Claim,
    Commands,
    EvalPlan,
    KitRef,
    LeaseState,
    Outcome,
    Progress,
    ProgressEvent,
    Recipe,
    SourcePin,
    TrainingJob,
    TrainingJobList,
    TrainingJobRequest,
    Usage,
    WorkerConnection,
    WorkerCreate,
    WorkerHello,
)

__all__ = [
    "AnchorInfo", "Artifact", "ArtifactPin", "Attempt", "AttemptFinish", "AttemptReport", "BasePin", "Check",
    "CheckpointPin",
    "Claim", "Commands", "Environment", "EnvironmentList", "ErrorBody", "ErrorDetail", "EvalPlan", "KitRef",
    "LeaseState", "Outcome", "Principal", "Progress", "ProgressEvent", "Recipe", "Record", "SourcePin", "ToolInfo",
    "Trainability", "TrainingJob", "TrainingJobList", "TrainingJobRequest", "Usage", "WorkerConnection",
    "WorkerCreate", "WorkerHello", "WorldInfo",
]
