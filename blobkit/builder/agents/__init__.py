"""The registry of wrong agents: every agent the gate runs on every case, and ``blobkit adversary`` writes.

One module per agent, each holding its :class:`~.base.WrongAgent`; adding one is writing its module and one line
in :data:`AGENTS`. The gate (:mod:`blobkit.builder.gate`), ``blobkit adversary`` (:mod:`blobkit.adversaries`), the
kit's per-case verdicts, ``blobkit info``'s table and the spec's table (:func:`spec_table`, drift-checked) all read
this tuple, by the agent's one name.
"""

from __future__ import annotations

from world_format.models import Task
from world_format.runtime import WorldRuntime

from ..probes import Attempt, ReferenceCalls
from . import (
    forbidden_write,
    hedger,
    negated,
    no_handoff,
    null,
    number_hedge,
    off_by_one,
    over_inclusive,
    read_only,
    shortcut,
    unconfirmed,
    unconfirmed_empty,
    unconfirmed_other,
    unconfirmed_statement,
    unconfirmed_vague,
    unidentified,
    wrong_row,
    wrong_value,
)
from .base import CaseRun, WrongAgent

AGENTS: tuple[WrongAgent, ...] = (
    null.AGENT,
    shortcut.AGENT,
    wrong_row.AGENT,
    wrong_value.AGENT,
    off_by_one.AGENT,
    read_only.AGENT,
    hedger.AGENT,
    over_inclusive.AGENT,
    negated.AGENT,
    number_hedge.AGENT,
    unconfirmed.AGENT,
    unconfirmed_empty.AGENT,
    unconfirmed_statement.AGENT,
    unconfirmed_other.AGENT,
    unconfirmed_vague.AGENT,
    unidentified.AGENT,
    forbidden_write.AGENT,
    no_handoff.AGENT,
)
"""Every wrong agent, in the order the gate runs them."""
NAMES: tuple[str, ...] = tuple(agent.name for agent in AGENTS)
"""Their names, in that order."""
BY_NAME: dict[str, WrongAgent] = {agent.name: agent for agent in AGENTS}
assert len(BY_NAME) == len(AGENTS), "two wrong agents share a name"
REFERENCE = "reference"
"""The right agent, the case's own reference chain and answer key: it must pass every case."""
assert REFERENCE not in BY_NAME

__all__ = ["AGENTS", "BY_NAME", "NAMES", "REFERENCE", "CaseRun", "WrongAgent", "attempts", "spec_table"]


def attempts(runtime: WorldRuntime, task: Task, run: ReferenceCalls,
             distractor: tuple[Task, ReferenceCalls] | None) -> dict[str, Attempt | None]:
    """Every agent's attempt on this case, by name (None: not applicable here)."""
    case = CaseRun(runtime, task, run, distractor)
    return {agent.name: agent.plan(case) for agent in AGENTS}


def spec_table() -> str:
    """The spec's table of wrong agents (``spec/world-format.md``, *The gate*), rendered from the registry."""
    lines = ["| agent | applies to | what the wrong agent does |", "|---|---|---|"]
    lines += [f"| `{agent.name}` | {agent.applies}{' (policy-skip)' if agent.policy_skip else ''} | {agent.does} |"
              for agent in AGENTS]
    return "\n".join(lines)


SPEC_BEGIN = "<!-- wrong-agents: generated from blobkit/builder/agents (make schema); a test checks it -->"
SPEC_END = "<!-- /wrong-agents -->"


def with_spec_table(text: str) -> str:
    """``text`` (spec/world-format.md) with the part between :data:`SPEC_BEGIN` and :data:`SPEC_END` rendered anew;
    ValueError when the markers are missing."""
    start, end = text.find(SPEC_BEGIN), text.find(SPEC_END)
    if start < 0 or end < start:
        raise ValueError(f"the spec has no {SPEC_BEGIN!r} ... {SPEC_END!r} section")
    return text[:start] + SPEC_BEGIN + "\n" + spec_table() + "\n" + text[end:]
