"""Assistant messages in every shape a real client sends, read as the agent meant them.

An assistant message is read as the OpenAI chat API and Hugging Face chat templates write it:
``content`` is a string, null (a turn of calls only) or a list of content parts whose ``text``
(``{"type": "text"}``) and ``refusal`` (``{"type": "refusal"}``) parts are its text, joined as written; a
message-level ``refusal`` stands for empty content; calls are ``tool_calls`` (``arguments`` an object, or
OpenAI's JSON string) or the legacy single ``function_call``. Content that is none of these (an image part, a
number) is *unreadable*: the caller counts it as a parse failure, never as an empty answer.
"""

from __future__ import annotations

from typing import Any

from world_format.jsontext import loads_strict

TEXT_PARTS = {"text": "text", "refusal": "refusal"}
"""Content-part type → the field holding its text (OpenAI chat completions' assistant content parts)."""


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
        return None
    text = part.get(TEXT_PARTS[part["type"]])
    return text if isinstance(text, str) else None


def assistant_text(message: dict[str, Any]) -> tuple[str, str | None]:
    """(the text of an assistant message, None) or ("", why it cannot be read) (see the module docstring)."""
    content = message.get("content")
    if content is None or content == "":
        refusal = message.get("refusal")
        if refusal is None:
            return "", None
        return (refusal, None) if isinstance(refusal, str) else ("", "refusal is not a string")
    if isinstance(content, str):
        return content, None
    if isinstance(content, list):
        texts = [_part_text(part) for part in content]
        bad = next((i for i, text in enumerate(texts) if text is None), None)
        if bad is None:
            return "".join(text for text in texts if text is not None), None
        kind = content[bad].get("type") if isinstance(content[bad], dict) else type(content[bad]).__name__
        return "", f"content part {bad} ({kind!r}) holds no text"
    return "", f"content is a {type(content).__name__}, not text or a list of content parts"


def raw_calls(message: dict[str, Any]) -> list[Any] | str:
    """The message's tool calls as written (``tool_calls``, or the legacy ``function_call`` as one call), or why
    they cannot be read."""
    calls = message.get("tool_calls")
    legacy = message.get("function_call")
    if calls is None and legacy is not None:
        return [{"type": "function", "function": legacy}]
    if calls is None:
        return []
    return calls if isinstance(calls, list) else "tool_calls must be a list"


def file_call(call: Any) -> tuple[str, Any] | str:
    """(name, arguments) of one tool call in a trajectory file, or why it cannot be executed."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return "a tool call needs function.name"
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI's wire format sends arguments as a JSON string
        try:
            arguments = loads_strict(arguments)
        except ValueError as exc:
            return f"arguments of {function['name']} are not valid JSON ({str(exc)[:120]})"
    return function["name"], arguments
