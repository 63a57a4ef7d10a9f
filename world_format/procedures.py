"""The identification procedure a world declares, resolved to its tools, parameters and identity table.

A world's ``procedures.identify`` names one read tool, or several (any of them identifies the customer: by email,
or by name and zip code); this module reads which parameters of each carry natural keys and which table and
columns those keys belong to (their ``anchors`` entries), so minting, the gate's probes and the procedure checker
all read one answer. The declaration's rules are checked by :func:`check_procedures` before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import WorldFormatError
from .models import Tool, World


@dataclass(frozen=True)
class Identification:
    """One declared identification step: ``tool(param=<natural key>, ...)`` returns the customer's row of ``table``."""

    tool: str
    table: str
    keys: tuple[tuple[str, str], ...]
    """(parameter, natural-key column of ``table``) of each required parameter, in declaration order: one (an
    email) or several (a name and a zip code)."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The natural-key columns the customer gives."""
        return tuple(column for _, column in self.keys)

    def arguments(self, values: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments for a customer whose natural-key ``values`` are given by column."""
        return {param: values[column] for param, column in self.keys}


def _required(tool: Tool) -> list[str]:
    required = tool.parameters.get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def _of(tool: Tool) -> Identification:
    keys = tuple((param, tool.anchors[param].split(".")[1]) for param in _required(tool))
    return Identification(tool.name, tool.anchors[_required(tool)[0]].split(".")[0], keys)


def declared_tools(world: World) -> tuple[str, ...]:
    """The tool names ``procedures.identify`` declares (none, one or several)."""
    declared = world.procedures.identify
    if declared is None:
        return ()
    return (declared,) if isinstance(declared, str) else tuple(declared)


def identifications(world: World) -> tuple[Identification, ...]:
    """Every declared identification step, in declaration order (the declaration is assumed checked)."""
    return tuple(_of(tool) for name in declared_tools(world) if (tool := world.tool(name)) is not None)


def identification(world: World) -> Identification | None:
    """The world's first identification step (its identity table is every step's), or None when it declares none."""
    found = identifications(world)
    return found[0] if found else None


def check_procedures(world: World, source: str) -> None:
    """WorldFormatError (naming /procedures/...) when a declared procedure cannot be followed as declared."""
    names = declared_tools(world)
    several = not isinstance(world.procedures.identify, str)
    tables: set[str] = set()
    if len(set(names)) != len(names):
        raise WorldFormatError(f"{source}: /procedures/identify: a tool is named twice")
    for index, name in enumerate(names):
        where = f"{source}: /procedures/identify" + (f"/{index}" if several else "")
        tables.add(_check_one(world, name, where))
    if len(tables) > 1:
        raise WorldFormatError(f"{source}: /procedures/identify: every identification must find a row of the same "
                               f"identity table; these find {sorted(tables)}")


def _check_one(world: World, name: str, where: str) -> str:
    """The identity table one identification tool finds a row of (WorldFormatError when it cannot be followed)."""
    tool = world.tool(name)
    if tool is None:
        raise WorldFormatError(f"{where}: {name!r} is not a declared tool")
    if tool.effect != "read" or tool.result.shape != "row":
        raise WorldFormatError(f"{where}: {name!r} must be a read tool with a row result (it returns the customer)")
    required = _required(tool)
    if not required or any(param not in tool.anchors for param in required):
        raise WorldFormatError(f"{where}: {name!r} must take required parameters anchored to the natural keys the "
                               'customer gives (e.g. "anchors": {"email": "customers.email"}, or a name and a zip '
                               "code)")
    targets = [tool.anchors[param].split(".") for param in required]
    table_name = targets[0][0]
    table, anchor = world.state.table(table_name), world.state.anchor(table_name)
    for target_table, column in targets:
        if target_table != table_name or table is None or anchor is None or column not in anchor.natural_keys \
                or table.composite:
            raise WorldFormatError(f"{where}: {name!r} must find a row of an anchor table with a single-column key "
                                   f"by its natural_keys; {target_table}.{column!r} is not one")
    return table_name
