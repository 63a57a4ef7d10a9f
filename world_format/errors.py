"""The root of blobkit's one error tree, and the errors of the foundation.

Every error blobkit raises on purpose derives from :class:`BlobkitError`; each category also
subclasses the standard-library error it stands in for, so callers that already catch
``ValueError`` or ``OSError`` keep working. The CLI catches ``BlobkitError`` and prints its
one-line message. All classes are plain ``Exception`` subclasses with a single message
argument, so they pickle.

The tree grows upward with the floors: ``trainers.errors`` adds the training errors and
``blobkit.errors`` the application's, and re-exports the whole tree in one place.
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


class ReplayError(BlobkitError, RuntimeError):
    """Replaying a reference chain failed or did not reproduce a stored trace."""


class KitError(BlobkitError, ValueError):
    """A kit cannot be built, or a built kit is invalid."""


class ArchiveError(KitError):
    """An archive is malformed, unsafe (links, path escapes) or over its budgets."""


class OutputError(BlobkitError, OSError):
    """An output folder or file cannot be written (read-only, full, forbidden, or a file where a folder must be);
    raised before the work starts where that can be known, and otherwise with nothing half-written."""


class InterruptError(BlobkitError):
    """A command was interrupted (SIGINT or SIGTERM) at a point where stopping means writing nothing."""

    exit_code = 130
