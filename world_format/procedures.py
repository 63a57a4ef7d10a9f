"""The identification procedure a world declares, resolved to its tool, parameter and identity table.

A world's ``procedures.identify`` names a read tool; this module reads which parameter of it carries the
natural key and which table and column that key belongs to (its ``anchors`` entry), so minting, the gate's
probes and the procedure checker all read one answer. The declaration's rules are checked by
:func:`check_procedures` before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WorldFormatError
from .models import Tool, World


@dataclass(frozen=True)
class Identification:
    """The declared identification step: ``tool(param=<natural key>)`` returns the customer's row of ``table``."""

    tool: str
    param: str
    table: str
    column: str
    """The natural-key column of ``table`` the customer gives (e.g. email)."""


def _required(tool: Tool) -> list[str]:
    required = tool.parameters.get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def identification(world: World) -> Identification | None:
    """The world's identification step, or None when it declares none (the declaration is assumed checked)."""
    name = world.procedures.identify
    tool = world.tool(name) if name else None
    if tool is None:
        return None
    param = _required(tool)[0]
    table, column = tool.anchors[param].split(".")
    return Identification(tool.name, param, table, column)


def check_procedures(world: World, source: str) -> None:
    """WorldFormatError (naming /procedures/...) when a declared procedure cannot be followed as declared."""
    name = world.procedures.identify
    if name is None:
        return
    where = f"{source}: /procedures/identify"
    tool = world.tool(name)
    if tool is None:
        raise WorldFormatError(f"{where}: {name!r} is not a declared tool")
    if tool.effect != "read" or tool.result.shape != "row":
        raise WorldFormatError(f"{where}: {name!r} must be a read tool with a row result (it returns the customer)")
    required = _required(tool)
    if len(required) != 1 or required[0] not in tool.anchors:
        raise WorldFormatError(f"{where}: {name!r} must take exactly one required parameter, anchored to the natural "
                               'key the customer gives (e.g. "anchors": {"email": "customers.email"})')
    table_name, column = tool.anchors[required[0]].split(".")
    table, anchor = world.state.table(table_name), world.state.anchor(table_name)
    if table is None or anchor is None or column not in anchor.natural_keys or table.composite:
        raise WorldFormatError(f"{where}: {name!r} must find a row of an anchor table with a single-column key by "
                               f"one of its natural_keys; {tool.anchors[required[0]]!r} is not one")
