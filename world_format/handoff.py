"""The hand-off rule a world declares (``procedures.handoff``), checked and resolved to the row a case is about.

A hand-off case concerns one row: the row of an anchor table the hand-off tool's key parameters name (a booking,
for ``transfer_to_human_agents(booking_id=...)``), else the identified customer's own row. :func:`handoff_target`
says which, and which parameters name it; :func:`check_handoff` refuses a rule that cannot be followed as declared
before anything runs (an unknown tool, a tool that is not pure, a required parameter nothing can fill).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WorldFormatError
from .models import Handoff, Tool, World
from .procedures import identification


@dataclass(frozen=True)
class HandoffTarget:
    """The table whose rows hand-off cases are about, and the tool's parameters naming such a row (in key order;
    empty when the case is about the identified customer's own row, which no parameter names)."""

    table: str
    key_params: tuple[str, ...]


def _required(tool: Tool) -> list[str]:
    required = tool.parameters.get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def handoff_target(world: World, tool: Tool) -> HandoffTarget | None:
    """Where hand-off cases of ``tool`` are anchored: the first anchor table (in declaration order) every key column
    of which one of its parameters is anchored to, else the identity table; None without identification."""
    for anchor in world.state.anchors:
        table = world.state.table(anchor.table)
        if table is None:
            continue
        params = []
        for column in table.key_columns:
            found = [name for name, ref in tool.anchors.items() if ref == f"{table.name}.{column}"]
            if not found:
                break
            params.append(found[0])
        else:
            return HandoffTarget(table.name, tuple(params))
    ident = identification(world)
    return HandoffTarget(ident.table, ()) if ident is not None else None


def summary_params(tool: Tool, rule: Handoff, target: HandoffTarget) -> tuple[str, ...]:
    """The required string parameters the rule leaves to the agent (a summary): neither in ``arguments`` nor
    naming the row."""
    properties = tool.parameters.get("properties", {})
    return tuple(name for name in _required(tool)
                 if name not in rule.arguments and name not in target.key_params
                 and isinstance(properties.get(name), dict) and properties[name].get("type") == "string")


def check_handoff(world: World, source: str) -> None:
    """WorldFormatError (naming /procedures/handoff/...) when the declared hand-off rule cannot be followed."""
    rule = world.procedures.handoff
    if rule is None:
        return
    where = f"{source}: /procedures/handoff"
    tool = world.tool(rule.tool)
    if tool is None:
        raise WorldFormatError(f"{where}/tool: {rule.tool!r} is not a declared tool")
    if tool.effect != "none" or tool.builtin is not None:
        raise WorldFormatError(f"{where}/tool: {rule.tool!r} must be a pure tool (\"effect\": \"none\", no builtin): "
                               f"a hand-off writes nothing; it is {tool.effect!r}"
                               + (f" with builtin {tool.builtin!r}" if tool.builtin else ""))
    if world.procedures.identify is None:
        raise WorldFormatError(f"{where}: a hand-off rule needs procedures.identify (a hand-off case is about the "
                               "identified customer)")
    properties = tool.parameters.get("properties", {})
    for name in rule.arguments:
        if name not in properties:
            raise WorldFormatError(f"{where}/arguments/{name}: {rule.tool!r} has no parameter {name!r}")
    target = handoff_target(world, tool)
    assert target is not None  # identification is declared
    filled = set(rule.arguments) | set(target.key_params) | set(summary_params(tool, rule, target))
    for name in _required(tool):
        if name not in filled:
            raise WorldFormatError(f"{where}/arguments: {rule.tool!r} requires {name!r}, which is not a string "
                                   "parameter, names no anchor row, and is not given: add it to the rule's arguments")
