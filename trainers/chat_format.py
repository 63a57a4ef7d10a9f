"""Rendering prompts and parsing assistant turns; the format-aware versions live in :mod:`trainers.formats`.

Prompts come from the tokenizer's own chat template unless a format is given; a turn is parsed in the format
it was written in (``fmt``, a :class:`trainers.formats.ToolFormat`), which every caller must name: there is no
default, since parsing a Llama 3 or LFM2 model's calls as Hermes blocks would score it 0 without a word.
:func:`parse_assistant_output` never raises on model output: each malformed
block becomes one entry of ``parse_errors`` and the well-formed calls are still returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, ToolFormatError
from .formats import ParsedTurn, ToolFormat, assistant_message
from .formats.hermes import END_TOKENS, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["END_TOKENS", "TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ParsedTurn", "RenderedRow", "assistant_message",
           "parse_assistant_output", "render_prompt", "render_row"]


@dataclass(frozen=True)
class RenderedRow:
    """One SFT row as tokens: the full sequence and which tokens the model writes (the assistant's)."""

    ids: list[int]
    assistant: list[int]
    """1 where the token is in an assistant generation block, else 0 (same length as ``ids``)."""


def render_row(tokenizer: Any, row: dict[str, Any]) -> RenderedRow:
    """``row``'s tokens under the tokenizer's chat template (``row["messages"]`` with ``row["tools"]``), with the
    assistant mask TRL's ``assistant_only_loss`` uses (``return_assistant_tokens_mask``: the template's
    ``{% generation %}`` blocks, which every :func:`trainers.formats.apply_tool_format` template has).

    ConfigError for a row without a non-empty ``messages`` list; ToolFormatError when the template refuses the
    row (Llama 3.x: two calls in one turn).
    """
    from jinja2.exceptions import TemplateError

    if not isinstance(row.get("messages"), list) or not row["messages"]:
        raise ConfigError("every training row needs a non-empty 'messages' list")
    try:
        out = tokenizer.apply_chat_template(row["messages"], tools=row.get("tools") or None, tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True)
    except TemplateError as exc:
        raise ToolFormatError(f"the chat template cannot render this row: {exc}") from None
    return RenderedRow(list(out["input_ids"]), [int(bool(m)) for m in out["assistant_masks"]])


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
