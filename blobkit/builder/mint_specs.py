"""Task specs: which templates a world's tools and anchors can make, each bound to its tools and fields.

A :class:`TaskSpec` is a template bound to an anchor table and the tools that play its roles (the
lookup, the list, the write...), with the parameters that name an anchor row: one parameter for a
table with a single-column key, one per key column for a composite key (``{"order_id": …,
"position": …}``). :func:`discover_specs` finds every spec a world supports; :func:`select_specs`
picks a seeded, varied few.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from world_format.canonical import content_id
from world_format.handoff import handoff_target
from world_format.models import Anchor, Table, Tool, World
from world_format.procedures import identifications

from .arguments import fill_rules

KeyParams = str | tuple[str, ...]
"""The parameter (single-column key) or parameters (composite key, in key order) naming an anchor row."""
Roles = tuple[tuple[str, KeyParams], ...]
"""A spec's bindings: (role, tool name) and (role + "_param", the key parameters of that tool)."""

TEMPLATES = ("lookup_field", "find_then_read", "write_ok", "write_refused", "aggregate_count", "aggregate_total",
             "write_confirmed", "handoff")
"""Minting templates, in the order specs rotate over them (write_confirmed: a write the customer must confirm;
handoff: a request the world's hand-off rule sends to a human)."""

WORDINGS: dict[str, tuple[str, ...]] = {
    "lookup_field": ("What is the {field} of {named}?", "Can you tell me the {field} for {named}?",
                     "Please look up the {field} of {named}."),
    "find_then_read": ("How many {noun} does {named} have?", "Can you tell me how many {noun} {named} has?",
                       "Please count the {noun} of {named}."),
    "write_ok": ("Please {action}{details}.", "Could you {action}{details} for me?",
                 "I'd like you to {action}{details}."),
    "aggregate_count": ("How many {noun} does {named} have?", "Count the {noun} of {named}, please.",
                        "What is the number of {noun} for {named}?"),
    "aggregate_total": ("What does the {field} add up to across the {noun} of {named}?",
                        "Add up the {field} of all {noun} for {named}.",
                        "Sum the {field} over the {noun} of {named}, please."),
}
"""Three phrasings per template ({named}: the row as the customer names it, e.g. "my order 50123"; {action}: the
write's action applied to it, "cancel my order 50123")."""
WORDINGS["write_refused"] = WORDINGS["write_ok"]
WORDINGS["write_confirmed"] = WORDINGS["write_ok"]


@dataclass(frozen=True)
class TaskSpec:
    """A task family: a template bound to an anchor table, tools and (maybe) a field."""

    template: str
    anchor: str
    tools: tuple[tuple[str, KeyParams], ...]
    field: str | None = None
    extras: tuple[tuple[str, Any], ...] = ()

    @property
    def task_id(self) -> str:
        """Content hash of the family definition."""
        return content_id({"template": self.template, "anchor": self.anchor, "tools": list(self.tools),
                           "field": self.field, "extras": [list(item) for item in self.extras]}, "t-")

    def tool(self, role: str) -> str:
        """The tool playing ``role`` (lookup, find, list, write...)."""
        name = dict(self.tools)[role]
        assert isinstance(name, str)
        return name

    def params(self, role: str) -> tuple[str, ...]:
        """The parameters that name the anchor row in the call of the tool playing ``role``, one per key column."""
        bound = dict(self.tools)[role + "_param"]
        return (bound,) if isinstance(bound, str) else tuple(bound)

    def param(self, role: str) -> str:
        """The one parameter naming a natural-key or single-column-key row for ``role``."""
        params = self.params(role)
        assert len(params) == 1, f"{role} is bound to a composite key {params}"
        return params[0]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"template": self.template, "anchor": self.anchor, "tools": dict(self.tools), "field": self.field,
                "extras": dict(self.extras)}


def _anchor_params(tool: Tool, table: str, column: str) -> list[str]:
    return [name for name, ref in tool.anchors.items() if ref == f"{table}.{column}"]


def _required(tool: Tool) -> list[str]:
    required = tool.parameters.get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def key_table(world: World, table: str) -> Table:
    """The declared anchor table."""
    declared = world.state.table(table)
    assert declared is not None
    return declared


