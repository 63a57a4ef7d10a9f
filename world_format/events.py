"""A trajectory as the procedure checker reads it: calls with their observations, what the agent said, the replies.

Two sources give the same events: an episode as it ran (:func:`episode_events`: its trace, what the agent told
the customer and whether the customer took it as the question its reply answers, and the final answer) and a
conversation in the kit's row format (:func:`message_events`: a training row or a recorded trajectory).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .runtime import Episode


@dataclass(frozen=True)
class Event:
    """One step of a trajectory: the customer's request, a tool call with its observation, the agent asking (a turn
    without a call that the customer answers), the customer's reply, or something else the agent said (text beside
    calls, the answer)."""

    kind: Literal["request", "call", "ask", "reply", "say"]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    observation: Any = None
    error: bool = False
    text: str = ""
    """request and reply: what the customer wrote; ask and say: what the agent wrote."""
    accepted: bool = True
    """reply: whether the customer took the question as the one their scripted reply answers (a "yes" to it),
    else the reply said the question was unclear."""


def _call(tool: str, arguments: Any, observation: Any, error: bool) -> Event:
    return Event("call", tool, arguments if isinstance(arguments, dict) else {}, observation, error)


def episode_events(episode: Episode, answer: str | None, request: str = "") -> list[Event]:
    """The events of an episode, in the order they happened: the customer's ``request``, then calls, questions and
    replies, ending with its final answer (when it gave one)."""
    events: list[Event] = [Event("request", text=request)]
    said = sorted(episode.said, key=lambda s: s.position)  # stable: in the order said at one position
    spoken = 0
    for position, event in enumerate([*episode.trace, None]):
        while spoken < len(said) and said[spoken].position <= position:
            item = said[spoken]
            events.append(Event("ask" if item.kind == "ask" else "say", text=item.text))
            if item.kind == "ask":
                events.append(Event("reply", text=item.reply, accepted=item.accepted))
            spoken += 1
        if event is not None:
            events.append(_call(event.tool, event.arguments, event.observation, event.error))
    if answer:
        events.append(Event("say", text=answer))
    return events


def _observation(content: Any) -> tuple[Any, bool]:
    try:
        value = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return content, False
    return value, isinstance(value, dict) and "error" in value


def message_events(messages: Sequence[dict[str, Any]], unclear_reply: str | None = None) -> list[Event]:
    """A conversation's events (row format: assistant ``tool_calls`` answered by ``tool`` messages by id; the
    first user message is the request, later ones are replies; a reply that is ``unclear_reply`` did not accept
    the question before it)."""
    answers = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    events: list[Event] = []
    requested = False
    for message in messages:
        role, content = message.get("role"), message.get("content")
        text = content if isinstance(content, str) else ""
        if role == "user":
            accepted = unclear_reply is None or text != unclear_reply
            events.append(Event("reply", text=text, accepted=accepted) if requested else Event("request", text=text))
            requested = True
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls:
                events.append(Event("ask", text=text))
            elif text:
                events.append(Event("say", text=text))
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function") if isinstance(call, dict) else None
                function = function if isinstance(function, dict) else {}
                observation, error = _observation(answers.get(call.get("id")) if isinstance(call, dict) else None)
                events.append(_call(str(function.get("name", "")), function.get("arguments"), observation, error))
    return events
