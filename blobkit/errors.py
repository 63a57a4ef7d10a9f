"""The one error tree of blobkit, in one place.

The root and the foundation's errors live in :mod:`world_format.errors`, the training errors in
:mod:`trainers.errors`; this module re-exports both and adds the application's own (jobs and
company sources), so a caller can catch or name any of them from here.
"""

from __future__ import annotations

from trainers.errors import (
    ConfigError,
    ScoreError,
    SpendGateError,
    TargetUnavailableError,
    TrainerError,
    TrajectoryError,
)
from world_format.errors import (
    ArchiveError,
    BlobkitError,
    ChecksumError,
    KitError,
    ReplayError,
    ToolCallError,
    VCodeError,
    WorldFormatError,
    WorldSizeError,
)

__all__ = [
    "ArchiveError", "BlobkitError", "ChecksumError", "ConfigError", "JobError", "JobNotFoundError", "KitError",
    "NotTrainableError", "ReplayError", "ScoreError", "SourceError", "SpendGateError", "TargetUnavailableError",
    "ToolCallError", "TrainerError", "TrajectoryError", "VCodeError", "WorldFormatError", "WorldSizeError",
]


class JobError(BlobkitError, RuntimeError):
    """The job store cannot do what was asked (wrong state, busy worker, unreadable store)."""


class JobNotFoundError(JobError, LookupError):
    """No job with that id in the store."""


class SourceError(BlobkitError, ValueError):
    """The company source is missing, unreadable or changed since its job was created."""

    code = "source_error"


class NotTrainableError(BlobkitError, ValueError):
    """The source is valid but cannot be trained (too few independent states, no admitted task…)."""

    code = "not_trainable"
