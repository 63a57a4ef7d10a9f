"""The OpenAPI document, generated from the app: ``python -m blobkit.service.openapi > spec/service.openapi.json``.

A test compares the committed file with a fresh dump (drift check), as for the world schema.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def openapi_document() -> dict[str, Any]:
    """The document of an app over a throwaway store (the document does not depend on the store's content)."""
    from .app import create_app
    from .store import ServiceStore

    with tempfile.TemporaryDirectory() as tmp, ServiceStore(Path(tmp)) as store:
        return create_app(store).openapi()


def openapi_text() -> str:
    """The document as committed: indented, sorted keys, one trailing newline."""
    return json.dumps(openapi_document(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(openapi_text())
