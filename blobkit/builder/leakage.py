"""The leakage report: what the held-out side shares with the training side, measured from the built cases and rows.

Three measures (kit.json ``leakage``; ``blobkit info`` prints them):

- **shared entities**: connected entities (:mod:`world_format.entities`) that cases on both sides concern
  (must be 0; the split puts whole entities on one side, and this recomputes it from the cases);
- **held-out identifiers in training rows**: identifiers of the rows a held-out case touches that its prompt or
  answer key states and that also appear in the text of some training row (must be 0);
- **instruction similarity**: the most similar pair of a training and a held-out instruction.

The identifier rule (spec/world-format.md, "The split"): the rows a held-out case touches are its anchor row, the
rows its reference chain names (``Instance.anchors_touched``) and their entity roots; their identifiers are the
values of their primary-key columns and, for anchor tables, their natural keys. A value counts when it could only
be that row's: text of at least :data:`MIN_TEXT_CHARS` characters, or an integer with at least
:data:`MIN_INT_DIGITS` digits (smaller numbers are indistinguishable from counts, quantities and positions); a
natural key's value, unless its column is declared unique, only when no other row of the table holds it (a zip code
that patrons share, one column of a name-and-zip identity, names no one). A value
*appears* in a text as a whole token: not run into letters, digits or ``_``, and a number not part of a decimal or
a longer number. Training text is
every non-system message of every sft.jsonl row (contents, tool-call arguments, observations); a held-out case's
text is its instruction, its scripted customer turns and its answer key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from world_format.canonical import canonical_json
from world_format.keys import key_parameters, key_where
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier

from .sides import Sides

if TYPE_CHECKING:
    from .split import Case

MIN_TEXT_CHARS = 4
"""Shortest text value counted as an identifier."""
MIN_INT_DIGITS = 3
"""Fewest digits of an integer counted as an identifier."""
IDENTIFIER_RULE = (f"primary-key and natural-key values of the rows each held-out case touches (its anchor row, the "
                   f"rows its chain names, their entity roots) "
                   f"(text of {MIN_TEXT_CHARS}+ characters, integers of {MIN_INT_DIGITS}+ digits), stated as a "
                   "whole token in the case's instruction, customer turns or answer key and in the non-system "
                   "messages of any sft.jsonl row")
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.@+\-][A-Za-z0-9_]+)*")


@dataclass(frozen=True)
class Identifier:
    """A value that names one row: ``customers.email = "ana@example.com"``.

    ``value`` is the stored value; ``maybe_shared`` marks a natural key's value from a column not declared unique,
    which names the row only when no other row holds it (:func:`names_one_row`)."""

    table: str
    column: str
    text: str
    value: Any = None
    maybe_shared: bool = False

    def __str__(self) -> str:
        return f"{self.table}.{self.column} {self.text}"


def _declared_unique(runtime: WorldRuntime, table: str, column: str) -> bool:
    """Whether the world declares ``table.column`` unique (its one-column primary key, ``unique``, a unique index)."""
    declared = runtime.world.state.table(table)
    if declared is None or declared.key_columns == (column,):
        return True
    if any(c.name == column and c.unique for c in declared.columns):
        return True
    return any(index.table == table and index.unique and tuple(index.columns) == (column,)
               for index in runtime.world.state.indexes)


def names_one_row(runtime: WorldRuntime, identifier: Identifier, known: dict[Identifier, bool] | None = None) -> bool:
    """Whether no other row of the identifier's table holds its value in its column (always true unless
    ``maybe_shared``): one bound query that stops at the second row, remembered in ``known`` when given."""
    if not identifier.maybe_shared:
        return True
    if known is not None and identifier in known:
        return known[identifier]
    sql = (f"SELECT COUNT(*) FROM (SELECT 1 FROM {quote_identifier(identifier.table)} "
           f"WHERE {quote_identifier(identifier.column)} = ? LIMIT 2)")
    with runtime.guard.host() as conn:
        holders = conn.execute(sql, (identifier.value,)).fetchone()[0]
    if known is not None:
        known[identifier] = int(holders) < 2
    return int(holders) < 2


def identifying_text(value: Any) -> str | None:
    """The text of ``value`` when it is specific enough to name a row (see the module docstring), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(value) if len(str(abs(value))) >= MIN_INT_DIGITS else None
    if isinstance(value, str) and len(value.strip()) >= MIN_TEXT_CHARS:
        return value.strip()
    return None


