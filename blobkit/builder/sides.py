"""Which side of the split an anchor row's cases go to: a seeded hash, decided once, before any case exists."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from world_format.canonical import canonical_json

Side = Literal["train", "eval"]


def side_of(seed: int, table: str, key: Any, eval_percent: int) -> Side:
    """"eval" or "train" for an anchor row, from a seeded hash (stable across machines)."""
    digest = hashlib.sha256(f"{seed}:{table}:{canonical_json(key)}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 100 < eval_percent else "train"
