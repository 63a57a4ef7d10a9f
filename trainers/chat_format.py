"""Rendering prompts and parsing assistant turns; the format-aware versions live in :mod:`trainers.formats`.

Prompts come from the tokenizer's own chat template unless a format is given; a turn is parsed in the format
it was written in (``fmt``, a :class:`trainers.formats.ToolFormat`), which every caller must name: there is no
default, since parsing a Llama 3 or LFM2 model's calls as Hermes blocks would score it 0 without a word.
:func:`parse_assistant_output` never raises on model output: each malformed
block becomes one entry of ``parse_errors`` and the well-formed calls are still returned.
"""

from __future__ import annotations

from typing import Any

from .formats import ParsedTurn, ToolFormat, assistant_message
from .formats.hermes import END_TOKENS, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["END_TOKENS", "TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ParsedTurn", "assistant_message",
           "parse_assistant_output", "render_prompt"]


def render_prompt(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                  fmt: ToolFormat | None = None) -> str:
    """The chat-template text for ``messages`` + ``tools`` ending with an open assistant turn.

    ``fmt`` given: rendered with that format's template (whatever the tokenizer carries); else with
    the tokenizer's own chat template (which :func:`trainers.formats.apply_tool_format` set).
    """
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False,
                                         **({"chat_template": fmt.template} if fmt is not None else {}))


def parse_assistant_output(text: str, fmt: ToolFormat) -> ParsedTurn:
    """Split generated text into tool calls, free-text content and per-block parse errors, in ``fmt``'s syntax."""
    return fmt.parse(text)
