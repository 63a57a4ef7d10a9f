"""The training floor's branch of the error tree (rooted in :mod:`world_format.errors`)."""

from __future__ import annotations

from world_format.errors import BlobkitError


class TrainerError(BlobkitError, RuntimeError):
    """Training, evaluation, export or reload failed."""


class ConfigError(TrainerError, ValueError):
    """A training configuration or base-model choice is invalid."""


class SpendGateError(TrainerError, PermissionError):
    """A paid action was refused because spending was not confirmed."""


class TargetUnavailableError(TrainerError):
    """The chosen training target or method is not available here."""

