"""A decoded turn as the OpenAI APIs return it: a chat completion (or its chunks), a Response (or its events).

Streams are server-sent events in OpenAI's own order; the turn is decoded first and then sent as its events
(the text as one delta, each call as one), so a streamed and an unstreamed request get the same turn.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

from .engine import Turn
from .messages import calls_so_far, chat_tool_calls

Row = dict[str, Any]


def _usage(turn: Turn) -> dict[str, int]:
    return {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens}


def _content(turn: Turn) -> str:
    """The text a client sees: the words outside the calls, or the whole text when a call block was malformed
    (the client then sees what the model wrote rather than nothing)."""
    return turn.text.strip() if turn.parsed.parse_errors else turn.parsed.content


def chat_message(turn: Turn, rows: list[Row]) -> Row:
    """The assistant message of a chat completion answering the conversation ``rows``."""
    calls = chat_tool_calls(turn.parsed, calls_so_far(rows))
    content = _content(turn)
    message: Row = {"role": "assistant", "content": content if content or not calls else None, "refusal": None}
    return {**message, "tool_calls": calls} if calls else message


def chat_completion(turn: Turn, rows: list[Row], model: str) -> Row:
    """``chat.completion``."""
    return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": chat_message(turn, rows), "finish_reason": turn.finish_reason,
                         "logprobs": None}],
            "usage": _usage(turn)}


def _sse(data: Row | str, event: str | None = None) -> str:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "") + f"data: {body}\n\n"


def chat_chunks(turn: Turn, rows: list[Row], model: str, include_usage: bool) -> Iterator[str]:
    """The ``chat.completion.chunk`` events of a streamed completion, then ``[DONE]``."""
    base = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model, "system_fingerprint": None}

    def chunk(delta: Row, finish: str | None = None) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        return _sse({**body, "usage": None} if include_usage else body)

    message = chat_message(turn, rows)
    yield chunk({"role": "assistant", "content": ""})
    if message["content"]:
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls", [])):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, turn.finish_reason)
    if include_usage:
        yield _sse({**base, "choices": [], "usage": _usage(turn)})
    yield _sse("[DONE]")


def response_output(turn: Turn, rows: list[Row], spaces: dict[str, str]) -> list[Row]:
    """A Response's ``output`` items: the message (when there is text), then one ``function_call`` per call
    (with the ``namespace`` of a function that came inside one)."""
    items: list[Row] = []
    content = _content(turn)
    if content or not turn.parsed.tool_calls:
        items.append({"type": "message", "id": f"msg_{secrets.token_hex(12)}", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}]})
    for call in chat_tool_calls(turn.parsed, calls_so_far(rows)):
        name = call["function"]["name"]
        item: Row = {"type": "function_call", "id": f"fc_{secrets.token_hex(12)}", "call_id": call["id"],
                     "name": name, "arguments": call["function"]["arguments"], "status": "completed"}
        items.append({**item, "namespace": spaces[name]} if name in spaces else item)
    return items


def response_object(output: list[Row], turn: Turn | None, model: str, ident: str, created: int) -> Row:
    """A ``response`` object; ``turn`` None: still in progress (no output yet)."""
    usage = None if turn is None else {
        "input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    status = "in_progress" if turn is None else ("incomplete" if turn.finish_reason == "length" else "completed")
    return {"id": ident, "object": "response", "created_at": created, "model": model, "status": status,
            "output": output, "usage": usage, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "instructions": None,
            "metadata": {}, "temperature": None, "top_p": None, "store": False}


def response_events(turn: Turn, rows: list[Row], spaces: dict[str, str], model: str) -> Iterator[str]:
    """The server-sent events of a streamed Response, in OpenAI's order, each with its ``sequence_number``."""
    ident, created = f"resp_{secrets.token_hex(12)}", int(time.time())
    output = response_output(turn, rows, spaces)
    sequence = iter(range(1 << 30))

    def event(kind: str, **body: Any) -> str:
        return _sse({"type": kind, "sequence_number": next(sequence), **body}, kind)

    yield event("response.created", response=response_object([], None, model, ident, created))
    yield event("response.in_progress", response=response_object([], None, model, ident, created))
    for index, item in enumerate(output):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                                 "content": []})
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                        part=empty)
            if text:
                yield event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                            delta=text, logprobs=[])
            yield event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=text, logprobs=[])
            yield event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                        part=item["content"][0])
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "arguments": "", "status": "in_progress"})
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                        arguments=item["arguments"], name=item["name"])
        yield event("response.output_item.done", output_index=index, item=item)
    # the last event is response.completed even when the token cap cut the turn (its response's status then says
    # incomplete): the openai SDK's stream helper and Codex both wait for response.completed, as vLLM sends it
    yield event("response.completed", response=response_object(output, turn, model, ident, created))
