"""Row keys: a scalar for a table with one primary-key column, an object for a composite key.

``{"order_id": 5123, "position": 0}`` names a line item of a table keyed by (order_id, position);
``7`` names an order keyed by id. Everything that addresses a row — anchors, ``unchanged_except``,
the runtime's change log, minting and the split — goes through these helpers.
"""

from __future__ import annotations

import json
from typing import Any

from world_format.errors import WorldFormatError

from .models import Table
from .state import normalize_value, quote_identifier


def key_where(table: Table) -> str:
    """``"a" = ? AND "b" = ?``: the condition that selects one row by its key (positional parameters)."""
    return " AND ".join(f"{quote_identifier(column)} = ?" for column in table.key_columns)


def key_parameters(table: Table, key: Any) -> tuple[Any, ...]:
    """The values :func:`key_where` binds for ``key`` (which must have the table's shape)."""
    if not table.composite:
        return (key,)
    return tuple(key[column] for column in table.key_columns)


def key_expression(table: Table, row: str) -> str:
    """SQL giving a row's key as a value: the column, or a JSON object of the key columns (``row`` is NEW/OLD/a
    table alias)."""
    if not table.composite:
        return f"{row}.{quote_identifier(table.key_columns[0])}"
    pairs = ", ".join(f"'{column}', {row}.{quote_identifier(column)}" for column in table.key_columns)
    return f"json_object({pairs})"


def key_from_sql(table: Table, value: Any) -> Any:
    """A key as :func:`key_expression` returned it, back to its JSON shape."""
    return json.loads(value) if table.composite else value


def normalize_key(key: Any) -> Any:
    """A key with every value normalised (integral reals as integers), for comparison and hashing."""
    if isinstance(key, dict):
        return {name: normalize_value(value) for name, value in sorted(key.items())}
    return normalize_value(key)


def check_key(table: Table, key: Any, where: str) -> None:
    """WorldFormatError unless ``key`` has the table's key shape (an object with exactly its key columns, or not)."""
    if table.composite:
        if not isinstance(key, dict):
            raise WorldFormatError(f"{where}: table {table.name!r} has a composite key: give an object with "
                                   f"{list(table.key_columns)}")
        missing = [column for column in table.key_columns if column not in key]
        extra = sorted(set(key) - set(table.key_columns))
        if missing or extra:
            problem = f"lacks key column {missing[0]!r}" if missing else f"has {extra[0]!r}, not a key column"
            raise WorldFormatError(f"{where}: the key of a {table.name!r} row {problem} "
                                   f"(key columns: {list(table.key_columns)})")
    elif isinstance(key, dict | list):
        raise WorldFormatError(f"{where}: table {table.name!r} is keyed by {table.key_columns[0]!r} alone: give "
                               "one value")
