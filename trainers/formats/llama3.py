"""Llama 3.x's tool format: one bare JSON call per turn, ``{"name": ..., "parameters": {...}}``, results as ``ipython``.

From the Llama 3.1 and 3.2 model cards (meta-llama/Llama-3.2-1B-Instruct, "Tool use with
JSON-based function calling") and Meta's chat template: custom tools are JSON schemas in the first
user message, the assistant answers a call with one JSON object whose arguments are under
``parameters``, followed by ``<|eot_id|>``, and the tool result comes back in the ``ipython`` role.
The template writes one call per assistant turn (Meta's raises on more); a kit row with two calls in
one turn cannot be written in this format (ToolFormatError). A call turn is the call's JSON alone, as Meta's
template writes it: text the row's turn says before its call (a step's ``say``) is dropped, so the row trains
and evaluates as the call alone (``content_with_calls=False``). The parser also accepts ``arguments``
for ``parameters`` and a leading ``<|python_tag|>`` (Llama 3.1's built-in-tool prefix). A turn of JSON that
names no call (no ``name`` with ``parameters``/``arguments``) is an answer: Llama 3 models answer in JSON when
asked for structured output.
"""

from __future__ import annotations

import json
from typing import Any

from .format import ToolFormat
from .parsed import ParsedTurn, checked_call, strip_tokens

END_TOKENS: tuple[str, ...] = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
PYTHON_TAG = "<|python_tag|>"


def _is_call(value: Any) -> bool:
    """Whether a JSON value is meant as a call: an object with ``name`` and ``parameters`` (or ``arguments``)."""
    return isinstance(value, dict) and "name" in value and ("parameters" in value or "arguments" in value)


def parse_llama3(text: str) -> ParsedTurn:
    """A turn that is one JSON call object is a call; any other turn — prose, or JSON that is no call (an object
    without ``name`` and ``parameters``, a list, a string) — is the answer, as written. A turn that starts with
    ``{`` but is not valid JSON, or a call followed by more text, is a parse error."""
    body = strip_tokens(text, END_TOKENS).strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG):].lstrip()
    if not body.startswith("{"):
        return ParsedTurn(content=body)
    where = "tool call 0"
    try:
        value, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as exc:
        return ParsedTurn(parse_errors=[f"{where}: invalid JSON ({exc.msg} at char {exc.pos})"])
    except RecursionError:
        return ParsedTurn(parse_errors=[f"{where}: JSON nested too deeply"])
    if not _is_call(value):  # JSON text that names no call is the agent's answer (Llama 3 answers in JSON too)
        return ParsedTurn(content=body)
    if body[end:].strip():
        return ParsedTurn(parse_errors=[f"{where}: text after the call's JSON object (one call per turn)"])
    key = "parameters" if "parameters" in value else "arguments"
    call, error = checked_call(value, where, key)
    return ParsedTurn(tool_calls=[call] if call else [], parse_errors=[error] if error else [])


LLAMA3 = ToolFormat(
    name="llama3", template_file="llama3.jinja", end_tokens=END_TOKENS,
    control_tokens=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    parser=parse_llama3, bos_token="<|begin_of_text|>", one_call_per_turn=True, content_with_calls=False,
    source="Meta's Llama 3.2 chat template (meta-llama/Llama-3.2-*-Instruct; TRL 1.16 trl/chat_templates/"
           "llama3_2.jinja) with generation markers and a fixed date; Llama 3.1/3.2 model cards, JSON tool calling")
