"""Which customers a text names by a natural key: the identity table's natural-key values, found on demand.

The procedure check (:mod:`world_format.procedure_check`) fails an agent that states a natural-key value (an email)
only other customers hold. Which values a text states is found by their normalized text
(:func:`world_format.values.normalize_text`), by first token. Most values of a natural key are their own normalized
text (``ana.lee@example.com``): those are found by the column's index, one lookup per token of the text; the
others (``Ana Lee``, ``ANA@EXAMPLE.COM``) are read and normalized once, found by a scan SQLite runs with a pattern
that only their rows fail. A natural key without an index is read whole, once.
"""

from __future__ import annotations

from typing import Any

from .canonical import canonical_json
from .keys import key_expression, key_from_sql, normalize_key
from .models import Table, World
from .seed_copy import SeedCopy
from .state import quote_identifier
from .values import normalize_text

MIN_REVEALED_CHARS = 4
"""A natural-key value shorter than this is not looked for in what the agent says (it could be any word)."""

Holders = tuple[tuple[str, frozenset[str]], ...]
"""Values whose normalized text starts with one token, sorted: (normalized value, the customers holding it)."""


def own_normal_form(column: str) -> str:
    """SQL true only for a text value :func:`~world_format.values.normalize_text` leaves unchanged: lower-case
    ASCII letters, digits, ``_`` and ``@``, with ``.`` and ``-`` only between word characters (no space)."""
    v = quote_identifier(column)
    return (f"(typeof({v}) = 'text' AND {v} <> '' AND {v} NOT GLOB '*[^a-z0-9_@.-]*' AND {v} NOT GLOB '[.-]*' "
            f"AND {v} NOT GLOB '*[.-]' AND {v} NOT GLOB '*[^a-z0-9_][.-]*' AND {v} NOT GLOB '*[.-][^a-z0-9_]*')")


def _indexed(world: World, table: Table, column: str) -> bool:
    """Whether SQLite can find the rows of ``table`` holding a value of ``column`` through an index."""
    declared = next((c for c in table.columns if c.name == column), None)
    if declared is not None and declared.unique or table.key_columns[:1] == (column,):
        return True
    return any(index.table == table.name and index.columns[0] == column for index in world.state.indexes)


class Revealing:
    """The natural-key values of the customers of ``table`` (the identity table), by the first token of their
    normalized text; each token's values are looked up the first time a text holds the token, then remembered."""

    def __init__(self, world: World, seed: SeedCopy, table: Table, columns: tuple[str, ...]) -> None:
        self._seed = seed
        self._table = table
        self._looked_up = tuple(c for c in columns if _indexed(world, table, c))
        self._read: dict[str, dict[str, set[str]]] = {}
        for column in columns:
            where = "" if column not in self._looked_up else f" WHERE NOT {own_normal_form(column)}"
            self._add(column, where)
        self._tokens: dict[str, Holders] = {}

    def _customer(self, key: Any) -> str:
        return canonical_json(normalize_key(key_from_sql(self._table, key)))

    def _add(self, column: str, where: str) -> None:
        """Normalize and remember the values of ``column`` on the rows ``where`` selects (read once)."""
        name = quote_identifier(self._table.name)
        for key, value in self._seed.rows(f"SELECT {key_expression(self._table, name)}, {quote_identifier(column)} "
                                          f"FROM {name}{where}"):
            text = normalize_text(str(value)) if value is not None else ""
            if len(text) >= MIN_REVEALED_CHARS:
                self._read.setdefault(text.split(" ", 1)[0], {}).setdefault(text, set()).add(self._customer(key))

    def holders(self, token: str) -> Holders:
        """The values whose normalized text starts with ``token`` (a token of a normalized text), sorted, each with
        the customers holding it."""
        found = self._tokens.get(token)
        if found is None:
            values = {text: set(customers) for text, customers in self._read.get(token, {}).items()}
            if len(token) >= MIN_REVEALED_CHARS:
                name = quote_identifier(self._table.name)
                for column in self._looked_up:
                    rows = self._seed.rows(f"SELECT {key_expression(self._table, name)}, {quote_identifier(column)} "
                                           f"FROM {name} WHERE {quote_identifier(column)} = ? AND "
                                           f"{own_normal_form(column)}", (token,))
                    for key, value in rows:
                        if value == token:
                            values.setdefault(token, set()).add(self._customer(key))
            found = tuple((text, frozenset(customers)) for text, customers in sorted(values.items()))
            self._tokens[token] = found
        return found
