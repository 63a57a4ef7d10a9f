"""Declared text keys: the values a world's TEXT key columns hold, which are text even when they are all digits.

An ISBN ``"9786517269898"``, a postcode or a ticket number stored as TEXT names a row; an answer that repeats one
is naming that row, not stating a second number. A *text key column* is a TEXT column that is (part of) a primary
key, ``unique``, one of an anchor's ``natural_keys``, or the target of a tool parameter's ``anchors`` entry.
"""

from __future__ import annotations

from .models import World
from .runtime import FieldValues, WorldRuntime
from .state import quote_identifier


def key_columns(world: World) -> list[tuple[str, str]]:
    """(table, column) of every key column of the world, in declaration order: (part of) a primary key, ``unique``,
    one of an anchor's ``natural_keys``, or the target of a tool parameter's ``anchors`` entry."""
    named = {tuple(target.split(".", 1)) for tool in world.tools for target in tool.anchors.values()}
    found = []
    for table in world.state.tables:
        anchor = world.state.anchor(table.name)
        natural = set(anchor.natural_keys) if anchor else set()
        for column in table.columns:
            if column.primary_key or column.unique or column.name in natural or (table.name, column.name) in named:
                found.append((table.name, column.name))
    return found


def text_key_columns(world: World) -> list[tuple[str, str]]:
    """(table, column) of every text key column of the world (:func:`key_columns` of type TEXT), in declaration
    order."""
    types = {(table.name, column.name): column.type for table in world.state.tables for column in table.columns}
    return [key for key in key_columns(world) if types[key] == "TEXT"]


MEMO_KEY = "text_key_values"


def _letterless_values(runtime: WorldRuntime, table: str, column: str) -> FieldValues:
    """The values of ``table.column`` in the starting state that hold no ASCII letter, as :class:`FieldValues`
    (read once per runtime and its forks, :attr:`WorldRuntime.memo`).

    A value with an ASCII letter keeps it in its normalized text (:func:`world_format.values.normalize_text`), so
    only these can be read as all digits: SQLite's scan leaves the others out (an email, a SKU) unread.
    """
    memo = runtime.memo.setdefault(MEMO_KEY, {})
    found = memo.get((table, column))
    if found is None:
        name = quote_identifier(column)
        rows = runtime.pristine.execute(f"SELECT DISTINCT {name} FROM {quote_identifier(table)} WHERE {name} IS NOT "
                                        f"NULL AND NOT (typeof({name}) = 'text' AND {name} GLOB '*[A-Za-z]*')")
        found = memo[(table, column)] = FieldValues.of(value for (value,) in rows)
    return found


def is_text_key(runtime: WorldRuntime, text: str) -> bool:
    """Whether ``text``, all digits, is a value some text key column holds in the starting state (the normalized
    text of one of its values: each column's values that could be read once per runtime)."""
    if not text.isdigit():
        return False
    return any(text in _letterless_values(runtime, table, column).by_first_token.get(text, ())
               for table, column in text_key_columns(runtime.world))
