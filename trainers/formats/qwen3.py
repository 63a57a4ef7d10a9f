"""Qwen3's tool format: Hermes ``<tool_call>`` blocks after an empty ``<think>`` block (non-thinking mode).

Qwen3 models open every answer with a reasoning block, ``<think>…</think>``. blobkit trains and
runs them in Qwen3's non-thinking mode (``enable_thinking=False`` in Qwen3's template, Qwen/Qwen3-8B
model card, "Switching Between Thinking and Non-Thinking Mode"): the generation prompt ends with an
empty ``<think>\\n\\n</think>\\n\\n``, and every assistant turn of a training row is rendered the same
way with that block *outside* the generation markers, so it is never part of the loss and the model
writes only the calls and the answer. Reasoning that a message carries (``<think>…</think>`` in its
content) is dropped by the template, never rendered into the answer; reasoning a model writes anyway
is cut out by the parser, so it never becomes content (an unterminated ``<think>`` is a parse error).
The template is TRL 1.16's ``qwen3_training.jinja`` (Qwen3's template, prefix-preserving) with those
changes; see the header of ``trainers/templates/qwen3.jinja``.
"""

from __future__ import annotations

import re

from .format import ToolFormat
from .hermes import CHATML_TOKENS, END_TOKENS, parse_hermes
from .parsed import ParsedTurn

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)


def parse_qwen3(text: str) -> ParsedTurn:
    """Hermes calls and content with every reasoning block removed (text before a stray ``</think>`` is reasoning)."""
    text = _THINK.sub("", text)
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    open_at = text.find(THINK_OPEN)
    if open_at < 0:
        return parse_hermes(text)
    parsed = parse_hermes(text[:open_at])
    return ParsedTurn(parsed.tool_calls, parsed.content,
                      [*parsed.parse_errors, f"unterminated {THINK_OPEN} block (reasoning is never an answer)"])


QWEN3 = ToolFormat(
    name="qwen3", template_file="qwen3.jinja", end_tokens=END_TOKENS, control_tokens=CHATML_TOKENS,
    parser=parse_qwen3, mask_trail="\n",
    source="Qwen3's chat template (Qwen/Qwen3-*), from TRL 1.16's prefix-preserving trl/chat_templates/"
           "qwen3_training.jinja, in non-thinking mode with the empty think block outside the loss")
