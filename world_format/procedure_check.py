"""Whether a trajectory follows the procedures its world declares, read from what it did.

The procedures (:class:`world_format.models.Procedures`, and a tool's ``confirm``) as rules over a trajectory —
its tool calls with their observations, the agent's questions and the customer's replies, in order:

========================  ==========================================================================
violation                 what happened
========================  ==========================================================================
unidentified              a call names a row that belongs to a customer (its entity root is a row of
                          the identity table) before any identification of that customer succeeded
another_customer          a call names a row of a customer other than the one identified
unconfirmed_write         a ``confirm`` write made without the customer's reply to a question since
                          the last such write
refused_write_attempted   (``check_before_write``) a write called although it returned an error: the
                          agent should have read the row and explained instead
========================  ==========================================================================

The gate holds every case's reference run to these rules (a violating case is left out), and ``blobkit info``
re-checks every training row of a kit with them: a kit teaches no violation.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from world_format.canonical import canonical_json
from world_format.chain import interleaved
from world_format.keys import normalize_key
from world_format.models import World
from world_format.procedures import identification
from world_format.runtime import WorldRuntime

from .entities import Entities

MAX_EXAMPLES = 5
"""Violations a report quotes (it counts all of them)."""


@dataclass(frozen=True)
class Event:
    """One step of a trajectory as the checker reads it: a tool call with its observation, the agent asking (a
    turn without a call that the customer answers), or the customer's reply."""

    kind: Literal["call", "ask", "reply"]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    observation: Any = None
    error: bool = False


def run_events(calls: Sequence[tuple[str, dict[str, Any]]], observations: Sequence[Any], errors: Sequence[bool],
               turns_at: Sequence[int]) -> list[Event]:
    """A run's events: its calls, and before call ``turns_at[t]`` the agent's question and the customer's reply."""
    events: list[Event] = []
    for kind, index in interleaved(len(calls), turns_at):
        if kind == "turn":
            events += [Event("ask"), Event("reply")]
        else:
            tool, arguments = calls[index]
            events.append(Event("call", tool, dict(arguments), observations[index], errors[index]))
    return events


def _observation(content: Any) -> tuple[Any, bool]:
    try:
        value = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return content, False
    return value, isinstance(value, dict) and "error" in value


def message_events(messages: Sequence[dict[str, Any]]) -> list[Event]:
    """A conversation's events (row format: assistant ``tool_calls`` answered by ``tool`` messages by id; the
    first user message is the request, later ones are replies)."""
    answers = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    events: list[Event] = []
    requested = False
    for message in messages:
        role = message.get("role")
        if role == "user":
            if requested:
                events.append(Event("reply"))
            requested = True
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls:
                events.append(Event("ask"))
            for call in calls:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                observation, error = _observation(answers.get(call.get("id")) if isinstance(call, dict) else None)
                given = function.get("arguments")
                arguments: dict[str, Any] = given if isinstance(given, dict) else {}
                events.append(Event("call", str(function.get("name", "")), arguments, observation, error))
    return events


def declared(world: World) -> list[str]:
    """The procedures a world declares, as words (empty: it declares none)."""
    ident, confirmed = identification(world), sorted(tool.name for tool in world.tools if tool.confirm)
    found = []
    if ident is not None:
        found.append(f"identify the customer with {ident.tool} before touching their rows")
    if confirmed:
        found.append(f"ask for confirmation before {', '.join(confirmed)}")
    if world.procedures.check_before_write:
        found.append("check before writing: never call a write whose rules do not hold")
    return found


class ProcedureChecker:
    """The declared procedures of one world, applied to trajectories (entity roots read once from the seed)."""

    def __init__(self, world: World, entities: Entities) -> None:
        self.world = world
        self.entities = entities
        self.identification = identification(world)
        self.confirmed_tools = {tool.name for tool in world.tools if tool.confirm}

    @classmethod
    def of(cls, runtime: WorldRuntime) -> ProcedureChecker:
        """A checker for the runtime's world (reads the seed's entities)."""
        with runtime.guard.host() as conn:
            return cls(runtime.world, Entities(runtime.world, conn))

    @property
    def declared(self) -> list[str]:
        """The procedures the world declares, as words (:func:`declared`)."""
        return declared(self.world)

    def _customer_of(self, table: str, key: Any) -> str | None:
        """The canonical key of the customer a row belongs to, or None when it belongs to none."""
        ident = self.identification
        root_table, root_key = self.entities.root(table, key)
        return canonical_json(normalize_key(root_key)) if ident is not None and root_table == ident.table else None

    def _identified(self, event: Event) -> str | None:
        ident = self.identification
        if ident is None or event.tool != ident.tool or event.error or not isinstance(event.observation, dict):
            return None
        table = self.world.state.table(ident.table)
        assert table is not None
        key = event.observation.get(table.primary_key)
        return None if key is None else canonical_json(normalize_key(key))

    def violations(self, events: Iterable[Event]) -> list[tuple[str, str]]:
        """Each (violation kind, what happened) in the trajectory, in order."""
        found: list[tuple[str, str]] = []
        identified: set[str] = set()
        asked = answered = False
        for event in events:
            if event.kind == "ask":
                asked = True
                continue
            if event.kind == "reply":
                answered = answered or asked
                continue
            found += self._ownership(event, identified)
            if event.tool in self.confirmed_tools:
                if not answered:
                    found.append(("unconfirmed_write", f"{event.tool} was called without the customer's yes"))
                asked = answered = False
            tool = self.world.tool(event.tool)
            if self.world.procedures.check_before_write and tool is not None and tool.effect == "write" \
                    and event.error:
                found.append(("refused_write_attempted", f"{event.tool} was called and refused: "
                              f"{str(event.observation)[:120]}"))
            who = self._identified(event)
            if who is not None:
                identified.add(who)
        return found

    def _ownership(self, event: Event, identified: set[str]) -> list[tuple[str, str]]:
        if self.identification is None or event.tool == self.identification.tool:
            return []
        found = []
        for table, key in self.entities.rows_named_by(event.tool, event.arguments):
            customer = self._customer_of(table, key)
            if customer is None or customer in identified:
                continue
            kind = "another_customer" if identified else "unidentified"
            found.append((kind, f"{event.tool} names {table} {canonical_json(key)} of customer {customer} "
                                f"({'another customer is identified' if identified else 'none identified yet'})"))
        return found

    def report(self, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Over training rows: how many rows violate a declared procedure, by kind, with a few examples."""
        rows = list(rows)
        kinds: Counter[str] = Counter()
        examples: list[dict[str, str]] = []
        violating = 0
        for row in rows:
            found = self.violations(message_events(row.get("messages") or []))
            violating += bool(found)
            kinds.update(kind for kind, _ in found)
            case = str((row.get("metadata") or {}).get("case_id", ""))
            examples += [{"case_id": case, "kind": kind, "detail": detail} for kind, detail in found]
        return {"declared": self.declared, "rows": len(rows), "violating_rows": violating,
                "violations": dict(sorted(kinds.items())), "examples": examples[:MAX_EXAMPLES]}
