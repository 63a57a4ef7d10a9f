"""The scripted customer of an episode: their replies, in order, to what the agent asks.

A task's ``turns`` script the customer's side. When the agent ends a turn without a tool call, the customer
replies with the next scripted turn — but a turn that confirms a write (``confirms``) is given only to a question
that asks to confirm that write (:func:`world_format.confirmation.request_problem`); anything else (an empty turn,
a statement, a question about another action or row) gets the world's ``unclear_reply``, and the scripted turn
still waits. Once the script is used up, the agent's next turn without a call is its final answer. Every loop
that plays a case — the gate's probes and reference runs, evaluation and GRPO episodes, ``blobkit eval
--trajectories`` — asks this one customer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from .confirmation import request_problem, stated_keys
from .models import UserTurn
from .runtime import Episode


class Customer:
    """The customer of one episode (their scripted turns, replied in order)."""

    def __init__(self, episode: Episode, turns: Sequence[UserTurn]) -> None:
        self.episode = episode
        self.pending = deque(turns)

    @property
    def done(self) -> bool:
        """Whether every scripted turn was given (the agent's next turn without a call is its final answer)."""
        return not self.pending

    def reply(self, text: str) -> str | None:
        """The customer's reply to an assistant turn without tool calls, recorded on the episode (what the agent
        said, and the scripted turn when it was given); None when the script is used up (``text`` is the final
        answer)."""
        if not self.pending:
            return None
        turn, runtime = self.pending[0], self.episode.runtime
        problem = request_problem(runtime.world, turn.confirms, text, stated_keys(runtime)) if turn.confirms else None
        reply = turn.user if problem is None else runtime.world.procedures.unclear_reply
        self.episode.say(text, "ask", accepted=problem is None, problem=problem or "", reply=reply)
        if problem is None:
            self.pending.popleft()
            self.episode.deliver_turn()
        return reply
