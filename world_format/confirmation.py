"""Confirmation requests: what the agent's question before a ``confirm`` write must state, and whether a turn is one.

A write the customer must confirm (a tool's ``confirm``) is confirmed only by a "yes" to a question about *that*
write. A turn of the agent is a **confirmation request** for a write when it

1. asks: it holds a question mark;
2. names the action: a word of the tool's ``action`` (its verb, the first word; else the tool name's first word)
   occurs in it, inflected or not ("cancel", "cancelling", "cancelled");
3. states every required text (:func:`required_statements`): the row's key (unless its anchor is an
   ``internal_key`` the customer never sees), each parameter or looked-up value the tool's ``confirm`` declares,
   quoted as the world quotes it (:mod:`world_format.quoting`); a number is stated when the turn states the same
   number, a text when its words occur as whole tokens;
4. names no other row of the same table by a text key (a question about booking KXTRAB that also names ABCDEF is
   about something else).

:func:`request_problem` returns why a turn is not one (None when it is). The scripted customer
(:mod:`world_format.customer`) answers only a request with the scripted "yes"; the procedure checker
(:mod:`world_format.procedure_check`) holds every ``confirm`` write to the request the customer answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .affirmed import number_tokens, prepared, text_spans
from .errors import WorldFormatError
from .models import Column, ConfirmedWrite, Tool, World
from .quoting import quoted
from .runtime import WorldRuntime
from .state import normalize_value, quote_identifier
from .values import normalize_text, to_decimal

Lookup = Callable[[str, str, dict[str, Any]], Any]
"""(table, column, the row's key columns and values) → the column's value in the row before the write (None:
no such row)."""


def confirmation_states(tool: Tool) -> tuple[str, ...]:
    """What the tool's ``confirm`` declares the question states (every parameter of the write for ``true``)."""
    declared = tool.confirm.states if not isinstance(tool.confirm, bool) else None
    return declared if declared is not None else tuple(tool.parameters.get("properties", {}))


def action_word(tool: Tool) -> str:
    """The word a request must use to name the tool's action: the first word of ``action`` (slots left out), else
    of the tool's name."""
    words = re.findall(r"[A-Za-z]+", re.sub(r"\{[^}]*\}", " ", tool.action or "")) or tool.name.split("_")
    return words[0].lower()


def _column(world: World, target: str) -> Column | None:
    table_name, _, name = target.partition(".")
    table = world.state.table(table_name)
    return next((c for c in table.columns if c.name == name), None) if table else None


def row_parameters(world: World, tool: Tool) -> dict[str, tuple[str, str]]:
    """The tool's parameters that name the row it writes: parameter → (table, key column)."""
    named = {}
    for param, target in tool.anchors.items():
        table_name, _, column = target.partition(".")
        table = world.state.table(table_name)
        if table is not None and column in table.key_columns:
            named[param] = (table_name, column)
    return named


def _texts(value: Any, column: Column | None) -> list[str]:
    if isinstance(value, list):
        return [text for item in value for text in _texts(item, column)]
    if value is None or isinstance(value, dict):
        return []
    return [quoted(value, column)]


def _declared_values(world: World, tool: Tool, arguments: dict[str, Any],
                     lookup: Lookup) -> list[tuple[str, Column | None, Any]]:
    """(state, the column that quotes it, its value) of each declared state that is not the row's key: a
    parameter's argument (quoted by the column it is anchored to), or ``table.column`` of the row the key arguments
    name (read with ``lookup``)."""
    rows = row_parameters(world, tool)
    found = []
    for state in confirmation_states(tool):
        if state in rows:
            continue  # the row's key, stated as the row (or, an internal key, never)
        if "." in state:
            table = state.split(".", 1)[0]
            key = {column: arguments.get(param) for param, (named, column) in rows.items() if named == table}
            found.append((state, _column(world, state), lookup(table, state.split(".", 1)[1], key) if key else None))
        else:
            target = tool.anchors.get(state)
            found.append((state, _column(world, target) if target else None, arguments.get(state)))
    return found


def required_statements(world: World, tool: Tool, arguments: dict[str, Any], lookup: Lookup) -> list[str]:
    """The texts a request to confirm ``tool(arguments)`` states, in order, each once: the row's key (unless its
    anchor is an internal key), then each declared state's value (:func:`_declared_values`), quoted by its column's
    money format."""
    found: list[str] = []
    for param, (table, _) in row_parameters(world, tool).items():
        anchor = world.state.anchor(table)
        if anchor is None or not anchor.internal_key:
            found += _texts(arguments.get(param), None)
    for _, column, value in _declared_values(world, tool, arguments, lookup):
        found += _texts(value, column)
    return list(dict.fromkeys(found))


def confirmation_request(world: World, tool: Tool, arguments: dict[str, Any], lookup: Lookup) -> ConfirmedWrite:
    """What a turn asking to confirm ``tool(arguments)`` must state (:func:`required_statements`), as a turn's
    ``confirms``."""
    return ConfirmedWrite(tool=tool.name, states=tuple(required_statements(world, tool, arguments, lookup)))


def labelled_states(world: World, tool: Tool, arguments: dict[str, Any], lookup: Lookup) -> list[tuple[str, str]]:
    """(label, quoted value) of each declared state that is not the row's key, for minted wording ("total",
    "$1234.00"): its column's label, else the parameter's name with spaces."""
    return [(column.words if column is not None else state.replace("_", " "), text)
            for state, column, value in _declared_values(world, tool, arguments, lookup)
            for text in _texts(value, column)]


def _states(text: str, wanted: str) -> bool:
    """Whether ``text`` states ``wanted``: the same number (a plain or money amount, "$1234.50" is 1234.5), else
    its words as whole tokens."""
    core = wanted.strip("$€£¥").replace(",", "")
    number = to_decimal(core) if re.fullmatch(r"-?\d+(?:\.\d+)?", core) else None
    if number is not None:
        return any(found == number for _, _, found in number_tokens(text))
    return bool(text_spans(text, wanted))


StatedKeys = Callable[[str, str, str], list[str]]
"""(table, column, text) → the normalized values of that column the text states as whole tokens."""


def _other_row(world: World, confirms: ConfirmedWrite, text: str, stated_keys: StatedKeys) -> str:
    """A text key of another row of the written table that ``text`` names (empty: none)."""
    tool = world.tool(confirms.tool)
    own = {normalize_text(wanted) for wanted in confirms.states}
    for table, column in row_parameters(world, tool).values() if tool is not None else ():
        declared = _column(world, f"{table}.{column}")
        if declared is not None and declared.type == "TEXT":
            other = next((value for value in stated_keys(table, column, text) if value not in own), "")
            if other:
                return other
    return ""


def request_problem(world: World, confirms: ConfirmedWrite, text: str,
                    stated_keys: StatedKeys | None = None) -> str | None:
    """Why ``text`` is not a request to confirm ``confirms`` (see the module docstring), or None when it is;
    ``stated_keys`` reads which rows it names (rule 4; None: not checked). WorldFormatError when ``confirms`` names
    a tool the world does not declare."""
    tool = world.tool(confirms.tool)
    if tool is None:
        raise WorldFormatError(f"a confirmation names {confirms.tool!r}, which is not a declared tool")
    said = prepared(text)
    if not said.strip():
        return "the turn is empty"
    if "?" not in said:
        return "the turn asks nothing (it has no question)"
    verb = action_word(tool)
    stem = verb[:-1] if len(verb) > 3 and verb.endswith("e") else verb
    if not re.search(rf"\b{re.escape(stem)}\w*", said, re.IGNORECASE):
        return f"the question does not name the action ({verb})"
    missing = next((wanted for wanted in confirms.states if not _states(said, wanted)), None)
    if missing is not None:
        return f"the question does not state {missing!r}"
    other = _other_row(world, confirms, said, stated_keys) if stated_keys is not None else ""
    if other:
        return f"the question also names {other!r}, another row: it asks about something else"
    return None


def seed_lookup(runtime: WorldRuntime) -> Lookup:
    """A :data:`Lookup` reading the runtime's starting state (what a row held before any write of the episode)."""
    def lookup(table_name: str, column: str, key: dict[str, Any]) -> Any:
        table = runtime.world.state.table(table_name)
        if table is None or set(key) != set(table.key_columns) or column not in {c.name for c in table.columns}:
            return None
        where = " AND ".join(f"{quote_identifier(c)} = ?" for c in table.key_columns)
        row = runtime.pristine.execute(f"SELECT {quote_identifier(column)} FROM {quote_identifier(table_name)} "
                                       f"WHERE {where}", [key[c] for c in table.key_columns]).fetchone()
        return None if row is None else normalize_value(row[0])

    return lookup


def stated_keys(runtime: WorldRuntime) -> StatedKeys:
    """A :data:`StatedKeys` over the runtime's starting state (each column read once, :meth:`field_values`)."""
    return lambda table, column, text: runtime.field_values(table, column).stated_in(normalize_text(text))


def check_confirmations(world: World, source: str) -> None:
    """WorldFormatError (naming the JSON pointer) for a confirmation that cannot be judged: a ``confirm`` state that
    is neither a parameter of the write nor ``table.column`` of a table its key parameters name, or a turn's
    ``confirms`` naming a tool that is not a ``confirm`` write."""
    for number, tool in enumerate(world.tools):
        where = f"{source}: /tools/{number}/confirm/states"
        tables = {table for table, _ in row_parameters(world, tool).values()}
        for state in confirmation_states(tool) if not isinstance(tool.confirm, bool) else ():
            if "." in state and (state.split(".", 1)[0] not in tables or _column(world, state) is None):
                raise WorldFormatError(f"{where}: {state!r} is not a column of a row {tool.name} names by its key "
                                       f"parameters ({', '.join(sorted(tables)) or 'none'})")
            if "." not in state and state not in tool.parameters.get("properties", {}):
                raise WorldFormatError(f"{where}: {state!r} is not a parameter of {tool.name}")
    for number, task in enumerate(world.tasks):
        for index, turn in enumerate(task.turns):
            named = world.tool(turn.confirms.tool) if turn.confirms else None
            if turn.confirms is not None and (named is None or not named.confirm):
                raise WorldFormatError(f"{source}: /tasks/{number}/turns/{index}/confirms/tool: "
                                       f"{turn.confirms.tool!r} is not a write the world declares with confirm")
