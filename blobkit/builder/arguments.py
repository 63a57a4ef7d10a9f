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
=============  =====================================================================================

A required parameter no rule can fill makes the tool unmintable, and coverage says which parameter.
"""

from __future__ import annotations

from typing import Any

from world_format.models import Tool, World
from world_format.procedures import identification

from .addressing import threaded

Rule = tuple[str, Any]
"""("row", column), ("customer", column) or ("choice", [values])."""


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
    return values


def fill(rules: tuple[tuple[str, Rule], ...], row: dict[str, Any], row_step: int, customer: dict[str, Any] | None,
         customer_step: int | None) -> tuple[dict[str, Any], dict[str, Any], tuple[tuple[str, Any], ...]] | None:
    """(threaded arguments for the chain, literal arguments for the verifier, the values the customer states) for
    one row, given the looked-up ``row`` (observation of step ``row_step``) and the identified ``customer``; None
    when a value is missing from the state."""
    chain: dict[str, Any] = {}
    literal: dict[str, Any] = {}
    stated: list[tuple[str, Any]] = []
    for name, (kind, detail) in rules:
        step: int | None = row_step
        source = row
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
