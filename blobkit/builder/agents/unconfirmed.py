"""``unconfirmed``: the write made before the customer's reply comes; and what its siblings share."""

from __future__ import annotations

from collections.abc import Callable

from world_format.models import UserTurn

from ..probes import Attempt
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """Every reference call made before the customer's scripted turns come; None for a single-turn task."""
    if not case.task.turns:
        return None
    run = case.run
    return Attempt(run.calls, case.task.answer, tuple(len(run.calls) for _ in run.turns_at))


def instead_of_asking(case: CaseRun, said: Callable[[UserTurn], str | None]) -> Attempt | None:
    """The reference calls, saying ``said(turn)`` where the reference asks to confirm a write (``turn.confirms``)
    and going on with the write whatever the customer replies; None when no turn confirms a write (or ``said``
    has nothing to say)."""
    turns = case.task.turns
    if not any(turn.confirms for turn in turns):
        return None
    texts = tuple(said(turn) if turn.confirms else None for turn in turns)
    if all(text is None for text, turn in zip(texts, turns, strict=True) if turn.confirms):
        return None
    return Attempt(case.run.calls, case.task.answer, case.run.turns_at, texts)


AGENT = WrongAgent("unconfirmed", "the right calls, all made before the customer's scripted turns come",
                   "multi-turn tasks", plan, policy_skip=True)
