"""JSON cells of blobkit's SQLite stores (the company job store, the service store), read back with a guard.

A torn write or a hand edit leaves a cell that is not JSON; reading it is a
:class:`~blobkit.errors.StoreCorruptError` that names the record and the field, never a traceback, and never a
reason to stop reading the other records.
"""

from __future__ import annotations

import json
from typing import Any

from blobkit.errors import StoreCorruptError


def json_cell(text: str | None, where: str, field: str, remedy: str) -> Any:
    """The value of a JSON cell (None for NULL); StoreCorruptError naming ``where`` and ``field`` when damaged."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise StoreCorruptError(f"{where}: its {field} is damaged and cannot be read ({exc}); {remedy}") from None
