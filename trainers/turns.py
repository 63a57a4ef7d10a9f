"""What the episode loop asks of a policy: the next assistant turn of each of several episodes at once.

:func:`trainers.evaluation.run_episodes` keeps up to ``policy.slots`` episodes in progress and, in each
round, asks the policy for the next turn of every one of them in a single :meth:`TurnPolicy.next_turns`
call. A policy that decodes them together (:class:`trainers.episode_decode.ModelTurns`) batches them; a
plain ``(messages, tools) -> text`` function is wrapped in :class:`PerTurn` and answers one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Generate = Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]
"""A policy for one turn: (messages, tools) → the text of the next assistant turn."""


@dataclass(frozen=True)
class TurnRequest:
    """One episode asking for its next assistant turn."""

    key: int
    """The episode (its case's index in the run); the same for every turn of the episode."""
    messages: list[dict[str, Any]]
    """The whole conversation so far, in the kit's row format."""
    tools: list[dict[str, Any]]
    """The tool schemas the model is shown."""


@runtime_checkable
class TurnPolicy(Protocol):
    """A policy that writes the next assistant turn of several episodes in one call.

    The loop calls :meth:`begin` once before a run of episodes, :meth:`next_turns` once per round with the
    episodes in progress (ordered by key), :meth:`end` as each episode finishes, and :meth:`done` when the run
    is over (also after an error). A policy may keep state per episode between its turns (a KV cache) and per
    run (a shared prefix): the weights can change between runs (a GRPO update), never within one.
    """

    slots: int
    """How many episodes may be in progress together (1: one episode at a time)."""

    def begin(self) -> None:
        """A run of episodes starts: drop whatever was kept from an earlier run."""
        ...

    def next_turns(self, requests: Sequence[TurnRequest]) -> list[str]:
        """The text of the next assistant turn of each request, in order."""
        ...

    def end(self, key: int) -> None:
        """Episode ``key`` is over: whatever was kept for it can go."""
        ...

    def done(self) -> None:
        """The run is over: let go of per-run state (records a caller reads afterwards may stay)."""
        ...


class PerTurn:
    """A one-turn function as a :class:`TurnPolicy`: one episode at a time, nothing kept between turns.

    ``tool_format`` is the format the function writes its calls in (a :class:`trainers.formats.ToolFormat`); the
    episode loop refuses a policy without one rather than guess."""

    slots = 1

    def __init__(self, generate: Generate, tool_format: Any = None) -> None:
        self.generate = generate
        self.tool_format = tool_format if tool_format is not None else getattr(generate, "tool_format", None)

    def begin(self) -> None:
        """Nothing to reset."""

    def next_turns(self, requests: Sequence[TurnRequest]) -> list[str]:
        """Each request's turn from the wrapped function."""
        return [self.generate(request.messages, request.tools) for request in requests]

    def end(self, key: int) -> None:
        """Nothing kept per episode."""

    def done(self) -> None:
        """Nothing kept per run."""


def as_turn_policy(policy: TurnPolicy | Generate) -> TurnPolicy:
    """``policy`` itself when it is a :class:`TurnPolicy`, else the one-turn function wrapped in :class:`PerTurn`."""
    return policy if isinstance(policy, TurnPolicy) else PerTurn(policy)
