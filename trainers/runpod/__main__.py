"""``python -m trainers.runpod pack-results OUT_DIR ARCHIVE RECORD``: the pod's last step before upload."""

from __future__ import annotations

import sys
from pathlib import Path

from .results import pack_results


def main(argv: list[str]) -> int:
    """Run the command in ``argv``; return the exit status."""
    if len(argv) == 4 and argv[0] == "pack-results":
        pack_results(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        return 0
    print("usage: python -m trainers.runpod pack-results OUT_DIR ARCHIVE RECORD", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
