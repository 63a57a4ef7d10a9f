"""Tool coverage: how many of a kit's cases and training rows call each declared tool, and why a tool none calls
is left out.

A tool no case calls is a part of the company's job the kit never teaches. The reason is read from the same rules
minting uses (:func:`blobkit.builder.mint_specs.discover_specs`), so it names what the world would have to declare
for minting to use the tool — or says that minting could, but the build's task cap left it out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from world_format.models import Tool, World
from world_format.procedures import identification

from .addressing import natural_finder
from .arguments import unfillable
from .config import MAX_TASKS_LIMIT, BuildConfig
from .kit_files import Executed
from .mint_specs import TaskSpec, _required, discover_specs, key_params, select_specs


def _keyed_tables(world: World, tool: Tool) -> list[str]:
    """The anchor tables whose key the tool's anchored parameters name."""
    return [anchor.table for anchor in world.state.anchors
            if (table := world.state.table(anchor.table)) is not None and key_params(tool, table) is not None]


def _address_finders(world: World, table: str) -> list[Tool]:
    """The tools minting calls to reach a row of ``table`` before a template's own steps (the find by natural key of
    an ``internal_key`` anchor, :mod:`blobkit.builder.addressing`)."""
    anchor = world.state.anchor(table)
    if anchor is None or not anchor.internal_key:
        return []
    return [finder for column in anchor.natural_keys if (finder := natural_finder(world, table, column)) is not None]


def _served_by(world: World, tool: Tool) -> str | None:
    """The address step (the identification, or a find by natural key) that reaches the row this read tool looks
    up by key, when minting reaches that table's rows through one (:mod:`blobkit.builder.addressing`)."""
    if tool.effect != "read" or tool.result.shape != "row":
        return None
    ident = identification(world)
    for table in _keyed_tables(world, tool):
        if ident is not None and table == ident.table:
            return f"the identification ({ident.tool})"
        for finder in _address_finders(world, table):
            column = finder.anchors[str(finder.parameters["required"][0])].split(".")[1]
            return f"a find by {column} ({finder.name})"
    return None


class TaskCap:
    """Which minted tasks the build's task cap (``max_tasks``) left out, in the order selection takes them."""

    def __init__(self, world: World, config: BuildConfig) -> None:
        self.world, self.config = world, config
        self.authored = len(world.tasks)
        self.order = select_specs(world, MAX_TASKS_LIMIT, config.seed)
        """Every spec, in the order :func:`select_specs` picks them (the kit holds the first few)."""

    def _uses(self, spec: TaskSpec) -> set[str]:
        """The tools a case of ``spec`` may call: its roles and the finds that reach its anchor table's rows."""
        return ({name for role, name in spec.tools if not role.endswith("_param") and isinstance(name, str)}
                | {finder.name for finder in _address_finders(self.world, spec.anchor)})

    def reason(self, tool: str) -> str:
        """Why no selected task uses ``tool``, which minting can use: the cap it needs raised to, or the seed."""
        places = [i for i, spec in enumerate(self.order) if tool in self._uses(spec)]
        if not places:  # selected tasks reach its table, but by key or by the identification
            return "minting can use it, but no task the build selected does; try another --seed"
        tasks = [f"{self.authored + i + 1} ({self.order[i].template} on {self.order[i].anchor})" for i in places]
        if self.authored + places[0] + 1 <= self.config.max_tasks:
            return ("minting selected a task that calls it, but none of its cases was admitted (the rejected tasks "
                    "say why)")
        needed = self.authored + places[-1] + 1
        listed = ("tasks " if len(tasks) > 1 else "task ") + ", ".join(tasks)
        return (f"the task cap cut it: the tasks that would call it are {listed}, past --max-tasks "
                f"{self.config.max_tasks}; raise --max-tasks to {needed} to select them all")


