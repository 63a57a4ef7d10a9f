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
    InterruptError,
    KitError,
    OutputError,
    ReplayError,
    ToolCallError,
    VCodeError,
    WorldFormatError,
    WorldSizeError,
)

__all__ = [
    "ArchiveError", "AuthError", "BlobkitError", "ChecksumError", "ConfigError", "ConflictError", "ForbiddenError",
    "InterruptError", "JobError", "JobNotFoundError", "KitError", "LeaseExpiredError", "NotFoundError",
    "NotTrainableError", "OutputError",
    "PayloadTooLargeError", "PlaneNotTrainableError", "PolicyError", "ReplayError", "ScoreError", "ServiceError",
    "SourceError", "SpendGateError", "StoreCorruptError", "TargetUnavailableError", "ToolCallError", "TrainerError",
    "TrajectoryError", "UnknownBaseError", "UploadChecksumError", "VCodeError", "WorldFormatError", "WorldSizeError",
]


class JobError(BlobkitError, RuntimeError):
    """The job store cannot do what was asked (wrong state, busy worker, unreadable store)."""


class JobNotFoundError(JobError, LookupError):
    """No job with that id in the store."""


class StoreCorruptError(JobError, ValueError):
    """A stored cell (a JSON column of one job, checkpoint or event) cannot be read back; the message names the
    job and the field, and every other job stays readable."""

    code = "store_corrupt"


class SourceError(BlobkitError, ValueError):
    """The company source is missing, unreadable or changed since its job was created."""

    code = "source_error"


class NotTrainableError(BlobkitError, ValueError):
    """The source is valid but cannot be trained (too few independent states, no admitted task…)."""

    code = "not_trainable"


# --------------------------------------------------------------------------- the service (blobkit serve)


class ServiceError(BlobkitError):
    """The training service refused a request; the HTTP layer maps each subclass to one status code.

    ``field`` names the request field at fault and ``accepted`` the values it may take, when known
    (set on the instance; both travel in the JSON error body).
    """

    code = "service_error"
    field: str | None = None
    accepted: list[str] | None = None


class AuthError(ServiceError, PermissionError):
    """No API key, or one the store does not know (or a revoked one)."""

    code = "unauthorized"


class ForbiddenError(ServiceError, PermissionError):
    """The key is valid but may not do this (a user key on a worker route)."""

    code = "forbidden"


class NotFoundError(ServiceError, LookupError):
    """No such environment, job, kit, worker or artifact in the caller's workspace (another workspace's ids are
    indistinguishable from ids that do not exist)."""

    code = "not_found"


class ConflictError(ServiceError, RuntimeError):
    """The record is not in a state that allows this (a finished job, a lease another worker holds)."""

    code = "conflict"


class PlaneNotTrainableError(ConflictError):
    """A cluster-plane environment (``tenv_``) fronts providers' MCP servers and holds no world to train on."""

    code = "plane_not_trainable"


class LeaseExpiredError(ServiceError, RuntimeError):
    """The environment's serving lease has expired: new training requests are refused, evidence stays readable."""

    code = "lease_expired"


class PayloadTooLargeError(ServiceError, ValueError):
    """A request body is larger than the route accepts."""

    code = "payload_too_large"


class UploadChecksumError(ServiceError, ChecksumError):
    """An uploaded file's sha256 (or size) differs from what the uploader declared; nothing was stored."""

    code = "checksum_mismatch"


class UnknownBaseError(ServiceError, ConfigError):
    """A base model outside the catalog (and not one a worker can build, like ``tiny``)."""

    code = "unknown_base"


class PolicyError(ServiceError, PermissionError):
    """A Tinker API request falls outside the administrator's policy for its workspace and key; the message names
    the rule (permitted models, max LoRA rank, token budget, deadline, or no policy at all)."""

    code = "policy_refused"
