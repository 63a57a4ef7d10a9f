"""Run the blobkit CLI and send this very process a real signal when a build reaches a given progress point.

``python tests/interrupt_driver.py SIGNAL STAGE N blobkit-args...``: the N-th progress report of
STAGE (``load``, ``mint``, ``gate``, ``split``, ``replay``, ``write``) is followed by
``os.kill(own pid, SIGNAL)``, so the signal lands at a known point of a real run.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import blobkit.cli.world as world_cli
from blobkit.cli import main
from blobkit.cli.output import ProgressFn


def run() -> None:
    """Patch the build's progress callback to signal at the chosen point, then run the CLI."""
    signame, stage, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    original = world_cli.progress

    @contextmanager
    def progress(enabled: bool) -> Iterator[ProgressFn]:
        with original(enabled) as update:
            seen = 0

            def update_then_signal(name: str, done: int, total: int) -> None:
                nonlocal seen
                update(name, done, total)
                if name == stage:
                    seen += 1
                    if seen == nth:
                        os.kill(os.getpid(), getattr(signal, signame))

            yield update_then_signal

    world_cli.progress = progress  # type: ignore[assignment]
    sys.argv = ["blobkit", *sys.argv[4:]]
    main()


if __name__ == "__main__":
    run()
