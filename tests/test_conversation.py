"""One conversation renderer: every tool call has an id, and every tool message answers one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES
from kit_cache import cached_kit

from blobkit.builder import BuildConfig
from world_format.conversation import Conversation
from world_format.kit import open_kit


def _pairs_check(messages: list[dict]) -> None:
    pending: list[str] = []
    seen: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            assert not pending, "a tool call was never answered"
            ids = [call["id"] for call in message.get("tool_calls") or []]
            assert not seen & set(ids) and len(set(ids)) == len(ids)
            seen.update(ids)
            pending = ids
        elif message["role"] == "tool":
            assert message["tool_call_id"] == pending.pop(0)
    assert not pending


@pytest.mark.parametrize("world", EXAMPLES, ids=lambda p: p.name)
def test_every_tool_message_of_every_row_answers_the_call_before_it_by_id(
        world: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with open_kit(cached_kit(world / "world.json", tmp_path_factory,
                             BuildConfig(train_cases_per_task=6, eval_cases_per_task=2))) as kit:
        rows = kit.rows()
    assert rows
    for row in rows:
        _pairs_check(row["messages"])


def test_ids_number_calls_across_turns_and_resume_keeps_counting() -> None:
    conversation = Conversation.opening("system", "hi")
    first = conversation.tool_calls([("a", {}), ("b", {})])
    conversation.observation(first[0], "a", {"x": 1})
    conversation.observation(first[1], "b", [])
    resumed = Conversation.resume(conversation.messages)
    assert first == ["call_0", "call_1"] and resumed.tool_calls([("c", {"k": 2})]) == ["call_2"]
    assert conversation.messages[3] == {"role": "tool", "tool_call_id": "call_0", "name": "a", "content": '{"x":1}'}