def _why_not_minted(world: World, tool: Tool, minted_tools: set[str], cap: TaskCap) -> str:
    """Why minting makes no case with ``tool`` (the first rule it fails, as discovery applies them)."""
    if tool.effect == "none":
        return "a pure tool: minting never calls one, and no authored task does"
    served = _served_by(world, tool)
    if tool.name in minted_tools and served:
        return (f"minted chains reach the row with {served}, whose observation already holds what this tool "
                "returns, so they do not call it")
    if tool.name in minted_tools:
        return cap.reason(tool.name)
    if not tool.anchors:
        return "declares no anchors, so minting cannot tell which row its parameters name"
    tables = _keyed_tables(world, tool)
    if not tables:
        natural = [(anchor, column) for anchor in world.state.anchors for name, target in tool.anchors.items()
                   for column in anchor.natural_keys if target == f"{anchor.table}.{column}"]
        if natural:
            anchor, column = natural[0]
            return (f"finds a {anchor.label} by {column}, but no read tool with a result_noun lists the rows of a "
                    f"{anchor.label} (minting's find-then-read needs one)")
        return "its anchors do not name every key column of an anchor table"
    table = world.state.table(tables[0])
    assert table is not None
    key = key_params(tool, table)
    assert key is not None
    if tool.effect == "read":
        if tool.result.shape == "rows" and not tool.result_noun:
            return 'a rows result without result_noun (minting cannot word what it counts)'
        extra = [name for name in _required(tool) if name not in ({key} if isinstance(key, str) else set(key))]
        if extra:
            return f"requires {extra[0]!r} besides the row's key, which minting cannot fill"
        return f"anchor table {tables[0]!r} declares no answer_fields to ask about"
    missing = unfillable(world, tool, key, tables[0])
    if missing is not None:
        return (f"required parameter {missing!r} is not anchored to a column of the row or of the identified "
                "customer, and has no enum or examples for minting to draw from")
    if not tool.preconditions:
        return "a write without preconditions: minting cannot tell where it may run and where it must be refused"
    return f"no read tool returns a {tables[0]} row by its key (minting looks the row up before writing)"


def tool_coverage(world: World, done: Executed, config: BuildConfig) -> dict[str, dict[str, Any]]:
    """Per declared tool: ``cases`` (admitted cases whose reference chain calls it), ``rows`` (training rows with a
    call of it) and, when no case calls it, ``reason`` (naming the cap, when the build's ``max_tasks`` cut it)."""
    cases = Counter(tool for case in done.train + done.held_out
                    for tool in {step.tool for step in case.instance.task.reference})
    rows = Counter(name for row in done.rows
                   for name in {call["function"]["name"] for message in row["messages"]
                                for call in message.get("tool_calls") or []})
    specs = [spec for found in discover_specs(world).values() for spec in found]
    minted_tools = {tool for spec in specs for role, tool in spec.tools
                    if not role.endswith("_param") and isinstance(tool, str)}
    minted_tools |= {finder.name for table in {spec.anchor for spec in specs}
                     for finder in _address_finders(world, table)}
    coverage: dict[str, dict[str, Any]] = {}
    for tool in world.tools:
        entry: dict[str, Any] = {"cases": cases[tool.name], "rows": rows[tool.name]}
        if not cases[tool.name]:
            entry["reason"] = _why_not_minted(world, tool, minted_tools, TaskCap(world, config))
        coverage[tool.name] = entry
    return coverage


def coverage_lines(coverage: dict[str, dict[str, Any]]) -> list[str]:
    """The coverage as text: how many tools the cases exercise, then each tool none does, with why."""
    missing = {name: entry for name, entry in coverage.items() if not entry["cases"]}
    lines = [f"  tools exercised: {len(coverage) - len(missing)} of {len(coverage)} (cases / training rows: "
             + ", ".join(f"{name} {e['cases']}/{e['rows']}" for name, e in coverage.items() if e["cases"]) + ")"]
    return lines + [f"    never exercised: {name}: {entry['reason']}" for name, entry in missing.items()]
