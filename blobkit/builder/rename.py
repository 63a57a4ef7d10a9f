"""Renamed replays: each training case's reference chain run again on copies of the seed with its identifiers renamed.

A model that sees one email per customer can learn the emails; one that sees the same conversation with a new
email, name, order number or booking reference each time has to copy them from the conversation. For each training
case with a row, ``BuildConfig.renamed_replays`` times:

1. **choose** (:func:`choose_renaming`): the identifying values the case's row and task state
   (:mod:`.rename_values`: emails, names, references, the integer keys of the rows its chain names and their
   entity roots), each renamed to a fresh value of the same shape, drawn by an RNG seeded from the build seed,
   the case id and the replay number;
2. **execute** (:func:`renamed_row`): the renamed task (:func:`world_format.renaming.rename_task`) replayed on the
   renamed copy of the seed (:func:`world_format.renaming.renamed_seed`) like every row (:func:`.rows.replay_row`):
   its verifier must pass there and its answer key be judged correct;
3. **gate**: the row must state none of the originals and no identifier a held-out case states.

A replay that fails a step is dropped and counted by reason. Kept rows follow their case's row in sft.jsonl,
with the renaming in ``metadata.renaming`` (``blobkit verify`` replays them from it). The held-out side is untouched:
its cases run on the original seed.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict

from world_format.models import World
from world_format.renaming import RenamedValue, RenameError, Renaming, occurs, rename_task, renamed_seed
from world_format.runtime import WorldRuntime

from .config import Progress
from .leakage import held_out_stated, identifying_text, states_any, training_text
from .rename_values import FreshValues, SeedIdentifiers, found_in, name_first
from .rows import replay_row
from .sides import Sides
from .split import Case

RENAMED_SOURCE = "renamed_reference_chain_replay"
"""``metadata.sft_source`` of a renamed row."""


class RenamedReplays(BaseModel):
    """What renamed replays added to a kit (kit.json ``record.renamed_replays``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    per_case: int
    """Renamed replays tried per training case with a row (``BuildConfig.renamed_replays``)."""
    rows_added: int
    """Renamed rows in sft.jsonl."""
    rows_dropped: int
    """Renamed replays tried and dropped."""
    dropped_because: dict[str, int]
    """Dropped replays by reason: ``no fresh value``, ``seed constraint``, ``verifier`` (the chain or the verifier
    failed on the renamed seed), ``original left`` (the row still states an original), ``held-out identifier``."""
    cases_without_identifiers: int
    """Training cases whose row states no identifying value (nothing to rename: no replay tried)."""
    values_renamed: int
    """Distinct fresh values the added rows use."""


def _integer_keys(world: World, sides: Sides, case: Case, row: dict[str, Any]) -> list[tuple[int, tuple[str, ...]]]:
    """Integer keys (3+ digits) of the rows the case's chain names, their entity roots, and the anchored arguments
    of the row's tool calls, with the key column each belongs to."""
    named: list[tuple[str, Any]] = []
    for table, key in case.instance.anchors_touched:
        named += [(table, key), sides.entities.root(table, key)]
    found: dict[int, list[str]] = {}
    for table, key in named:
        declared = world.state.table(table)
        if declared is not None and not declared.composite and isinstance(key, int) and identifying_text(key):
            found.setdefault(key, []).append(f"{table}.{declared.primary_key}")
    for message in row["messages"]:
        for call in message.get("tool_calls") or []:
            tool = world.tool(call["function"]["name"])
            for param, target in (tool.anchors.items() if tool else ()):
                value = call["function"]["arguments"].get(param)
                if isinstance(value, int) and not isinstance(value, bool) and identifying_text(value):
                    found.setdefault(value, []).append(target)
    return [(value, tuple(dict.fromkeys(columns))) for value, columns in sorted(found.items())]


def _rng(seed: int, case_id: str, replay: int) -> random.Random:
    digest = hashlib.sha256(f"renamed-replay:{seed}:{case_id}:{replay}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def identifiers_of(world: World, identifiers: SeedIdentifiers, sides: Sides, case: Case,
                   row: dict[str, Any]) -> list[tuple[str | int, tuple[str, ...]]]:
    """The identifying values the case's row and task state, in drawing order (:func:`.rename_values.name_first`)."""
    task_text = case.instance.task.model_dump_json(by_alias=True)
    texts: list[tuple[str | int, tuple[str, ...]]] = list(found_in(identifiers, training_text([row]) + "\n" +
                                                                   task_text))
    return name_first(list(dict.fromkeys(texts + list(_integer_keys(world, sides, case, row)))))


def choose_renaming(fresh: FreshValues, values: list[tuple[str | int, tuple[str, ...]]],
                    replay: int) -> Renaming | None:
    """Each value renamed to a fresh one of its shape; None when some value has no fresh replacement."""
    renamed = []
    for original, columns in values:
        new = fresh.draw(original, columns[0])
        if new is None:
            return None
        renamed.append(RenamedValue(original=original, renamed=new, columns=columns))
    return Renaming(replay=replay, values=tuple(renamed))


def renamed_row(world: World, seed: bytes, task: Any, ids: tuple[str, str], system: str,
                tools: list[dict[str, Any]], renaming: Renaming) -> dict[str, Any] | None:
    """The row of ``task`` replayed on ``seed`` renamed (its renaming in ``metadata.renaming``); None when its
    chain or verifier fails there. RenameError when the renamed seed breaks a constraint."""
    runtime = WorldRuntime(world, renamed_seed(world, seed, renaming))
    try:
        row = replay_row(runtime, rename_task(task, renaming), ids, system, tools)
    finally:
        runtime.close()
    if row is None:
        return None
    row["metadata"] = {**row["metadata"], "sft_source": RENAMED_SOURCE,
                       "renaming": renaming.model_dump(mode="json")}
    return row


def states_original(row: dict[str, Any], renaming: Renaming) -> bool:
    """Whether the row's training text still states an original value (case aside)."""
    text = training_text([row])
    return any(occurs(value.original, text) for value in renaming.values)


def renamed_replays(runtime: WorldRuntime, sides: Sides, train: list[Case], held_out: list[Case],
                    rows: list[dict[str, Any]], seed: int, per_case: int,
                    progress: Progress) -> tuple[list[dict[str, Any]], RenamedReplays]:
    """``rows`` with each case's kept renamed rows after its own row, and the counts."""
    world, pristine = runtime.world, runtime.pristine.serialize()
    system, tools = world.system_prompt(), world.function_specs()
    identifiers, stated = SeedIdentifiers.of(runtime), held_out_stated(runtime, sides, held_out)
    by_case = {row["metadata"]["case_id"]: row for row in rows}
    used: set[str] = set()
    out: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    empty, added = 0, []
    cases = [case for case in train if case.case_id in by_case]
    for index, case in enumerate(cases):
        progress("rename", index, len(cases))
        row = by_case[case.case_id]
        out.append(row)
        values = identifiers_of(world, identifiers, sides, case, row)
        if not values:
            empty += 1
            continue
        for replay in range(1, per_case + 1):
            fresh = FreshValues(identifiers, _rng(seed, case.case_id, replay), used)
            renaming = choose_renaming(fresh, values, replay)
            reason, new = _gated(world, pristine, case, system, tools, renaming, stated)
            if new is None:
                dropped[reason] += 1
                continue
            out.append(new)
            added.append(renaming)
    progress("rename", len(cases), len(cases))
    distinct = {str(v.renamed) for renaming in added if renaming for v in renaming.values}
    return out, RenamedReplays(per_case=per_case, rows_added=len(added), rows_dropped=sum(dropped.values()),
                               dropped_because=dict(sorted(dropped.items())), cases_without_identifiers=empty,
                               values_renamed=len(distinct))


def _gated(world: World, seed: bytes, case: Case, system: str, tools: list[dict[str, Any]],
           renaming: Renaming | None, stated: list[str]) -> tuple[str, dict[str, Any] | None]:
    """(why it is dropped, None) or ("", the renamed row) for one renamed replay of ``case``."""
    if renaming is None:
        return "no fresh value", None
    try:
        row = renamed_row(world, seed, case.instance.task, (case.instance.spec_id, case.case_id), system, tools,
                          renaming)
    except RenameError:
        return "seed constraint", None
    if row is None:
        return "verifier", None
    if states_original(row, renaming):
        return "original left", None
    if states_any(row, stated):
        return "held-out identifier", None
    return "", row