def key_params(tool: Tool, table: Table) -> KeyParams | None:
    """The tool's parameters naming a row of ``table`` by its key: one name, or one per key column of a composite
    key (in key order); None when the tool cannot name such a row."""
    found = []
    properties = tool.parameters.get("properties", {})
    for column in table.key_columns:  # a list argument of such keys names several rows, not the row
        params = [p for p in _anchor_params(tool, table.name, column)
                  if not (isinstance(properties.get(p), dict) and properties[p].get("type") == "array")]
        if not params:
            return None
        found.append(params[0])
    return found[0] if len(found) == 1 else tuple(found)


def _keyed_tools(world: World, anchor: Anchor, effect: str,
                 shapes: tuple[str, ...]) -> Iterator[tuple[Tool, KeyParams]]:
    table = key_table(world, anchor.table)
    for tool in world.tools:
        if tool.effect != effect or tool.result.shape not in shapes:
            continue
        params = key_params(tool, table)
        if params is not None:
            yield tool, params


def discover_specs(world: World) -> dict[str, list[TaskSpec]]:
    """Every spec each template can make from the world, grouped by template."""
    found: dict[str, list[TaskSpec]] = {template: [] for template in TEMPLATES}
    identifying = {ident.tool for ident in identifications(world)}
    for anchor in world.state.anchors:
        lookups = list(_keyed_tools(world, anchor, "read", ("row",)))
        lists = [(t, p) for t, p in _keyed_tools(world, anchor, "read", ("rows",)) if t.result_noun]
        for tool, param in lookups:
            if len(_required(tool)) == (1 if isinstance(param, str) else len(param)):
                for column in anchor.answer_fields:
                    found["lookup_field"].append(TaskSpec("lookup_field", anchor.table,
                                                          (("lookup", tool.name), ("lookup_param", param)), column))
        for natural in anchor.natural_keys if not key_table(world, anchor.table).composite else ():
            for finder in world.tools:
                finder_params = _anchor_params(finder, anchor.table, natural)
                identifies = finder.name in identifying  # the identification step finds them
                if finder.effect == "read" and finder.result.shape == "row" and finder_params and not identifies:
                    for lister, list_param in lists:
                        roles: Roles = (("find", finder.name), ("find_param", finder_params[0]), ("list", lister.name),
                                 ("list_param", list_param))
                        found["find_then_read"].append(TaskSpec("find_then_read", anchor.table, roles, natural))
        for lister, param in lists:
            roles = (("list", lister.name), ("list_param", param))
            found["aggregate_count"].append(TaskSpec("aggregate_count", anchor.table, roles))
            found["aggregate_total"].append(TaskSpec("aggregate_total", anchor.table, roles))
        if lookups:
            lookup, lookup_param = lookups[0]
            for writer, param in _keyed_tools(world, anchor, "write", ("row", "rows", "affected")):
                extras = fill_rules(world, writer, param, anchor.table)
                if extras is None or not writer.preconditions:
                    continue
                roles = (("lookup", lookup.name), ("lookup_param", lookup_param), ("write", writer.name),
                         ("write_param", param))
                for template in ("write_confirmed" if writer.confirm else "write_ok", "write_refused"):
                    found[template].append(TaskSpec(template, anchor.table, roles, None, extras))
    found["handoff"] = _handoff_specs(world)
    return found


def _handoff_specs(world: World) -> list[TaskSpec]:
    """The hand-off spec of the world's declared hand-off rule (none without one)."""
    rule = world.procedures.handoff
    tool = world.tool(rule.tool) if rule is not None else None
    target = handoff_target(world, tool) if tool is not None else None
    if tool is None or target is None:
        return []
    return [TaskSpec("handoff", target.table, (("handoff", tool.name), ("handoff_param", target.key_params)))]


def select_specs(world: World, count: int, seed: int) -> list[TaskSpec]:
    """Up to ``count`` specs, rotating over templates so kits are not monotonous (seeded)."""
    found = discover_specs(world)
    rng = random.Random(f"{seed}:select")
    queues = {template: rng.sample(found[template], len(found[template])) for template in TEMPLATES}
    chosen: list[TaskSpec] = []
    while len(chosen) < count and any(queues.values()):
        for template in TEMPLATES:
            if queues[template] and len(chosen) < count:
                chosen.append(queues[template].pop())
    return chosen


