"""``unconfirmed-statement``: the write announced, not asked about."""

from __future__ import annotations

from world_format.confirmation import action_word
from world_format.models import UserTurn

from ..probes import Attempt
from .base import CaseRun, WrongAgent
from .unconfirmed import instead_of_asking


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls with a statement naming the action and every detail, but asking nothing, instead of
    each confirmation question ("Going ahead: I will cancel KXTRAB, $310.00 now; no need to reply.")."""
    def announced(turn: UserTurn) -> str | None:
        tool = case.world.tool(turn.confirms.tool) if turn.confirms else None
        if tool is None or turn.confirms is None:
            return None
        return f"Going ahead: I will {action_word(tool)} {', '.join(turn.confirms.states)} now; no need to reply."

    return instead_of_asking(case, announced)


AGENT = WrongAgent("unconfirmed-statement", "the right calls; a statement of the action and its details that asks "
                   "nothing instead of the confirmation question, then the write", "turns that confirm a write", plan,
                   policy_skip=True)
