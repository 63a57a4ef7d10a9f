"""Checks on a world's declaration alone (no database needed), run before a seed is built or read.

Names follow SQLite's rules: identifiers are case-insensitive, so two tables (or two columns of one
table, or two tools) may not differ only by case, and names starting with ``sqlite_`` are reserved
for SQLite's own tables. A foreign key must point at a column SQLite accepts as a parent key (the
parent's primary key or a unique column), or SQLite would refuse the first child row and the error
would blame that row instead of the declaration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from world_format.errors import WorldFormatError

from .confirmation import check_confirmations
from .control import control_strings_in
from .entities import owner_problem
from .handoff import check_handoff
from .models import World
from .procedures import check_procedures

RESERVED_PREFIX = "sqlite_"


def _duplicate(names: list[str]) -> str | None:
    """The first name that repeats an earlier one, ignoring case (as SQLite does)."""
    seen: set[str] = set()
    for name in names:
        if name.casefold() in seen:
            return name
        seen.add(name.casefold())
    return None


def _check_names(world: World, source: str) -> None:
    state = world.state
    named = [("tool", [t.name for t in world.tools]), ("table, index, view or trigger",
             [t.name for t in state.tables] + [i.name for i in state.indexes] + [v.name for v in state.views]
             + [t.name for t in state.triggers]), ("anchor", [a.table for a in state.anchors])]
    for what, names in named:
        duplicate = _duplicate(names)
        if duplicate:
            raise WorldFormatError(f"{source}: duplicate {what} name {duplicate!r} (SQLite names ignore case)")
    for index, table in enumerate(state.tables):
        if table.name.casefold().startswith(RESERVED_PREFIX):
            raise WorldFormatError(f"{source}: /state/tables/{index}/name: {table.name!r} is reserved: SQLite keeps "
                                   f"names starting with {RESERVED_PREFIX!r} for its own tables; rename the table")
        duplicate = _duplicate([column.name for column in table.columns])
        if duplicate:
            raise WorldFormatError(f"{source}: /state/tables/{index}: duplicate column name {duplicate!r} "
                                   "(SQLite names ignore case)")
    for index, declared in enumerate(state.indexes):
        for column in declared.columns:
            check_column_ref(world, f"{declared.table}.{column}", f"{source}: /state/indexes/{index}")
    entries_by_kind: list[tuple[str, list[str]]] = [
        ("indexes", [i.name for i in state.indexes]), ("views", [v.name for v in state.views]),
        ("triggers", [t.name for t in state.triggers])]
    for kind, entries in entries_by_kind:
        for index, name in enumerate(entries):
            if name.casefold().startswith(RESERVED_PREFIX):
                raise WorldFormatError(f"{source}: /state/{kind}/{index}/name: {name!r} is reserved by SQLite")


def check_column_ref(world: World, ref: str, where: str) -> None:
    """``ref`` ("table.column") names a declared column."""
    table_name, _, column = ref.partition(".")
    table = world.state.table(table_name)
    if table is None or column not in {c.name for c in table.columns}:
        raise WorldFormatError(f"{where}: {ref!r} is not a declared table.column")


def _check_foreign_keys(world: World, source: str) -> None:
    for t_index, table in enumerate(world.state.tables):
        problem = owner_problem(table)
        if problem is not None:
            raise WorldFormatError(f"{source}: /state/tables/{t_index}/owner: {problem}")
        for c_index, column in enumerate(table.columns):
            if not column.references:
                continue
            where = f"{source}: /state/tables/{t_index}/columns/{c_index}/references"
            check_column_ref(world, column.references, where)
            parent_name, _, parent_column = column.references.partition(".")
            parent = world.state.table(parent_name)
            assert parent is not None
            target = next(c for c in parent.columns if c.name == parent_column)
            if not (target.primary_key or target.unique):
                raise WorldFormatError(f"{where}: {column.references!r} is neither the primary key of "
                                       f"{parent_name!r} nor a unique column, so SQLite cannot use it as a parent "
                                       "key; point the reference at a key, or declare the column unique")


def _check_anchors(world: World, source: str) -> None:
    for index, anchor in enumerate(world.state.anchors):
        where = f"{source}: /state/anchors/{index}"
        if world.state.table(anchor.table) is None:
            raise WorldFormatError(f"{where}/table: anchor table {anchor.table!r} is not declared")
        for name in (*anchor.natural_keys, *anchor.answer_fields):
            check_column_ref(world, f"{anchor.table}.{name}", where)
        if anchor.named_as is not None:
            table = world.state.table(anchor.table)
            assert table is not None
            slots = re.findall(r"\{([^{}]*)\}", anchor.named_as)
            if sorted(set(slots)) != sorted(table.key_columns):
                raise WorldFormatError(f"{where}/named_as: name every key column of {anchor.table!r} once as a "
                                       f"{{column}} slot ({list(table.key_columns)}); found {slots}")


def _shown_texts(world: World) -> Iterator[tuple[str, str]]:
    """(JSON pointer, text) of every authored text a model is shown: policies, identity, tools, tasks."""
    yield "/identity/name", world.identity.name
    yield "/identity/description", world.identity.description
    for index, policy in enumerate(world.policies):
        yield f"/policies/{index}", policy
    for index, tool in enumerate(world.tools):
        yield from _strings(tool.parameters, f"/tools/{index}/parameters")
        yield f"/tools/{index}/description", tool.description
        for p_index, precondition in enumerate(tool.preconditions):
            if precondition.explanation:
                yield f"/tools/{index}/preconditions/{p_index}/explanation", precondition.explanation
        if tool.counts_exclude is not None:
            yield f"/tools/{index}/counts_exclude/wording", tool.counts_exclude.wording
    for t_index, table in enumerate(world.state.tables):
        for c_index, column in enumerate(table.columns):
            for name, text in (("label", column.label), ("currency", column.currency)):
                if text:
                    yield f"/state/tables/{t_index}/columns/{c_index}/{name}", text
    for index, task in enumerate(world.tasks):
        yield f"/tasks/{index}/instruction", task.instruction
        if task.answer is not None:
            yield f"/tasks/{index}/answer", task.answer


def _strings(value: Any, pointer: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{pointer}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{pointer}/{index}")


def _check_text(world: World, source: str) -> None:
    for pointer, text in _shown_texts(world):
        found = control_strings_in(text)
        if found:
            raise WorldFormatError(f"{source}: {pointer}: carries the chat control string {found[0]!r}, which would "
                                   "become real control syntax in a chat template; reword it")


_DEFAULT_TYPES: dict[str, tuple[type, ...]] = {"INTEGER": (int,), "REAL": (int, float), "TEXT": (str,), "BLOB": ()}


def _check_columns(world: World, source: str) -> None:
    """json_data only on TEXT columns; a default of the column's own type (valid JSON for a json_data column)."""
    for t, table in enumerate(world.state.tables):
        for c, column in enumerate(table.columns):
            where = f"{source}: /state/tables/{t}/columns/{c}"
            if column.json_data and column.type != "TEXT":
                raise WorldFormatError(f"{where}/json_data: JSON is stored in TEXT columns, not {column.type}")
            if (column.currency or column.minor_units) and column.type not in ("INTEGER", "REAL"):
                raise WorldFormatError(f"{where}/currency: money is stored in INTEGER or REAL columns, not "
                                       f"{column.type}")
            if column.minor_units and not column.decimals:
                raise WorldFormatError(f"{where}/minor_units: give decimals (2 for cents) so wording can quote the "
                                       "amount in the currency's major unit")
            default = column.default
            if default is None:
                continue
            if isinstance(default, bool) or not isinstance(default, _DEFAULT_TYPES[column.type]):
                raise WorldFormatError(f"{where}/default: {default!r} does not fit a {column.type} column")
            if column.json_data:
                try:
                    json.loads(str(default))
                except ValueError:
                    raise WorldFormatError(f"{where}/default: {default!r} is not valid JSON text") from None


def check_declaration(world: World, source: str) -> None:
    """Raise WorldFormatError (naming the JSON pointer) for the first problem of the declaration itself."""
    _check_names(world, source)
    _check_columns(world, source)
    _check_anchors(world, source)
    _check_foreign_keys(world, source)
    check_procedures(world, source)
    check_handoff(world, source)
    check_confirmations(world, source)
    _check_text(world, source)
