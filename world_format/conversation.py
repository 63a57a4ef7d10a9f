"""The one conversation renderer: the chat messages of an episode, as every floor writes them.

Messages follow the shape TRL / Hugging Face chat templates and OpenAI's API share::

    {"role": "system", "content": POLICIES}
    {"role": "user", "content": INSTRUCTION}
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_order", "arguments": {"order_id": 7}}}]}
    {"role": "tool", "tool_call_id": "call_0", "name": "get_order", "content": "{\"id\":7,...}"}
    {"role": "assistant", "content": "Order 7 is shipped."}

``arguments`` is a JSON object (not an OpenAI-style JSON string: Qwen's templates apply ``tojson``
and would encode a string twice; TRL's docs say the same). A tool message's ``content`` is the
observation as canonical JSON (:func:`world_format.chain.observation_text`), never a Python repr.
Call ids are ``call_<n>``, numbered from 0 in the order the calls appear in the conversation, so
the same episode gives byte-identical messages on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .chain import observation_text

if TYPE_CHECKING:
    from .models import UserTurn

Message = dict[str, Any]


def call_id(index: int) -> str:
    """The id of the ``index``-th tool call of a conversation (0-based)."""
    return f"call_{index}"


def prompt_messages(system: str, instruction: str) -> list[Message]:
    """The opening of every conversation: the world's system prompt and the user's request."""
    return [{"role": "system", "content": system}, {"role": "user", "content": instruction}]


@dataclass
class Conversation:
    """A growing list of messages that numbers its tool calls and pairs each with its observation."""

    messages: list[Message] = field(default_factory=list)
    calls: int = 0
    """Tool calls made so far (the next call's number)."""

    @classmethod
    def opening(cls, system: str, instruction: str) -> Conversation:
        """A conversation holding the system prompt and the user's request."""
        return cls(prompt_messages(system, instruction))

    @classmethod
    def resume(cls, messages: list[Message]) -> Conversation:
        """Continue an existing conversation (its calls are counted, so ids stay unique)."""
        calls = sum(len(message.get("tool_calls") or []) for message in messages)
        return cls([dict(message) for message in messages], calls)

    def tool_calls(self, calls: list[tuple[str, Any]], content: str = "") -> list[str]:
        """Append one assistant message making ``calls`` (name, arguments); return their ids."""
        ids = [call_id(self.calls + offset) for offset in range(len(calls))]
        self.calls += len(calls)
        self.messages.append({"role": "assistant", "content": content, "tool_calls": [
            {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}
            for ident, (name, arguments) in zip(ids, calls, strict=True)]})
        return ids

    def observation(self, ident: str, name: str, observation: Any) -> None:
        """Append the tool message answering call ``ident``."""
        self.messages.append({"role": "tool", "tool_call_id": ident, "name": name,
                              "content": observation_text(observation)})

    def answer(self, text: str) -> None:
        """Append an assistant turn without tool calls (a question to the customer, or the final answer)."""
        self.messages.append({"role": "assistant", "content": text})

    def user(self, text: str) -> None:
        """Append the customer's next message (a scripted user turn)."""
        self.messages.append({"role": "user", "content": text})

    def ask(self, turn: UserTurn) -> None:
        """Append a scripted exchange: the agent's question (the reference wording) and the customer's reply."""
        self.answer(turn.assistant)
        self.user(turn.user)

    def unparsed(self, text: str, errors: list[str]) -> None:
        """Append an assistant turn whose tool calls could not be parsed, and the error the agent is shown.

        The error comes back as a tool message named ``parse_error`` answering a call id of its own,
        so a chat template that pairs tool messages with calls still renders the turn.
        """
        ident = call_id(self.calls)
        self.calls += 1
        self.messages.append({"role": "assistant", "content": text})
        self.messages.append({"role": "tool", "tool_call_id": ident, "name": "parse_error",
                              "content": observation_text({"error": "; ".join(errors)})})
