"""OpenAI conversations ↔ the kit's row format, the one shape every blobkit loop renders and parses.

Chat messages and Responses items are read into row messages (:mod:`world_format.conversation`: arguments as a
JSON object, tool messages naming their call's tool), so the export's chat template renders a conversation an
OpenAI client sends exactly as blobkit's own episodes render it. A generated turn (a
:class:`~trainers.formats.ParsedTurn`) goes back out with call ids ``call_<n>``, numbered across the
conversation as :class:`~world_format.conversation.Conversation` numbers them: a client that replays blobkit's
episode sends blobkit's own messages back.
"""

from __future__ import annotations

import json
from typing import Any

from trainers.formats import ParsedTurn
from world_format.conversation import call_id

from .errors import ServingError
from .records import ChatMessage, ChatTool, ResponseTool

Row = dict[str, Any]


def part_text(content: str | list[dict[str, Any]] | None, where: str) -> str:
    """The text of a message's content: a string, or text parts joined (``text``, ``input_text``, ``output_text``,
    ``refusal``); ServingError for any other part (an image is refused, never dropped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type")
        text = part.get("refusal" if kind == "refusal" else "text")
        if kind not in ("text", "input_text", "output_text", "refusal") or not isinstance(text, str):
            raise ServingError(f"{where}.content[{index}]: a {kind!r} part; this model reads text only", where)
        texts.append(text)
    return "".join(texts)


def arguments_object(text: str, where: str) -> dict[str, Any]:
    """A call's JSON-string arguments as the object the kit's rows hold; ServingError when not a JSON object."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ServingError(f"{where}: arguments are not valid JSON ({exc})", where) from None
    if not isinstance(value, dict):
        raise ServingError(f"{where}: arguments must be a JSON object", where)
    return value


def _call_row(ident: str, name: str, arguments: dict[str, Any]) -> Row:
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_row(ident: str, content: str, names: dict[str, str], where: str) -> Row:
    if ident not in names:
        raise ServingError(f"{where}: tool_call_id {ident!r} answers no earlier call", where)
    return {"role": "tool", "tool_call_id": ident, "name": names[ident], "content": content}


def chat_rows(messages: list[ChatMessage]) -> list[Row]:
    """A chat-completion request's messages as row messages (``developer`` read as ``system``)."""
    rows: list[Row] = []
    names: dict[str, str] = {}
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        text = part_text(message.content, where)
        if message.role == "tool":
            rows.append(_tool_row(message.tool_call_id or "", text, names, where))
        elif message.role == "assistant":
            calls = []
            for number, call in enumerate(message.tool_calls or []):
                names[call.id] = call.function.name
                calls.append(_call_row(call.id, call.function.name,
                                       arguments_object(call.function.arguments, f"{where}.tool_calls[{number}]")))
            row: Row = {"role": "assistant", "content": text or message.refusal or ""}
            rows.append({**row, "tool_calls": calls} if calls else row)
        else:
            rows.append({"role": "system" if message.role == "developer" else message.role, "content": text})
    return rows


def chat_tools(tools: list[ChatTool] | None) -> list[Row]:
    """The request's tools as the function specs the chat templates render (the kit's own tool shape)."""
    return [{"type": "function", "function": tool.function.model_dump(exclude_none=True)} for tool in tools or []]


def response_tools(tools: list[ResponseTool] | None) -> tuple[list[Row], dict[str, str]]:
    """(function specs, function name → its namespace) of a Responses request's tools; a ``namespace`` entry
    contributes its functions under their own names; any other kind is refused."""
    specs: list[Row] = []
    spaces: dict[str, str] = {}
    for index, tool in enumerate(tools or []):
        entries = [(tool.model_dump(exclude_none=True), None)] if tool.type == "function" else \
            [(inner, tool.name) for inner in tool.tools or []] if tool.type == "namespace" else None
        if entries is None:
            raise ServingError(f"tools[{index}]: a {tool.type!r} tool; this endpoint serves function tools only",
                               f"tools[{index}]")
        for spec, space in entries:
            if spec.get("type", "function") != "function" or not isinstance(spec.get("name"), str):
                raise ServingError(f"tools[{index}]: each tool needs type function and a name", f"tools[{index}]")
            function = {key: spec[key] for key in ("name", "description", "parameters") if key in spec}
            specs.append({"type": "function", "function": function})
            if space:
                spaces[spec["name"]] = space
    return specs, spaces


def _flush(rows: list[Row], pending: Row | None) -> None:
    if pending is not None:
        rows.append(pending)


def response_rows(items: str | list[dict[str, Any]], instructions: str | None) -> list[Row]:
    """A Responses request's ``instructions`` and ``input`` as row messages; consecutive ``function_call`` items
    (and the assistant message before them) make one assistant turn, as a chat model writes it."""
    rows: list[Row] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return [*rows, {"role": "user", "content": items}]
    names: dict[str, str] = {}
    turn: Row | None = None
    for index, item in enumerate(items):
        where, kind = f"input[{index}]", item.get("type", "message")
        if kind == "function_call":
            name, ident = item.get("name"), item.get("call_id")
            if not isinstance(name, str) or not isinstance(ident, str):
                raise ServingError(f"{where}: a function_call needs name and call_id", where)
            names[ident] = name
            turn = turn or {"role": "assistant", "content": ""}
            call = _call_row(ident, name, arguments_object(str(item.get("arguments", "")), where))
            turn = {**turn, "tool_calls": [*turn.get("tool_calls", []), call]}
            continue
        if kind == "reasoning":
            continue
        _flush(rows, turn)
        turn = None
        if kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else part_text(output if isinstance(output, list) else None,
                                                                    where)
            rows.append(_tool_row(str(item.get("call_id")), text, names, where))
        elif kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise ServingError(f"{where}: a message's role is system, developer, user or assistant", where)
            text = part_text(item.get("content"), where)
            if role == "assistant":
                turn = {"role": "assistant", "content": text}
            else:
                rows.append({"role": "system" if role == "developer" else role, "content": text})
        else:
            raise ServingError(f"{where}: a {kind!r} item; this endpoint reads message, function_call and "
                               "function_call_output items", where)
    _flush(rows, turn)
    return rows


def calls_so_far(rows: list[Row]) -> int:
    """Tool calls the conversation already made (the next call is ``call_<that>``)."""
    return sum(len(row.get("tool_calls") or []) for row in rows)


def chat_tool_calls(parsed: ParsedTurn, first: int) -> list[dict[str, Any]]:
    """A parsed turn's calls in OpenAI's wire shape, numbered from ``first``."""
    return [{"id": call_id(first + offset), "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}
            for offset, call in enumerate(parsed.tool_calls)]
