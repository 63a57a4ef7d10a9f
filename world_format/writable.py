"""Whether a folder can be written, asked before any work starts.

A command that will write into ``--out`` asks :func:`check_writable` first, so that a read-only,
full or forbidden folder is refused in one line before minutes of work, not after them. The check
creates one empty probe file in the nearest folder that exists (``--out`` itself or the parent it
would be created in) and removes it at once: it catches what permission bits alone do not (a
read-only mount, an administrator's process, a full disk) and leaves nothing behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OutputError


def _nearest_existing(path: Path) -> Path:
    """``path`` or the closest of its parents that exists."""
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def check_writable(path: Path, option: str = "--out") -> None:
    """Raise OutputError unless ``path`` (a folder, existing or to be created) can be written; writes nothing.

    Errors name ``path``, what is wrong (a file where a folder must be, the system's own reason) and ``option``.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target}: {option} must be a folder, and this is a file; choose another {option}")
    parent = _nearest_existing(target)
    if not parent.is_dir():
        raise OutputError(f"{target}: cannot create {option} here: {parent} is a file, not a folder; choose another "
                          f"{option}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".blobkit-write-check-", dir=parent)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write {option} ({exc.strerror or exc} in {parent}); choose a folder you "
                          "can write to, or free space there") from None
    os.close(fd)
    os.unlink(probe)
