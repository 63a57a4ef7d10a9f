"""Whether a trajectory follows the procedures its world declares, read from what it did.

The procedures (:class:`world_format.models.Procedures`, and a tool's ``confirm``) as rules over a trajectory —
its tool calls with their observations, what the agent said and the customer's replies, in order
(:mod:`world_format.events`):

=========================  ==========================================================================
violation                  what happened
=========================  ==========================================================================
undeclared_tool            a call of a tool the world does not declare (in every world)
unidentified               a call names a row that belongs to a customer (its entity root is a row of
                           the identity table) before any identification of that customer succeeded
another_customer           a call names a row of a customer other than the one identified (a second
                           identification included), or the agent states a natural key (an email) that
                           only customers other than the identified one hold and the customer did not
                           write themself
unconfirmed_write          a ``confirm`` write made without the customer's "yes" to a question since
                           the last such write
confirmation_incomplete    the question the customer said yes to does not ask about this write: it does
                           not name the action or state what the tool's ``confirm`` declares
                           (:mod:`world_format.confirmation`)
refused_write_attempted    (``check_before_write``) a write called although it returned an error: the
                           agent should have read the row and explained instead
=========================  ==========================================================================

The verdict on every episode (:func:`world_format.judge.judge`: evaluation, ``blobkit eval --trajectories``, the
gate's probes, the GRPO reward) fails on the first violation; the gate holds every case's reference run to these
rules, and ``blobkit info``/``verify`` re-check every training row of a kit: a kit teaches no violation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from world_format.canonical import canonical_json
from world_format.keys import normalize_key
from world_format.models import ConfirmedWrite, World
from world_format.procedures import Identification, identification, identifications
from world_format.runtime import WorldRuntime

from .confirmation import Lookup, request_problem, required_statements, seed_lookup
from .entities import Entities
from .events import Event, message_events
from .revealing import Revealing
from .values import normalize_text

MAX_EXAMPLES = 5
"""Violations a report quotes (it counts all of them)."""
MEMO_KEY = "procedure_checker"


def declared(world: World) -> list[str]:
    """The procedures a world declares, as words (empty: it declares none)."""
    tools, confirmed = [i.tool for i in identifications(world)], sorted(t.name for t in world.tools if t.confirm)
    found = []
    if tools:
        found.append(f"identify the customer with {' or '.join(tools)} before touching their rows")
    if confirmed:
        found.append(f"ask for confirmation before {', '.join(confirmed)}")
    if world.procedures.check_before_write:
        found.append("check before writing: never call a write whose rules do not hold")
    return found


def _revealing(world: World, entities: Entities, ident: Identification | None,
               read: Callable[[str], list[Any]] | None = None) -> Revealing | None:
    """Every customer's natural-key values (the identity anchor's ``natural_keys``), found on demand in the seed
    (``read``: where the one full read of the columns runs, :class:`~world_format.revealing.Revealing`)."""
    anchor = world.state.anchor(ident.table) if ident else None
    table = world.state.table(ident.table) if ident else None
    if anchor is None or table is None or not anchor.natural_keys:
        return None
    return Revealing(world, entities.seed, table, tuple(anchor.natural_keys), read)


class ProcedureChecker:
    """The declared procedures of one world, applied to trajectories (entity roots and natural keys read once from
    the seed; the checker holds no connection, so forks of a runtime share it)."""

    def __init__(self, world: World, entities: Entities, revealing: Revealing | None = None) -> None:
        self.world = world
        self.entities = entities
        self.identification = identification(world)
        self.identifying_tools = {ident.tool for ident in identifications(world)}
        self.confirmed_tools = {tool.name for tool in world.tools if tool.confirm}
        self.revealing = revealing

    @classmethod
    def of(cls, runtime: WorldRuntime, entities: Entities | None = None) -> ProcedureChecker:
        """The checker of the runtime's world, made once per runtime and its forks (:attr:`WorldRuntime.memo`)."""
        found = runtime.memo.get(MEMO_KEY)
        if not isinstance(found, ProcedureChecker):
            if entities is None:
                with runtime.guard.host() as conn:
                    entities = Entities(runtime.world, conn)
            found = cls(runtime.world, entities, _revealing(runtime.world, entities, identification(runtime.world),
                                                            runtime.starting_rows))
            runtime.memo[MEMO_KEY] = found
        return found

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
        if ident is None or event.tool not in self.identifying_tools or event.error \
                or not isinstance(event.observation, dict):
            return None
        table = self.world.state.table(ident.table)
        assert table is not None
        key = event.observation.get(table.primary_key)
        return None if key is None else canonical_json(normalize_key(key))

    def violations(self, events: Iterable[Event], lookup: Lookup | None = None) -> list[tuple[str, str]]:
        """Each (violation kind, what happened) in the trajectory, in order. ``lookup`` reads the values a
        confirmation states about the written row (None: values of the written row are not required)."""
        found: list[tuple[str, str]] = []
        identified: set[str] = set()
        question, confirmed, heard = "", None, ""
        for event in events:
            if event.kind == "request":
                heard += f" {normalize_text(event.text)} "
            elif event.kind == "ask":
                question = event.text
            elif event.kind == "reply":
                confirmed = question if event.accepted else confirmed
                heard += f" {normalize_text(event.text)} "
            elif event.kind == "say":
                found += self._revealed(event.text, identified, heard)
            elif self.world.tool(event.tool) is None:
                found.append(("undeclared_tool", f"{event.tool!r} is not a tool of this world"))
            else:
                found += self._ownership(event, identified) + self._write(event, confirmed, lookup)
                if event.tool in self.confirmed_tools:
                    confirmed = None
                who = self._identified(event)
                if who is not None and identified and who not in identified:
                    found.append(("another_customer", f"{event.tool} found a second customer ({who}) after the one "
                                  "identified: a conversation serves one customer"))
                elif who is not None:
                    identified.add(who)
            if event.kind == "ask":
                found += self._revealed(event.text, identified, heard)
        return found

    def _write(self, event: Event, confirmed: str | None, lookup: Lookup | None) -> list[tuple[str, str]]:
        """A write held to confirmation (``confirm``) and to checking first (``check_before_write``)."""
        tool = self.world.tool(event.tool)
        found = []
        if tool is not None and event.tool in self.confirmed_tools:
            if confirmed is None:
                found.append(("unconfirmed_write", f"{event.tool} was called without the customer's yes"))
            else:
                states = required_statements(self.world, tool, event.arguments, lookup or (lambda *_: None))
                problem = request_problem(self.world, ConfirmedWrite(tool=tool.name, states=tuple(states)), confirmed)
                if problem is not None:
                    found.append(("confirmation_incomplete", f"the question answered before {event.tool} does not "
                                  f"ask about it: {problem}"))
        if self.world.procedures.check_before_write and tool is not None and tool.effect == "write" and event.error:
            found.append(("refused_write_attempted", f"{event.tool} was called and refused: "
                          f"{str(event.observation)[:120]}"))
        return found

    def _ownership(self, event: Event, identified: set[str]) -> list[tuple[str, str]]:
        if self.identification is None or event.tool in self.identifying_tools:
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

    def _revealed(self, text: str, identified: set[str], heard: str) -> list[tuple[str, str]]:
        """What the agent said that names a customer other than the identified one: a natural-key value only others
        hold, which the customer did not write themself (``heard``: what they wrote, normalized and padded)."""
        if not text or self.revealing is None:
            return []
        said = normalize_text(text)
        padded = f" {said} "
        for token in dict.fromkeys(said.split()):
            for value, holders in self.revealing.holders(token):
                if not holders & identified and f" {value} " in padded and f" {value} " not in heard:
                    return [("another_customer", f"the agent states {value!r}, which identifies another customer")]
        return []

    def report(self, rows: Iterable[dict[str, Any]], lookup: Lookup | None = None) -> dict[str, Any]:
        """Over training rows: how many rows violate a declared procedure, by kind, with a few examples."""
        rows = list(rows)
        kinds: Counter[str] = Counter()
        examples: list[dict[str, str]] = []
        violating = 0
        unclear = self.world.procedures.unclear_reply
        for row in rows:
            found = self.violations(message_events(row.get("messages") or [], unclear), lookup)
            violating += bool(found)
            kinds.update(kind for kind, _ in found)
            case = str((row.get("metadata") or {}).get("case_id", ""))
            examples += [{"case_id": case, "kind": kind, "detail": detail} for kind, detail in found]
        return {"declared": self.declared, "rows": len(rows), "violating_rows": violating,
                "violations": dict(sorted(kinds.items())), "examples": examples[:MAX_EXAMPLES]}


def report_of(runtime: WorldRuntime, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """:meth:`ProcedureChecker.report` over ``rows`` with the runtime's checker, confirmations read from its seed."""
    return ProcedureChecker.of(runtime).report(rows, seed_lookup(runtime))
