"""Which side of the split a row's cases go to: a seeded hash of its connected entity, decided once, before any
case exists.

A row's entity (:mod:`world_format.entities`) is the root row reached by following owning foreign keys, so
a customer, their orders and the orders' items all land on the same side. The hash is of the root row, with
the formula an anchor row had before entities (a root anchor row keeps its side).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from world_format.canonical import canonical_json
from world_format.entities import Entities

Side = Literal["train", "eval"]


def side_of(seed: int, table: str, key: Any, eval_percent: int) -> Side:
    """"eval" or "train" for a root row, from a seeded hash (stable across machines)."""
    digest = hashlib.sha256(f"{seed}:{table}:{canonical_json(key)}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 100 < eval_percent else "train"


@dataclass(frozen=True)
class Sides:
    """The split of one build: every row's entity, and the side its entity is on."""

    seed: int
    eval_percent: int
    entities: Entities

    def entity(self, table: str, key: Any) -> str:
        """The entity id of row ``key`` of ``table``."""
        return self.entities.entity(table, key)

    def side(self, table: str, key: Any) -> Side:
        """The side of every case about row ``key`` of ``table``: the side of its entity's root row."""
        root_table, root_key = self.entities.root(table, key)
        return side_of(self.seed, root_table, root_key, self.eval_percent)
