"""The JSON Schema of world.json, generated from the models (``python -m world_format.schema``)."""

from __future__ import annotations

import json
import sys
from typing import Any

from .models import World

SCHEMA_ID = "https://blobkit.dev/spec/world.schema.json"


def world_schema() -> dict[str, Any]:
    """The world JSON Schema (draft 2020-12), with field docstrings as descriptions."""
    schema = World.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def schema_text() -> str:
    """The schema as committed in spec/world.schema.json."""
    return json.dumps(world_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
