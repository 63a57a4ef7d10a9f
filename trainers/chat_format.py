"""Rendering prompts and parsing assistant turns in the Qwen2.5 tool-calling format.

The model writes tool calls as::

    <tool_call>
    {"name": "get_order", "arguments": {"order_id": 1042}}
    </tool_call>

:func:`parse_assistant_output` never raises on model output: each malformed block becomes one
entry of ``parse_errors`` and the well-formed blocks are still returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
END_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")

_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn as parsed from generated text."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""
    parse_errors: list[str] = field(default_factory=list)

    @property
    def is_final(self) -> bool:
        """True when the turn makes no tool call and has no malformed tool-call block."""
        return not self.tool_calls and not self.parse_errors


def render_prompt(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The chat-template text for ``messages`` + ``tools`` ending with an open assistant turn."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=True, tokenize=False
    )


def _strip_end_tokens(text: str) -> str:
    for token in END_TOKENS:
        text = text.replace(token, "")
    return text


def _parse_block(body: str, index: int) -> tuple[dict[str, Any] | None, str | None]:
    """Parse one ``<tool_call>`` body; return (call, None) or (None, error)."""
    where = f"tool call {index}"
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"{where}: invalid JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(value, dict):
        return None, f"{where}: expected a JSON object, got {type(value).__name__}"
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None, f"{where}: missing or non-string 'name'"
    arguments = value.get("arguments")
    if not isinstance(arguments, dict):
        got = "missing" if "arguments" not in value else type(arguments).__name__
        return None, f"{where}: 'arguments' must be a JSON object (got {got})"
    return {"name": name, "arguments": arguments}, None


def parse_assistant_output(text: str) -> ParsedTurn:
    """Split generated text into tool calls, free-text content and per-block parse errors."""
    text = _strip_end_tokens(text)
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    index = 0
    for match in _BLOCK.finditer(text):
        outside.append(text[pos : match.start()])
        pos = match.end()
        call, error = _parse_block(match.group(1).strip(), index)
        index += 1
        if call is not None:
            calls.append(call)
        if error is not None:
            errors.append(error)
    rest = text[pos:]
    open_at = rest.find(TOOL_CALL_OPEN)
    if open_at >= 0:
        outside.append(rest[:open_at])
        errors.append(f"tool call {index}: unterminated {TOOL_CALL_OPEN} block")
    else:
        outside.append(rest)
    content = "".join(outside).replace(TOOL_CALL_CLOSE, "").strip()
    return ParsedTurn(tool_calls=calls, content=content, parse_errors=errors)


def assistant_message(parsed: ParsedTurn) -> dict[str, Any]:
    """The row-format assistant message for a parsed turn (``tool_calls`` only when there are some)."""
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in parsed.tool_calls
        ]
    return message
