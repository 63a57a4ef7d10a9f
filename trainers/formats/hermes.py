"""Hermes-style tool calls, ``<tool_call>{json}</tool_call>``: Qwen2.5's format and blobkit's own.

The model writes each call as::

    <tool_call>
    {"name": "get_order", "arguments": {"order_id": 1042}}
    </tool_call>

Two formats write calls this way. ``hermes`` is Qwen2.5's: TRL's ``qwen2_5_training.jinja``
(Qwen2.5-Instruct's own chat template with ``{% generation %}`` markers), tools listed as full JSON
schemas (Qwen/Qwen2.5-0.5B-Instruct model card, "Function calling"; the format comes from
NousResearch's Hermes-2-Pro). ``blobkit`` is the template of bases whose own template cannot render
tools (SmolLM2's plain ChatML, blobkit's tiny model): the same calls and tool responses, tools listed
compactly, one ``name(param: type, ...)`` line each (``trainers/templates/tiny_tools.jinja``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .format import ToolFormat
from .parsed import ParsedTurn, checked_call, strip_tokens

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
END_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
CHATML_TOKENS: tuple[str, ...] = ("<|im_start|>", "<|im_end|>")

_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


def _parse_block(body: str, index: int) -> tuple[dict[str, Any] | None, str | None]:
    """Parse one ``<tool_call>`` body; return (call, None) or (None, error)."""
    where = f"tool call {index}"
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"{where}: invalid JSON ({exc.msg} at char {exc.pos})"
    except RecursionError:
        return None, f"{where}: JSON nested too deeply"
    return checked_call(value, where)


def parse_hermes(text: str) -> ParsedTurn:
    """Split generated text into ``<tool_call>`` calls, free-text content and per-block parse errors."""
    text = strip_tokens(text, END_TOKENS)
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    index = 0
    for match in _BLOCK.finditer(text):
        outside.append(text[pos : match.start()])
        pos = match.end()
        call, error = _parse_block(match.group(1).strip(), index)
        index += 1
        if call is not None:
            calls.append(call)
        if error is not None:
            errors.append(error)
    rest = text[pos:]
    open_at = rest.find(TOOL_CALL_OPEN)
    if open_at >= 0:
        outside.append(rest[:open_at])
        errors.append(f"tool call {index}: unterminated {TOOL_CALL_OPEN} block")
    else:
        outside.append(rest)
    content = "".join(outside).replace(TOOL_CALL_CLOSE, "").strip()
    return ParsedTurn(tool_calls=calls, content=content, parse_errors=errors)


HERMES = ToolFormat(
    name="hermes", template_file="qwen2_5.jinja", end_tokens=END_TOKENS, control_tokens=CHATML_TOKENS,
    parser=parse_hermes, mask_lead="\n", mask_trail="\n",
    source="Qwen2.5-Instruct's chat template (Qwen/Qwen2.5-*-Instruct tokenizer_config.json) as TRL 1.16 ships it "
           "for training (trl/chat_templates/qwen2_5_training.jinja: the original plus {% generation %} markers)")

BLOBKIT = ToolFormat(
    name="blobkit", template_file="tiny_tools.jinja", end_tokens=END_TOKENS, control_tokens=CHATML_TOKENS,
    parser=parse_hermes, mask_lead="\n", mask_trail="\n",
    source="blobkit's template (trainers/templates/tiny_tools.jinja): TRL's Qwen2.5 training template with tools "
           "listed compactly; for ChatML bases whose own template drops tools (SmolLM2) and for the tiny model")
