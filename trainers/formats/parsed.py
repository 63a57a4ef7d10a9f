"""One assistant turn as parsed from generated text, whatever the tool format.

Every format's parser returns a :class:`ParsedTurn` and never raises on model output: each
malformed tool-call block becomes one entry of ``parse_errors`` and the well-formed calls are
still returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from world_format.jsontext import lone_surrogate


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn as parsed from generated text."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """The well-formed calls, each ``{"name": str, "arguments": dict}``, in the order written."""
    content: str = ""
    """The text outside the tool-call blocks (and outside any reasoning block), stripped."""
    parse_errors: list[str] = field(default_factory=list)
    """One message per malformed block (``"tool call N: ..."``)."""

    @property
    def is_final(self) -> bool:
        """True when the turn makes no tool call and has no malformed tool-call block."""
        return not self.tool_calls and not self.parse_errors


def assistant_message(parsed: ParsedTurn) -> dict[str, Any]:
    """The row-format assistant message for a parsed turn (``tool_calls`` only when there are some)."""
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in parsed.tool_calls
        ]
    return message


def strip_tokens(text: str, tokens: tuple[str, ...]) -> str:
    """``text`` without any of ``tokens`` (end-of-turn markers a decoder may leave in)."""
    for token in tokens:
        text = text.replace(token, "")
    return text


def checked_call(value: Any, where: str, arguments_key: str = "arguments") -> tuple[dict[str, Any] | None, str | None]:
    """(call, None) when ``value`` is ``{"name": non-empty str, arguments_key: object}``, else (None, error); a value
    holding a lone surrogate is an error."""
    if not isinstance(value, dict):
        return None, f"{where}: expected a JSON object, got {type(value).__name__}"
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None, f"{where}: missing or non-string 'name'"
    arguments = value.get(arguments_key)
    if not isinstance(arguments, dict):
        got = "missing" if arguments_key not in value else type(arguments).__name__
        return None, f"{where}: '{arguments_key}' must be a JSON object (got {got})"
    broken = lone_surrogate({"name": name, arguments_key: arguments})
    if broken is not None:
        return None, f"{where}: {broken} holds a lone UTF-16 surrogate (no character)"
    return {"name": name, "arguments": arguments}, None
