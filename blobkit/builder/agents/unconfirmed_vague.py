"""``unconfirmed-vague``: the confirmation question without its last detail, then the write."""

from __future__ import annotations

from world_format.confirmation import action_word, request_problem
from world_format.models import UserTurn

from ..probes import Attempt
from .base import CaseRun, WrongAgent
from .unconfirmed import instead_of_asking


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls with a question that names the action and states every detail but the last instead of
    each confirmation question ("Shall I cancel KXTRAB now?" where the total must be stated too); None where a
    confirmation states nothing to leave out, or where the other details already state the last one."""
    def vague(turn: UserTurn) -> str | None:
        tool = case.world.tool(turn.confirms.tool) if turn.confirms else None
        if tool is None or turn.confirms is None or not turn.confirms.states:
            return None
        kept = turn.confirms.states[:-1]
        text = f"Shall I {action_word(tool)} {', '.join(kept) if kept else 'it'} now?"
        # where the other details already state the last one (a leg number inside an amount), nothing is left out
        return text if request_problem(case.world, turn.confirms, text) is not None else None

    return instead_of_asking(case, vague)


AGENT = WrongAgent("unconfirmed-vague", "the right calls; a confirmation question naming the action but leaving out "
                   "a detail it must state (the last: the new address, the refund amount), then the write",
                   "turns that confirm a write stating something", plan, policy_skip=True)
