"""Declared text keys: the values a world's TEXT key columns hold, which are text even when they are all digits.

An ISBN ``"9786517269898"``, a postcode or a ticket number stored as TEXT names a row; an answer that repeats one
is naming that row, not stating a second number. A *text key column* is a TEXT column that is (part of) a primary
key, ``unique``, one of an anchor's ``natural_keys``, or the target of a tool parameter's ``anchors`` entry.
"""

from __future__ import annotations

from .models import World
from .runtime import WorldRuntime


def text_key_columns(world: World) -> list[tuple[str, str]]:
    """(table, column) of every text key column of the world, in declaration order."""
    named = {tuple(target.split(".", 1)) for tool in world.tools for target in tool.anchors.values()}
    found = []
    for table in world.state.tables:
        anchor = world.state.anchor(table.name)
        natural = set(anchor.natural_keys) if anchor else set()
        for column in table.columns:
            keyish = column.primary_key or column.unique or column.name in natural or (table.name, column.name) in named
            if column.type == "TEXT" and keyish:
                found.append((table.name, column.name))
    return found


def is_text_key(runtime: WorldRuntime, text: str) -> bool:
    """Whether ``text``, all digits, is a value some text key column holds in the starting state (each column read
    once per runtime, :meth:`WorldRuntime.field_values`)."""
    if not text.isdigit():
        return False
    return any(text in runtime.field_values(table, column).by_first_token.get(text, ())
               for table, column in text_key_columns(runtime.world))
