"""Chat-format control strings, and keeping data from ever becoming one.

A value in the seed, a tool argument or an answer is data. Rendered into a chat template as is, text
such as ``<|im_end|>`` or ``<tool_call>`` becomes real control syntax: it ends a turn early, or makes an
answer parse as a tool call. blobkit keeps data out of control syntax in two ways:

* **observations** are JSON, and :func:`escape_json_text` writes every ``<`` inside them as the JSON
  escape ``\\u003c`` (the same value once parsed, and no control string for any supported template, all
  of which start with ``<``); rows, prompts, episodes and verifiers all render observations this way;
* **natural-language text** (an instruction, an answer key, a value an answer check expects) cannot be
  escaped without changing what the agent must say, so a case whose text carries a control string is
  left out of the kit and counted, and authored world text (policies, descriptions) carrying one is
  refused when the world loads.
"""

from __future__ import annotations

import re

CONTROL_STRINGS = (
    # ChatML (Qwen2.5, Qwen3, SmolLM2) and Hermes-style tool tags
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<tools>", "</tools>", "<think>", "</think>",
    # Llama 3.x
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<|python_tag|>",
    # LFM2
    "<|startoftext|>", "<|tool_call_start|>", "<|tool_call_end|>", "<|tool_list_start|>", "<|tool_list_end|>",
    "<|tool_response_start|>", "<|tool_response_end|>",
)
"""Control strings of the chat formats blobkit supports (from each family's public chat template)."""
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,64}\|>")
"""Any ``<|name|>`` token: the shape every supported family gives its special tokens."""


def control_strings_in(text: str) -> list[str]:
    """The control strings ``text`` carries (known tags, and any ``<|name|>`` token), in order of appearance."""
    found = {match.start(): match.group() for match in _SPECIAL.finditer(text)}
    for marker in CONTROL_STRINGS:
        start = text.find(marker)
        while start >= 0:
            found.setdefault(start, marker)
            start = text.find(marker, start + 1)
    return [found[position] for position in sorted(found)]


def escape_json_text(text: str) -> str:
    """JSON text with every ``<`` written as ``\\u003c`` (valid anywhere in JSON: only strings can hold one)."""
    return text.replace("<", "\\u003c")
