"""Helpers of the tool-format tests: a row's assistant turns as a format renders them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainers.formats import ToolFormat


@dataclass(frozen=True)
class Turn:
    """One assistant turn of a row under a format."""

    message: dict[str, Any]
    prompt: str
    """The row's messages before the turn, rendered with the generation prompt."""
    written: str
    """What the model writes after that prompt: the generation block less the format's lead and trail."""
    span: tuple[int, int]
    """The turn's generation block in the text of the whole row."""


def assistant_turns(fmt: ToolFormat, row: dict[str, Any]) -> tuple[str, list[Turn]]:
    """(the whole row's text, its assistant turns); asserts one generation block per assistant message."""
    messages, tools = row["messages"], row["tools"]
    whole = fmt.render(messages, tools)
    positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert len(whole.spans) == len(positions), f"{len(whole.spans)} generation blocks for {len(positions)} turns"
    turns = []
    for position, (start, end) in zip(positions, whole.spans, strict=True):
        block = whole.text[start:end]
        assert block.startswith(fmt.mask_lead) and block.endswith(fmt.mask_trail), repr(block)
        written = block[len(fmt.mask_lead):len(block) - len(fmt.mask_trail)]
        prompt = fmt.render(messages[:position], tools, add_generation_prompt=True).text
        turns.append(Turn(messages[position], prompt, written, (start, end)))
    return whole.text, turns


def expected_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A row message's tool calls as a parser returns them."""
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message.get("tool_calls") or []]


def expected_content(fmt: ToolFormat, message: dict[str, Any]) -> str:
    """A row message's text as the format's parser returns it: none beside calls in a format that drops it."""
    dropped = bool(message.get("tool_calls")) and not fmt.content_with_calls
    return "" if dropped else str(message.get("content") or "").strip()
