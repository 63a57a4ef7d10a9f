"""Renamed seeds: a copy of a world's seed, and a task on it, with identifying values replaced consistently.

A :class:`Renaming` lists pairs ``original → renamed`` (an email, a name, a booking reference, an order number).
:func:`renamed_seed` applies it to a copy of the seed, :func:`rename_task` to a task (instruction, scripted
turns, literal arguments, verifier and answer key), so the task runs on the renamed copy as it ran on the seed.
Applying one renaming always gives the same bytes: a kit stores the renaming beside a row made on the copy
(``metadata.renaming`` of an sft.jsonl row), and ``blobkit verify`` rebuilds the copy from it and runs the row
again.

The rules, in one place:

- **in the seed**: a text value becomes the new text in every cell of a TEXT column (not ``json_data``) that holds
  exactly it, so a reference that no foreign key declares (a flight number in a booking's legs) follows; an
  integer becomes the new integer in each column :attr:`RenamedValue.columns` names and in every column that
  declares a reference to one of those (a customer id in ``orders.customer_id``);
- **in text**: each occurrence of an original as a whole token (:func:`occurs`), matched without regard to case;
  the replacement keeps an all-upper or all-lower occurrence's case;
- **in a task**: every string is renamed as text; an integer equal to a renamed integer becomes the new one.
"""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import WorldFormatError
from .models import Task, World
from .sqlguard import open_memory_copy
from .state import quote_identifier


class RenameError(WorldFormatError):
    """A renaming cannot be applied: a value of the wrong type, a column the world does not declare, or a copy of
    the seed that breaks one of its constraints once renamed."""


class RenamedValue(BaseModel):
    """One identifying value and what it becomes."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    original: str | int
    """The value as the seed holds it (text, or an integer key)."""
    renamed: str | int
    """Its replacement: the same type and shape, a value the seed holds nowhere."""
    columns: tuple[str, ...] = Field(min_length=1)
    """``table.column`` of each column the original is an identifier of (an integer is renamed there and in the
    columns that reference them; a text is renamed in every TEXT column)."""


class Renaming(BaseModel):
    """The renaming one renamed replay ran on (an sft.jsonl row's ``metadata.renaming``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    replay: int = Field(ge=1)
    """Which renamed replay of its case this is (1 to the build's ``renamed_replays``)."""
    values: tuple[RenamedValue, ...] = Field(min_length=1)
    """The values renamed, in the order they were chosen."""


_JOINED = "A-Za-z0-9_"


@lru_cache(maxsize=4096)
def _pattern_of(alternatives: str) -> re.Pattern[str]:
    """A regular expression (``alternatives``) as a whole token: not run into letters, digits or ``_``, nor joined
    to them by ``. @ + -``; case aside."""
    return re.compile(rf"(?<![{_JOINED}])(?<![{_JOINED}][.@+\-])(?:{alternatives})(?![.@+\-]?[{_JOINED}])",
                      re.IGNORECASE)


def occurs(value: str | int, text: str) -> bool:
    """Whether ``value`` (its text) occurs in ``text`` as a whole token, case aside."""
    return _pattern_of(re.escape(str(value))).search(text) is not None


def _cased(found: str, renamed: str) -> str:
    if found.isupper() and not renamed.isupper():
        return renamed.upper()
    if found.islower() and not renamed.islower():
        return renamed.lower()
    return renamed


def rename_text(text: str, renaming: Renaming) -> str:
    """``text`` with every whole-token occurrence of each original replaced, in one pass (longest originals first,
    so a replacement is never renamed again)."""
    by_text = {str(v.original).lower(): str(v.renamed) for v in renaming.values}
    alternatives = "|".join(re.escape(v) for v in sorted(by_text, key=lambda v: (-len(v), v)))
    pattern = _pattern_of(alternatives)
    return pattern.sub(lambda match: _cased(match.group(0), by_text[match.group(0).lower()]), text)


def _rename_json(value: Any, renaming: Renaming, integers: dict[int, int]) -> Any:
    if isinstance(value, str):
        return rename_text(value, renaming)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return integers.get(value, value)
    if isinstance(value, list):
        return [_rename_json(item, renaming, integers) for item in value]
    if isinstance(value, dict):
        return {key: _rename_json(item, renaming, integers) for key, item in value.items()}
    return value


def rename_task(task: Task, renaming: Renaming) -> Task:
    """The task with every string renamed as text and every renamed integer replaced (keys of objects stay)."""
    integers = {v.original: v.renamed for v in renaming.values if isinstance(v.original, int)
                and isinstance(v.renamed, int)}
    document = _rename_json(task.model_dump(mode="json", by_alias=True), renaming, integers)
    return Task.model_validate(document)


def _columns(world: World, value: RenamedValue) -> list[tuple[str, str]]:
    """The (table, column) cells ``value`` is renamed in (see the module docstring)."""
    if isinstance(value.original, str) != isinstance(value.renamed, str):
        raise RenameError(f"renaming {value.original!r} to {value.renamed!r} changes its type")
    if isinstance(value.original, str):
        return [(table.name, column.name) for table in world.state.tables for column in table.columns
                if column.type == "TEXT" and not column.json_data]
    named = []
    for target in value.columns:
        table_name, _, column_name = target.partition(".")
        table = world.state.table(table_name)
        if table is None or column_name not in {c.name for c in table.columns}:
            raise RenameError(f"renaming {value.original!r}: {target} is not a declared column")
        named.append((table_name, column_name))
    referencing = [(table.name, column.name) for table in world.state.tables for column in table.columns
                   if column.references and tuple(column.references.split(".", 1)) in set(named)]
    return list(dict.fromkeys(named + referencing))


def renamed_seed(world: World, seed: bytes, renaming: Renaming) -> bytes:
    """A copy of ``seed`` (serialized SQLite) with ``renaming`` applied; RenameError when a value is of another type
    than its replacement, names an undeclared column, or the renamed copy breaks a constraint of the seed."""
    conn = open_memory_copy(seed)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # keys and their references are renamed one after the other
        for value in renaming.values:
            for table, column in _columns(world, value):
                name = quote_identifier(column)
                conn.execute(f"UPDATE {quote_identifier(table)} SET {name} = ? WHERE {name} = ?",
                             (value.renamed, value.original))
        broken = conn.execute("PRAGMA foreign_key_check").fetchone()
        if broken is not None:
            raise RenameError(f"the renamed seed breaks a foreign key of table {broken[0]}")
        return conn.serialize()
    except sqlite3.IntegrityError as exc:
        raise RenameError(f"the renamed seed breaks a constraint: {exc}") from None
    finally:
        conn.close()
