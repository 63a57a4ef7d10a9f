"""Is a kit's held-out set large enough for its pass rates to mean anything, and if not, what the world needs.

The sample behind a held-out pass rate is the independent entities its cases concern (a customer with their
orders, :mod:`world_format.entities`), not the cases: cases of one entity are correlated. Below
:data:`MIN_HELD_OUT_ENTITIES` ``company inspect`` calls a source not trainable, and says which of two things is
short: the world (too few entities fall on the held-out side of the split: add rows) or the build (the side holds
enough, but the tasks' held-out cases concern few of them: hold out more cases per task).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from blobkit.builder import BuildConfig
from blobkit.builder.sides import Sides
from world_format.entities import Entities
from world_format.keys import key_expression, key_from_sql, normalize_key
from world_format.loaded import LoadedWorld
from world_format.state import quote_identifier

MIN_HELD_OUT_ENTITIES = 20
"""Fewest independent held-out entities (:mod:`world_format.entities`) a kit needs before its held-out pass
rate means anything. Cases of one entity are correlated, so the entities, not the cases, are the sample: at 20 the
95 % Wilson interval of a rate near 0.5 is 0.30-0.70 (half-width 0.20), just narrow enough to tell a model that
does the job most of the time from one that does it a third of the time; at the 5-15 entities small worlds hold
out, it is 0.24-0.76 or wider, and a rise from base to SFT cannot be told from noise."""

WHY = (f"cases of one entity are correlated, so the entities are the sample, and below {MIN_HELD_OUT_ENTITIES} the "
       "95 % interval of a pass rate near 0.5 is wider than 0.30-0.70: a gain from training cannot be told from noise")
"""The minimum's reason, as a refusal states it."""


def entities_text(count: int) -> str:
    """``1 independent entity``, ``6 independent entities``."""
    return f"{count} independent entit{'y' if count == 1 else 'ies'}"


@dataclass(frozen=True)
class HeldOutSide:
    """The entities the build's split puts on the held-out side, over every anchor table's rows."""

    entities: int
    """Distinct entities of anchor rows on the held-out side (the most held-out entities any build could reach)."""
    total: int
    """Distinct entities of anchor rows on either side."""
    roots: tuple[str, ...]
    """The tables those entities are rooted at (customers, employees…), most entities first."""


def held_out_side(loaded: LoadedWorld, config: BuildConfig) -> HeldOutSide:
    """Count the entities of every anchor row and those on the held-out side, by the build's own split.

    Uses the same :class:`~blobkit.builder.sides.Sides` (seed, ``eval_percent``, connected entities) as the
    build, so the count is of the side the build draws its held-out cases from. Reads the seed once.
    """
    runtime = loaded.runtime()
    try:
        with runtime.guard.host() as conn:
            sides = Sides(config.seed, config.eval_percent, Entities(loaded.world, conn))
            every: dict[str, bool] = {}
            for anchor in loaded.world.state.anchors:
                table = loaded.world.state.table(anchor.table)
                assert table is not None  # the loader checked that every anchor names a table
                name = quote_identifier(table.name)
                for (value,) in conn.execute(f"SELECT {key_expression(table, name)} FROM {name}"):
                    key = normalize_key(key_from_sql(table, value))
                    every[sides.entity(table.name, key)] = sides.side(table.name, key) == "eval"
    finally:
        runtime.close()
    roots = Counter(entity.split(":", 1)[0] for entity in every)
    return HeldOutSide(sum(every.values()), len(every), tuple(name for name, _ in roots.most_common()))


def held_out_shortfall(loaded: LoadedWorld, config: BuildConfig, held_out: int) -> dict[str, Any] | None:
    """None when ``held_out`` independent entities are enough; else the counts and the refusal's reason.

    The reason names the count, the minimum and why, how many more held-out entities are needed, and what to
    change: the build (``--eval-cases``) when the held-out side already holds enough entities, else the world
    (about how many more root rows, at the share of entities this split holds out).
    """
    if held_out >= MIN_HELD_OUT_ENTITIES:
        return None
    needed = MIN_HELD_OUT_ENTITIES - held_out
    side = held_out_side(loaded, config)
    head = (f"held-out too small: the held-out cases concern {entities_text(held_out)}, fewer than the "
            f"{MIN_HELD_OUT_ENTITIES} a held-out pass rate needs ({WHY}); {needed} more held-out "
            f"entit{'y is' if needed == 1 else 'ies are'} needed")
    roots = ", ".join(side.roots)
    if side.entities >= MIN_HELD_OUT_ENTITIES:
        rows_needed = 0
        remedy = (f"the split's held-out side holds {side.entities} entities of the anchor tables, but the tasks "
                  f"hold out cases of only {held_out} of them: hold out more cases per task (--eval-cases, now "
                  f"{config.eval_cases_per_task})")
    else:
        share = side.entities / side.total if side.entities else max(config.eval_percent, 1) / 100
        rows_needed = math.ceil((MIN_HELD_OUT_ENTITIES - side.entities) / share)
        remedy = (f"the split holds out only {side.entities} of the world's {side.total} entities: add about "
                  f"{rows_needed} more root rows ({roots}), each with the rows that belong to it")
    return {"needed": needed, "held_out_side": side.entities, "entities": side.total, "roots": list(side.roots),
            "rows_needed": rows_needed, "reason": f"{head}; {remedy}"}
