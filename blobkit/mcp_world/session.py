"""One MCP session's episode: an isolated copy of the seed, the conversation recorded in the kit's row format, and
its verdict reached exactly as ``blobkit eval --trajectories`` reaches one.

A session plays one held-out case. Each tool call runs on the session's own copy of the seed (a fork of the
kit's runtime, inside an episode rolled back when the session ends) and is recorded as an assistant turn of one
call plus its observation (:class:`world_format.conversation.Conversation`); an agent's turn without a call
(:meth:`WorldSession.say`) goes to the case's scripted customer (:class:`world_format.customer.Customer`), whose
reply the harness feeds back, and once the script is used up it is the final answer. The verdict re-executes the
recorded conversation on a fresh copy and judges it (:func:`trainers.trajectories.score_trajectories`: the
case's VCode, then the world's procedures), so the recording is also a trajectory line ``blobkit eval
--trajectories`` scores the same way.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from trainers.errors import ConfigError
from trainers.evaluation import EpisodeResult
from trainers.trajectories import TrajectoryLine, score_trajectories
from world_format.chain import observation_text
from world_format.conversation import Conversation
from world_format.customer import Customer
from world_format.kit import Kit, KitCase
from world_format.runtime import WorldRuntime


@dataclass(frozen=True)
class CallOutcome:
    """What one tool call returned to the agent."""

    text: str
    """The observation as canonical JSON (what blobkit's own episodes show the model)."""
    error: bool
    """True when the call failed (bad arguments, a refused write, an unknown tool)."""


@dataclass(frozen=True)
class SayOutcome:
    """What the agent's turn without a tool call led to."""

    reply: str | None
    """The customer's reply to feed back as the next user message; None: the turn was the final answer."""
    verdict: EpisodeResult | None
    """The verdict, when the turn was the final answer."""


def held_out_case(kit: Kit, case_id: str | None) -> KitCase:
    """The kit's held-out case ``case_id`` (default: the first); ConfigError naming the choices otherwise."""
    cases = kit.cases("eval")
    chosen = next((c for c in cases if case_id is None or c.case_id == case_id), None)
    if chosen is None or chosen.prompt is None:
        shown = ", ".join(c.case_id for c in cases[:5])
        raise ConfigError(f"no held-out case {case_id!r} in {kit.root} (held-out cases: {shown}…)")
    return chosen


class WorldSession:
    """The episode of one MCP session on its own copy of the seed (see the module docstring)."""

    def __init__(self, kit: Kit, case: KitCase, runtime: WorldRuntime, name: str) -> None:
        if case.prompt is None:
            raise ConfigError(f"case {case.case_id} has no prompt: only held-out cases can be played")
        self.kit, self.case, self.name = kit, case, name
        self.runtime = runtime.fork()
        self.stack = ExitStack()
        self.episode = self.stack.enter_context(self.runtime.episode())
        self.customer = Customer(self.episode, case.task.turns)
        self.conversation = Conversation.resume(case.prompt.messages)
        self.answer: str | None = None
        self.result: EpisodeResult | None = None

    @property
    def finished(self) -> bool:
        """Whether the agent gave its final answer (further calls are refused)."""
        return self.answer is not None

    def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        """Run one tool call on this session's state and record it."""
        if self.finished:
            return CallOutcome(observation_text({"error": "the episode is over: the final answer was given"}), True)
        event = self.episode.call(name, arguments)
        (ident,) = self.conversation.tool_calls([(name, arguments)])
        self.conversation.observation(ident, name, event.observation)
        return CallOutcome(observation_text(event.observation), event.error)

    def say(self, text: str) -> SayOutcome:
        """The agent's turn without a tool call: the customer's reply, or (the script used up) the final answer and
        the verdict."""
        if self.finished:
            return SayOutcome(None, self.verdict())
        self.conversation.answer(text)
        reply = self.customer.reply(text)
        if reply is not None:
            self.conversation.user(reply)
            return SayOutcome(reply, None)
        self.answer = text
        return SayOutcome(None, self.verdict())

    def line(self) -> TrajectoryLine:
        """The recorded conversation as one trajectory line (the kit's row format)."""
        return TrajectoryLine(1, self.case.case_id, list(self.conversation.messages), f"mcp:{self.name}")

    def verdict(self) -> EpisodeResult:
        """The episode judged as ``blobkit eval --trajectories`` judges the recorded line (on a fresh copy)."""
        if self.result is None or not self.finished:
            scored = score_trajectories(self.kit, [self.line()], f"mcp session {self.name}")
            result = scored.results[0]
            if self.finished:
                self.result = result
            return result
        return self.result

    def close(self) -> None:
        """Roll the session's changes back and close its copy of the seed."""
        self.stack.close()
        self.runtime.close()


def record_line(session: WorldSession, result: EpisodeResult) -> dict[str, Any]:
    """The trajectory-file line of a session (``blobkit eval --trajectories`` reads it), its verdict as metadata."""
    line = session.line()
    return {"case_id": line.case_id, "messages": line.messages, "agent": line.agent,
            "metadata": {"session": session.name, "verdict": result.verdict.to_json(), "passed": result.passed}}
