"""Filling a write's arguments besides the row's key: from the state, or from the values the tool declares.

Minting threads the anchor row's key into a write; the write's other required parameters are filled by one
*rule* each, found when a spec is discovered (:func:`fill_rules`) and applied per row (:func:`fill`):

=============  =====================================================================================
rule           the value
=============  =====================================================================================
``row``        a column of the looked-up row (the parameter is anchored to a non-key column of the
               anchor table: a fine's amount, a loan's due date), threaded from the lookup's observation
``customer``   a column of the identified customer's row (anchored to the identity table: a card
               number), threaded from the identification's observation
``choice``     one of the parameter's ``enum`` or ``examples`` values, the first that differs from the
               row's current value of a column of the same name (so the write changes something); the
               customer states it in the request
``owned``      one of the identified customer's own rows of another table (anchored to a column of a
               table whose owner references the identity table: pay with another of *your* payment
               methods), the first by key that the looked-up row does not already hold; the customer
               states it
``children``   a list argument (``type: array``) anchored to a column of a table whose owner references
               the anchor table: that column of the row's own child rows (the items of this order), the
               first :data:`MAX_LISTED` by key; the customer states them
=============  =====================================================================================

The ``owned`` and ``children`` values are read from the seed by the owner column, at most a few rows per case
(:class:`SeedRows`), never a scan per task over the whole table.

A required parameter no rule can fill makes the tool unmintable, and coverage says which parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from world_format.entities import owning_reference
from world_format.models import Tool, World
from world_format.procedures import identification

from .addressing import threaded

Rule = tuple[str, Any]
"""("row", column), ("customer", column), ("choice", [values]), or ("owned" | "children", [table, column, owner
column, the owner's referenced column])."""
MAX_LISTED = 2
"""Most child rows a minted list argument names (a return of two items of an order)."""
SeedRows = Callable[[str, str, str, Any], list[Any]]
"""(table, column, owner column, owner value) → that column of the table's rows whose owner column holds the value,
in key order, at most a few (read from the starting state)."""


def required(tool: Tool) -> list[str]:
    """The tool's required parameter names."""
    names = tool.parameters.get("required", [])
    return [str(name) for name in names] if isinstance(names, list) else []


def _rule(world: World, tool: Tool, name: str, anchor_table: str) -> Rule | None:
    target = tool.anchors.get(name)
    if target is not None:
        table, column = target.split(".")
        declared = world.state.table(table)
        ident = identification(world)
        if table == anchor_table and declared is not None and column not in declared.key_columns:
            return ("row", column)
        if ident is not None and table == ident.table:
            return ("customer", column)
        prop = tool.parameters.get("properties", {}).get(name, {})
        owner = owning_reference(declared) if declared is not None else None
        parent, _, parent_column = (owner.references or "").partition(".") if owner is not None else ("", "", "")
        if owner is not None and isinstance(prop, dict) and prop.get("type") == "array" and parent == anchor_table:
            return ("children", [table, column, owner.name, parent_column])
        if owner is not None and ident is not None and parent == ident.table and prop.get("type") != "array":
            return ("owned", [table, column, owner.name, parent_column])
    prop = tool.parameters.get("properties", {}).get(name, {})
    options = prop.get("enum") or prop.get("examples") if isinstance(prop, dict) else None
    return ("choice", list(options)) if options else None


def fill_rules(world: World, tool: Tool, key: str | tuple[str, ...],
               anchor_table: str) -> tuple[tuple[str, Rule], ...] | None:
    """A rule for each required non-key parameter of ``tool`` (in declaration order); None when one has none."""
    skip = {key} if isinstance(key, str) else set(key)
    rules = []
    for name in required(tool):
        if name in skip:
            continue
        rule = _rule(world, tool, name, anchor_table)
        if rule is None:
            return None
        rules.append((name, rule))
    return tuple(rules)


def unfillable(world: World, tool: Tool, key: str | tuple[str, ...], anchor_table: str) -> str | None:
    """The first required non-key parameter no rule can fill (None when every one can)."""
    skip = {key} if isinstance(key, str) else set(key)
    return next((name for name in required(tool) if name not in skip
                 and _rule(world, tool, name, anchor_table) is None), None)


_PLACEHOLDERS: dict[str, Any] = {"integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}


def placeholder(tool: Tool, rules: tuple[tuple[str, Rule], ...]) -> dict[str, Any]:
    """Values for the rules' parameters that type-check (the first choice, else one of the declared type), for
    trial calls."""
    properties = tool.parameters.get("properties", {})
    values = {}
    for name, (kind, detail) in rules:
        declared = properties.get(name, {}).get("type") if isinstance(properties.get(name), dict) else None
        values[name] = detail[0] if kind == "choice" else _PLACEHOLDERS.get(str(declared), "x")
        if kind == "children":
            values[name] = []
    return values


def _drawn(kind: str, detail: list[str], row: dict[str, Any], customer: dict[str, Any] | None,
           seed_rows: SeedRows) -> Any:
    """The value an ``owned`` or ``children`` rule draws from the seed (None: the state holds none)."""
    table, column, owner, parent_column = detail
    source = row if kind == "children" else (customer or {})
    if source.get(parent_column) is None:
        return None
    values = seed_rows(table, column, owner, source[parent_column])
    if kind == "children":
        return values[:MAX_LISTED] or None
    held = list(row.values())
    return next((value for value in values if value not in held), None)


def fill(rules: tuple[tuple[str, Rule], ...], row: dict[str, Any], row_step: int, customer: dict[str, Any] | None,
         customer_step: int | None, seed_rows: SeedRows | None = None,
         ) -> tuple[dict[str, Any], dict[str, Any], tuple[tuple[str, Any], ...]] | None:
    """(threaded arguments for the chain, literal arguments for the verifier, the values the customer states) for
    one row, given the looked-up ``row`` (observation of step ``row_step``), the identified ``customer`` and
    ``seed_rows`` (for ``owned`` and ``children`` rules); None when a value is missing from the state."""
    chain: dict[str, Any] = {}
    literal: dict[str, Any] = {}
    stated: list[tuple[str, Any]] = []
    for name, (kind, detail) in rules:
        step: int | None = row_step
        source = row
        if kind in ("owned", "children"):
            value = _drawn(kind, detail, row, customer, seed_rows) if seed_rows is not None else None
            if value is None:
                return None
            chain[name] = literal[name] = value
            stated.append((name, value))
            continue
        if kind == "customer":
            source, step = customer or {}, customer_step
        elif kind == "choice":
            current = row.get(name)
            value = next((option for option in detail if option != current), detail[0])
            chain[name] = literal[name] = value
            stated.append((name, value))
            continue
        if step is None or source.get(detail) is None:
            return None
        chain[name], literal[name] = threaded(step, detail), source[detail]
    return chain, literal, tuple(stated)
