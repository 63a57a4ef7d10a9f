"""The one error tree of blobkit.

Every error the library raises derives from :class:`BlobkitError`; each category also
subclasses the standard-library error it stands in for, so callers that already catch
``ValueError`` or ``OSError`` keep working. The CLI catches ``BlobkitError`` and prints
its one-line message. All classes are plain ``Exception`` subclasses with a single
message argument, so they pickle.
"""

from __future__ import annotations


class BlobkitError(Exception):
    """Root of every error blobkit raises on purpose."""

    exit_code = 2


class WorldFormatError(BlobkitError, ValueError):
    """A world (file, directory, schema, seed or semantics) is invalid."""


class WorldSizeError(WorldFormatError):
    """A world file or member is larger than its budget."""


class ChecksumError(BlobkitError, ValueError):
    """A manifest's sha256 or byte count does not match a file, or a file is unlisted."""


class ToolCallError(BlobkitError, ValueError):
    """A tool call was rejected (bad arguments, failed precondition, SQL failure).

    The executor turns it into an error observation for the model; it never ends an episode.
    """


class VCodeError(BlobkitError, ValueError):
    """A verifier program is malformed or could not be evaluated."""


class MintError(BlobkitError, ValueError):
    """Task minting could not produce candidates from the world."""


class ProbeError(BlobkitError, RuntimeError):
    """The discrimination gate could not run a probe."""


class ReplayError(BlobkitError, RuntimeError):
    """Replaying a reference chain failed or did not reproduce a stored trace."""


class KitError(BlobkitError, ValueError):
    """A kit cannot be built, or a built kit is invalid."""


class ArchiveError(KitError):
    """An archive is malformed, unsafe (links, path escapes) or over its budgets."""


class TrainerError(BlobkitError, RuntimeError):
    """Training, evaluation, export or reload failed."""


class ConfigError(TrainerError, ValueError):
    """A training configuration or base-model choice is invalid."""


class SpendGateError(TrainerError, PermissionError):
    """A paid action was refused because spending was not confirmed."""


class TargetUnavailableError(TrainerError):
    """The chosen training target or method is not available here."""


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
