"""Trajectory files, and assistant messages in every shape a real client sends.

A trajectory file (``blobkit eval --trajectories``, written by ``blobkit adversary``) is JSON Lines, one
recorded conversation a line::

    {"case_id": "c-...", "messages": [{"role": "system", ...}, ..., {"role": "assistant", ...}],
     "agent": "optional name", "metadata": {optional}}

It is read strictly (:func:`read_trajectories`): lines end at ``\\n`` only, each is strict JSON (no
duplicate keys, NaN or lone surrogates: :mod:`world_format.jsontext`), within a size budget; any problem
is a :class:`~trainers.errors.TrajectoryError` naming ``file:line``.

An assistant message is read as the OpenAI chat API and Hugging Face chat templates write it
(:func:`assistant_text`, :func:`file_call`): ``content`` is a string, null (a turn of calls only) or a
list of content parts whose ``text`` (``{"type": "text"}``) and ``refusal`` (``{"type": "refusal"}``) parts
are its text; a message-level ``refusal`` stands for empty content; calls are ``tool_calls`` (``arguments``
an object, or OpenAI's JSON string) or the legacy single ``function_call``. Content that is none of these
(an image part, a number) is *unreadable*: the caller counts it as a parse failure, never as an empty answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world_format.jsontext import json_lines, loads_strict

from .errors import TrajectoryError
from .scoring import conversation_key

MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024
"""The largest trajectory file read."""
LINE_KEYS = frozenset({"case_id", "messages", "agent", "metadata"})
"""The keys a trajectory line may hold."""
TEXT_PARTS = {"text": "text", "refusal": "refusal"}
"""Content-part type → the field holding its text (OpenAI chat completions' assistant content parts)."""


@dataclass(frozen=True)
class TrajectoryLine:
    """One recorded conversation of a trajectory file."""

    number: int
    """1-based line number in the file."""
    case_id: str
    """The kit case the conversation answers."""
    messages: list[dict[str, Any]]
    """The conversation (only its assistant turns are scored)."""
    agent: str | None
    """The agent's name, when the line gives one."""

    @property
    def conversation(self) -> str:
        """:func:`trainers.scoring.conversation_key` of the messages (equal keys: the same attempt)."""
        return conversation_key(self.messages)


def _line(value: Any, where: str) -> TrajectoryLine:
    if not isinstance(value, dict):
        raise TrajectoryError(f"{where}: expected a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - LINE_KEYS)
    if unknown:
        raise TrajectoryError(f"{where}: unknown key {unknown[0]!r} (a line holds {', '.join(sorted(LINE_KEYS))})")
    case_id, messages, agent = value.get("case_id"), value.get("messages"), value.get("agent")
    if not isinstance(case_id, str) or not isinstance(messages, list):
        raise TrajectoryError(f"{where}: each line needs a case_id (string) and messages (list)")
    bad = next((i for i, m in enumerate(messages) if not isinstance(m, dict) or not isinstance(m.get("role"), str)),
               None)
    if bad is not None:
        raise TrajectoryError(f"{where}: /messages/{bad}: each message is an object with a role (string)")
    if agent is not None and not isinstance(agent, str):
        raise TrajectoryError(f"{where}: /agent: a string when given")
    return TrajectoryLine(int(where.rsplit(":", 1)[1]), case_id, messages, agent)


def read_trajectories(path: Path, max_bytes: int = MAX_TRAJECTORY_BYTES) -> list[TrajectoryLine]:
    """Every line of a trajectory file, checked (see the module docstring); TrajectoryError naming ``file:line``."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TrajectoryError(f"{path}: {size} bytes, over the {max_bytes}-byte budget for a trajectory file")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TrajectoryError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    lines = []
    for number, raw in json_lines(text):
        where = f"{path}:{number}"
        try:
            value = loads_strict(raw)
        except ValueError as exc:
            raise TrajectoryError(f"{where}: invalid JSON: {exc}") from None
        except RecursionError:
            raise TrajectoryError(f"{where}: JSON nested too deeply") from None
        lines.append(_line(value, where))
    if not lines:
        raise TrajectoryError(f"{path} holds no trajectories: nothing to score")
    return lines


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
        except (ValueError, RecursionError) as exc:
            return f"arguments of {function['name']} are not valid JSON ({str(exc)[:120]})"
    return function["name"], arguments
