"""The model endpoint's reading of OpenAI conversations into the kit's row format, and a shadow replay's view."""

from __future__ import annotations

import json

import pytest

from blobkit.serving.errors import ServingError
from blobkit.serving.messages import chat_rows, chat_tool_calls, response_rows, response_tools
from blobkit.serving.records import ChatMessage, ResponseTool
from blobkit.serving.shadow import Shadow
from trainers.formats import ParsedTurn
from world_format.conversation import Conversation

GET_ORDER = {"type": "function", "function": {"name": "get_order", "description": "One order.",
                                              "parameters": {"type": "object", "properties": {}}}}


def _episode() -> list[dict[str, object]]:
    """A conversation as blobkit's own loop writes it."""
    conversation = Conversation.opening("Be brief.", "Where is order 7?")
    (ident,) = conversation.tool_calls([("get_order", {"order_id": 7})])
    conversation.observation(ident, "get_order", {"id": 7, "status": "shipped"})
    conversation.answer("Shipped.")
    conversation.user("Thanks")
    return conversation.messages


def test_an_openai_client_sending_blobkits_episode_back_gives_blobkits_own_rows() -> None:
    rows = _episode()
    wire = [ChatMessage.model_validate({**m, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
        for c in m["tool_calls"]]} if "tool_calls" in m else {k: v for k, v in m.items() if k != "name"})
        for m in rows]
    assert chat_rows(wire) == rows


def test_the_responses_items_of_the_same_episode_give_the_same_rows() -> None:
    rows = _episode()
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where is order 7?"}]},
             {"type": "function_call", "call_id": "call_0", "name": "get_order", "arguments": '{"order_id": 7}'},
             {"type": "function_call_output", "call_id": "call_0", "output": rows[3]["content"]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Shipped."}]},
             {"type": "message", "role": "user", "content": "Thanks"}]
    assert response_rows(items, "Be brief.") == rows


def test_generated_calls_are_numbered_after_the_calls_already_made() -> None:
    parsed = ParsedTurn(tool_calls=[{"name": "get_order", "arguments": {"order_id": 8}}])
    (call,) = chat_tool_calls(parsed, 1)
    assert call["id"] == "call_1" and json.loads(call["function"]["arguments"]) == {"order_id": 8}


@pytest.mark.parametrize("items", [
    [{"type": "function_call_output", "call_id": "call_3", "output": "{}"}],
    [{"type": "function_call", "call_id": "call_0", "name": "get_order", "arguments": "[1]"}],
    [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
    [{"type": "web_search_call"}],
])
def test_items_the_model_cannot_read_are_refused_never_dropped(items: list[dict[str, object]]) -> None:
    with pytest.raises(ServingError):
        response_rows(items, None)


def test_a_shadow_shows_only_the_worlds_namespace_in_its_order_and_observations_without_wall_time() -> None:
    world = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("b_tool", "a_tool")]
    specs, spaces = response_tools([ResponseTool.model_validate(t) for t in (
        {"type": "function", "name": "read_mcp_resource"},
        {"type": "namespace", "name": "world", "tools": sorted(world, key=lambda t: str(t["name"]))})])
    shadow = Shadow("world", ("b_tool", "a_tool"))
    assert [s["function"]["name"] for s in shadow.tools(specs, spaces)] == ["b_tool", "a_tool"]
    rows = [{"role": "tool", "tool_call_id": "call_0", "name": "a_tool",
             "content": 'Wall time: 0.0051 seconds\nOutput:{"id":7}'}]
    assert shadow.rows(rows)[0]["content"] == '{"id":7}'
