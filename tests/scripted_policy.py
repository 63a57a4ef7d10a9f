"""A policy that replays given assistant texts in hermes' format: a stand-in for the model, not for the world.

Shared by the GRPO and RFT tests: ``Scripted(hermes_texts(row))`` replays an SFT row's own assistant turns."""

from __future__ import annotations

import json
from typing import Any

from trainers.formats import FORMATS
from trainers.generation import Decoded
from trainers.grpo import SerialPolicy


class Scripted(SerialPolicy):
    """Writes ``texts`` one per turn, then "I don't know."."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self.texts, self.written = texts, 0
        self.tool_format = FORMATS["hermes"]

    def turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, Decoded]:
        text = self.texts[self.written] if self.written < len(self.texts) else "I don't know."
        self.written += 1
        return text, Decoded([], [], True)


def hermes_texts(row: dict[str, Any]) -> list[str]:
    """The row's assistant turns as a model would write them in hermes' format."""
    return ["".join(f"<tool_call>\n{json.dumps(call['function'])}\n</tool_call>" for call in message["tool_calls"])
            if message.get("tool_calls") else message["content"]
            for message in row["messages"] if message["role"] == "assistant"]
