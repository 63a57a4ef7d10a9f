"""Does a chat template render tools, tool calls and tool results? Render a probe conversation and look.

Plain ChatML templates (SmolLM2's) ignore ``tools`` and render an assistant turn that only has
``tool_calls`` as empty content, and LFM2's first template never reads ``tool_calls``: trained
through such a template, every tool call silently vanishes from the loss. The probe renders one
conversation with a tool, a call to it and its result, and reports which of the three are missing
from the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainers.errors import ToolFormatError

from .format import render_text

PROBE_TOOL = "blobkit_probe_lookup"
PROBE_PARAMETER = "probe_reference"
PROBE_VALUE = "probe-value-4127"
PROBE_RESULT = "probe-result-9083"
PROBE_TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": PROBE_TOOL, "description": "Look a reference up.",
    "parameters": {"type": "object", "properties": {PROBE_PARAMETER: {"type": "string"}},
                   "required": [PROBE_PARAMETER]}}}]
PROBE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Please look up my reference."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {
        "name": PROBE_TOOL, "arguments": {PROBE_PARAMETER: PROBE_VALUE}}}]},
    {"role": "tool", "tool_call_id": "call_0", "name": PROBE_TOOL, "content": PROBE_RESULT},
    {"role": "assistant", "content": "Your reference is found."},
]


@dataclass(frozen=True)
class Probe:
    """What a chat template did with the probe conversation."""

    renders_tools: bool
    """The tool list reaches the prompt (the probe tool's name and parameter appear before the first turn)."""
    renders_tool_calls: bool
    """The assistant's call (its argument value) appears."""
    renders_tool_results: bool
    """The tool's result appears."""
    error: str | None = None
    """Why the template could not render the probe at all, or None."""

    @property
    def ok(self) -> bool:
        """True when tools, calls and results all survive the template."""
        return self.renders_tools and self.renders_tool_calls and self.renders_tool_results

    def dropped(self) -> str:
        """What the template loses, in words ("" when nothing)."""
        if self.error:
            return f"cannot render a tool conversation ({self.error})"
        lost = [what for what, kept in (("the tool list", self.renders_tools), ("tool calls", self.renders_tool_calls),
                                        ("tool results", self.renders_tool_results)) if not kept]
        return "drops " + " and ".join(lost) if lost else ""

    def to_json(self) -> dict[str, Any]:
        """The probe as plan.json records it."""
        return {"renders_tools": self.renders_tools, "renders_tool_calls": self.renders_tool_calls,
                "renders_tool_results": self.renders_tool_results, "error": self.error}


def probe_template(template: str | None, bos_token: str = "") -> Probe:
    """Render the probe conversation through ``template`` (None: no template at all) and report what survives."""
    if not template:
        return Probe(False, False, False, "no chat template")
    try:
        prompt = render_text(template, PROBE_MESSAGES[:2], PROBE_TOOLS, add_generation_prompt=True,
                             bos_token=bos_token).text
        whole = render_text(template, PROBE_MESSAGES, PROBE_TOOLS, bos_token=bos_token).text
    except ToolFormatError as exc:
        return Probe(False, False, False, str(exc))
    return Probe(PROBE_TOOL in prompt and PROBE_PARAMETER in prompt, PROBE_VALUE in whole, PROBE_RESULT in whole)
