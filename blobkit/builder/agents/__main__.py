"""``python -m blobkit.builder.agents SPEC``: rewrite the wrong-agent table of the spec from the registry."""

from __future__ import annotations

import sys
from pathlib import Path

from . import with_spec_table

if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "spec/world-format.md")
    path.write_text(with_spec_table(path.read_text(encoding="utf-8")), encoding="utf-8")
