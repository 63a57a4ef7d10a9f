"""Which customers a text names by a natural key: the identity table's natural-key values, found on demand.

The procedure check (:mod:`world_format.procedure_check`) fails an agent that states a natural-key value (an email)
only other customers hold. Which values a text states is found by their normalized text
(:func:`world_format.values.normalize_text`), by first token. Most values of a natural key are their own normalized
text (``ana.lee@example.com``): those are found by the column's index, one lookup per token of the text; the
others (``Ana Lee``, ``ANA@EXAMPLE.COM``) are normalized once, when the column is read (a pattern tells the two
kinds apart without normalizing). A natural key without an index is normalized whole, once, as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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


OWN_NORMAL_FORM = re.compile(r"(?:[a-z0-9_@]*[a-z0-9_][.-](?=[a-z0-9_]))*[a-z0-9_@]+")
"""A text :func:`~world_format.values.normalize_text` leaves unchanged (when it matches whole): lower-case ASCII
letters, digits, ``_`` and ``@``, with ``.`` and ``-`` only between two of the others but ``@`` (no space)."""


def own_normal_form(value: Any) -> bool:
    """Whether ``value`` is text that is its own normalized text (:data:`OWN_NORMAL_FORM`)."""
    return type(value) is str and OWN_NORMAL_FORM.fullmatch(value) is not None


def _indexed(world: World, table: Table, column: str) -> bool:
    """Whether SQLite can find the rows of ``table`` holding a value of ``column`` through an index."""
    declared = next((c for c in table.columns if c.name == column), None)
    if declared is not None and declared.unique or table.key_columns[:1] == (column,):
        return True
    return any(index.table == table.name and index.columns[0] == column for index in world.state.indexes)


class Revealing:
    """The natural-key values of the customers of ``table`` (the identity table), by the first token of their
    normalized text; each token's values are looked up the first time a text holds the token, then remembered."""

    def __init__(self, world: World, seed: SeedCopy, table: Table, columns: tuple[str, ...],
                 read: Callable[[str], list[Any]] | None = None) -> None:
        """``read``: runs one statement over the starting state for the columns' one full read (default: on
        ``seed``; :meth:`world_format.runtime.WorldRuntime.starting_rows` reads a runtime's idle working copy, so
        the read does not wait on the seed's background checks sharing ``seed``'s connection)."""
        self._seed = seed
        self._table = table
        self._looked_up = tuple(c for c in columns if _indexed(world, table, c))
        self._read: dict[str, dict[str, set[str]]] = {}
        for column in columns:
            self._add(read or seed.rows, column, skip_own_normal_form=column in self._looked_up)
        self._tokens: dict[str, Holders] = {}

    def _customer(self, key: Any) -> str:
        return canonical_json(normalize_key(key_from_sql(self._table, key)))

    def _add(self, read: Callable[[str], list[Any]], column: str, skip_own_normal_form: bool) -> None:
        """Normalize and remember the values of ``column`` (read once), but those that are their own normalized
        text when ``skip_own_normal_form`` (:meth:`holders` finds those by the column's index)."""
        name = quote_identifier(self._table.name)
        for key, value in read(f"SELECT {key_expression(self._table, name)}, {quote_identifier(column)} FROM {name}"):
            if skip_own_normal_form and own_normal_form(value):
                continue
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
                                           f"FROM {name} WHERE {quote_identifier(column)} = ?", (token,))
                    for key, value in rows:
                        if value == token and own_normal_form(value):
                            values.setdefault(token, set()).add(self._customer(key))
            found = tuple((text, frozenset(customers)) for text, customers in sorted(values.items()))
            self._tokens[token] = found
        return found
