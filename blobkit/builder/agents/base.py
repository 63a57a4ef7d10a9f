"""What a wrong agent is: one name, what it does, where it applies, and the attempt it makes on a case.

Each wrong agent is one module of this package holding one :class:`WrongAgent` (``AGENT``), registered by one line
in :data:`blobkit.builder.agents.AGENTS`. Nothing else spells its name: the gate, ``blobkit adversary``, the kit's
per-case verdicts, ``blobkit info`` and the spec's table all read the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from world_format.models import Task, World
from world_format.runtime import WorldRuntime

from ..probes import Attempt, ReferenceCalls


@dataclass(frozen=True)
class CaseRun:
    """A case as a wrong agent sees it: the world's runtime, the task, its reference run and the distractor case
    (another case of the same task, with its reference run) when there is one."""

    runtime: WorldRuntime
    task: Task
    run: ReferenceCalls
    distractor: tuple[Task, ReferenceCalls] | None = None

    @property
    def world(self) -> World:
        """The world the case belongs to."""
        return self.runtime.world


Plan = Callable[[CaseRun], "Attempt | None"]
"""A wrong agent's attempt on one case; None where it cannot differ from the reference (not applicable)."""


@dataclass(frozen=True)
class WrongAgent:
    """A wrong agent every admitted case must fail (a gate probe, and a ``blobkit adversary`` agent)."""

    name: str
    """Its one name: ``blobkit adversary --agent NAME``, the key of the kit's per-case verdicts, ``blobkit info``'s
    table and the spec's."""
    does: str
    """What it does on a case, in one line (the spec's table)."""
    applies: str
    """The cases it applies to ("every case", "multi-turn tasks", ...)."""
    plan: Plan
    """Its attempt on a case."""
    policy_skip: bool = False
    """Whether it is the reference with one of the world's declared procedures skipped (a policy-skip agent)."""
    required: str | None = None
    """Set when a case it cannot be applied to cannot be admitted: why (the gate's rejection reason)."""
