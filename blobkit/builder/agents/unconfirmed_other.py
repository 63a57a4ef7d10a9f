"""``unconfirmed-other``: a question about something else, then the write."""

from __future__ import annotations

from world_format.models import UserTurn

from ..probes import Attempt
from .base import CaseRun, WrongAgent
from .unconfirmed import instead_of_asking

ELSEWHERE = "Is there anything else I can help you with today?"
"""The question asked when the distractor case has no confirmation question to borrow."""


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls with a question about another write instead of each confirmation question: the
    distractor case's own confirmation question (the same action on another row), else an unrelated question."""
    others = [turn.assistant for turn in case.distractor[0].turns if turn.confirms] if case.distractor else []

    def elsewhere(turn: UserTurn) -> str:
        return others[0] if others and others[0] != turn.assistant else ELSEWHERE

    return instead_of_asking(case, elsewhere)


AGENT = WrongAgent("unconfirmed-other", "the right calls; a question about another write (the distractor's "
                   "confirmation question) instead of the confirmation question, then the write",
                   "turns that confirm a write", plan, policy_skip=True)