class _Text:
    """A body of text, searchable for whole-token values (a token set for one-token values, a regex otherwise)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = set(_TOKEN.findall(text))

    def states(self, value: str) -> bool:
        if _TOKEN.fullmatch(value):
            return value in self.tokens
        pattern = rf"(?<![A-Za-z0-9_]){re.escape(value)}(?!\.?[A-Za-z0-9_])"
        return value in self.text and re.search(pattern, self.text) is not None


def _row_identifiers(runtime: WorldRuntime, table: str, key: Any) -> list[Identifier]:
    declared, anchor = runtime.world.state.table(table), runtime.world.state.anchor(table)
    if declared is None:
        return []
    natural = [c for c in (anchor.natural_keys if anchor else ()) if c not in declared.key_columns]
    columns = [*declared.key_columns, *natural]
    select = ", ".join(quote_identifier(c) for c in columns)
    with runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {select} FROM {quote_identifier(table)} WHERE {key_where(declared)}",
                           key_parameters(declared, key)).fetchone()
    if row is None:
        return []
    shared = {c for c in natural if not _declared_unique(runtime, table, c)}
    found = [Identifier(table, column, text, value, column in shared)
             for column, value in zip(columns, row, strict=True) if (text := identifying_text(value)) is not None]
    return list(dict.fromkeys(found))


def case_identifiers(runtime: WorldRuntime, sides: Sides, case: Case) -> list[Identifier]:
    """Identifiers of the rows ``case`` touches: its anchor row, the rows its chain names, and their entity roots."""
    rows: list[tuple[str, Any]] = []
    for table, key in case.instance.anchors_touched:
        rows += [(table, key), sides.entities.root(table, key)]
    unique = {(table, canonical_json(key)): (table, key) for table, key in rows}
    return [identifier for table, key in unique.values() for identifier in _row_identifiers(runtime, table, key)]


def _case_text(case: Case) -> str:
    task = case.instance.task
    return "\n".join([task.instruction, *(turn.user for turn in task.turns), task.answer or ""])


def training_text(rows: Iterable[dict[str, Any]]) -> str:
    """The text of the training rows a held-out identifier must not appear in (every non-system message)."""
    return "\n".join(json.dumps([m for m in row["messages"] if m.get("role") != "system"], ensure_ascii=False,
                                sort_keys=True) for row in rows)


def identifier_leaks(runtime: WorldRuntime, sides: Sides, held_out: list[Case],
                     rows: list[dict[str, Any]]) -> tuple[int, list[tuple[str, Identifier]]]:
    """(identifiers the held-out prompts and answer keys state, [(case id, identifier) also in training rows])."""
    training = _Text(training_text(rows))
    stated, known = 0, dict[Identifier, bool]()
    leaks: list[tuple[str, Identifier]] = []
    for case in held_out:
        text = _Text(_case_text(case))
        for identifier in case_identifiers(runtime, sides, case):
            if text.states(identifier.text) and names_one_row(runtime, identifier, known):
                stated += 1
                if training.states(identifier.text):
                    leaks.append((case.case_id, identifier))
    return stated, leaks


def held_out_stated(runtime: WorldRuntime, sides: Sides, held_out: list[Case]) -> list[str]:
    """The identifiers held-out cases state (their instruction, customer turns or answer key), sorted."""
    stated: set[str] = set()
    known: dict[Identifier, bool] = {}
    for case in held_out:
        text = _Text(_case_text(case))
        stated |= {i.text for i in case_identifiers(runtime, sides, case)
                   if text.states(i.text) and names_one_row(runtime, i, known)}
    return sorted(stated)


def states_any(row: dict[str, Any], values: Iterable[str]) -> bool:
    """Whether the training text of ``row`` (:func:`training_text`) states any of ``values`` as a whole token."""
    text = _Text(training_text([row]))
    return any(text.states(value) for value in values)


def withhold_training(runtime: WorldRuntime, sides: Sides, train: list[Case], held_out: list[Case],
                      rows: list[dict[str, Any]]) -> tuple[list[Case], list[dict[str, Any]]]:
    """Training cases and rows less those whose executed row states an identifier a held-out case states.

    Entities keep a customer's rows on one side, but rows of shared reference data (a flight every booking
    on it names, a product in many orders) are their own entities and still appear in other entities'
    observations; a training row that states such a held-out identifier is withheld with its case.
    """
    stated = held_out_stated(runtime, sides, held_out)
    withheld = {row["metadata"]["case_id"] for row in rows if states_any(row, stated)}
    return ([case for case in train if case.case_id not in withheld],
            [row for row in rows if row["metadata"]["case_id"] not in withheld])


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def max_similarity(train: Iterable[str], held_out: Iterable[str]) -> float:
    """Highest Jaccard similarity of word sets between any train and any eval instruction."""
    train_sets = {frozenset(_tokens(text)) for text in train}
    best = 0.0
    for text in held_out:
        tokens = _tokens(text)
        for other in train_sets:
            union = len(tokens | other)
            if union:
                best = max(best, len(tokens & other) / union)
    return round(best, 4)


def case_entities(cases: list[Case]) -> int:
    """The independent entities ``cases`` rest on: distinct entities of their anchor rows (``Instance.entity``, the
    ``entity`` each kit case records and evaluation counts). The one definition of an entity count."""
    return len({case.instance.entity for case in cases})


def leakage_report(runtime: WorldRuntime, sides: Sides, train: list[Case], held_out: list[Case],
                   rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Shared entities and anchors (must be 0), held-out identifiers in training rows (must be 0), and the most
    similar instruction pair."""
    touched_train = {(t, canonical_json(k)) for case in train for t, k in case.instance.anchors_touched}
    touched_eval = {(t, canonical_json(k)) for case in held_out for t, k in case.instance.anchors_touched}
    touched_entities_train = {sides.entity(t, k) for case in train for t, k in case.instance.anchors_touched}
    touched_entities_eval = {sides.entity(t, k) for case in held_out for t, k in case.instance.anchors_touched}
    stated, leaks = identifier_leaks(runtime, sides, held_out, rows)
    return {
        "shared_entities": len(touched_entities_train & touched_entities_eval),
        "train_entities": case_entities(train),
        "eval_entities": case_entities(held_out),
        "shared_anchors": len(touched_train & touched_eval),
        "train_anchors": len(touched_train),
        "eval_anchors": len(touched_eval),
        "held_out_identifiers": stated,
        "held_out_identifiers_in_training": len(leaks),
        "held_out_cases_with_identifiers_in_training": len({case_id for case_id, _ in leaks}),
        "identifier_examples": [f"{identifier} (case {case_id})" for case_id, identifier in sorted(
            leaks, key=lambda leak: (leak[0], str(leak[1])))[:5]],
        "identifier_rule": IDENTIFIER_RULE,
        "entity_rule": "a row belongs to the root row reached by following owning foreign keys (each table's "
                       "declared owner, or its only reference to another table); train_entities and eval_entities "
                       "count the cases' entities (each case's anchor row's), as evaluation does; shared_entities "
                       "the entities of every row cases on both sides touch",
        "max_instruction_similarity": max_similarity(
            (c.instance.task.instruction for c in train), (c.instance.task.instruction for c in held_out)),
        "similarity_measure": "Jaccard similarity of lowercase word sets (ids differ by construction)",
    }
