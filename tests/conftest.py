"""Shared fixtures: the small code-built world and the bundled examples."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

from worlds import small_world  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/world.json"))


def write_world(path: Path, document: Any) -> Path:
    """Write a world document as world.json under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    target = path / "world.json"
    target.write_text(json.dumps(document), encoding="utf-8")
    return target


@pytest.fixture
def small_world_doc() -> dict[str, Any]:
    """A fresh copy of the small world document."""
    return small_world()


@pytest.fixture
def small_world_file(tmp_path: Path) -> Path:
    """The small world as a single-file export on disk."""
    return write_world(tmp_path / "src", small_world())
