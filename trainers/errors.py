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



class ToolFormatError(ConfigError):
    """A tool format cannot be used: the base's chat template drops tools or tool calls and no family format fits,
    the tokenizer splits the format's control tokens, or a row cannot be written in the format."""


class BaseMismatchError(TrainerError):
    """A base model differs from the one an export or plan pinned (its sha256), or its files fail their manifest."""


class InputDataError(ConfigError):
    """Data handed to a model session is invalid: token ids out of the vocabulary, loss inputs of the wrong shape or
    missing, a loss the engine does not know, values that are not finite."""


class ScoreError(BlobkitError, ValueError):
    """Verdicts that cannot make one score: a case the kit does not hold, or one case judged on two different
    conversations (:mod:`trainers.scoring`)."""


class TrajectoryError(ScoreError):
    """A trajectories file to score is unreadable, names a case the kit does not have, or holds one case twice
    with different messages."""
