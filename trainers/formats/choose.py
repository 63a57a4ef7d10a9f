"""Which tool format a base gets: the flag when given, else the one its chat template belongs to.

``auto`` (the default of ``--tool-format``) reads the base's chat template:

1. A template that is already one of blobkit's formats' (the tiny model, every export) keeps it.
2. Otherwise the family is recognised, first by exact text against the original templates TRL
   1.16 keeps for identity checks (``trl.chat_template_utils``: Qwen2.5, Qwen3, Llama 3.x, LFM2),
   then by its control tokens: Llama 3's headers, LFM2's tool-list tokens, ChatML with
   ``<tool_call>`` (Hermes; with ``<think>``, Qwen3), plain ChatML (blobkit's own format).
3. The template is probed (:mod:`trainers.formats.probe`) and the verdict recorded: a family base
   whose template drops tools or calls (SmolLM2, LFM2's first template) is given the family's
   format, which renders them; a template of no known family is refused with ToolFormatError,
   never trained through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainers.errors import ToolFormatError

from .format import ToolFormat
from .hermes import BLOBKIT, HERMES
from .lfm2 import LFM2
from .llama3 import LLAMA3
from .probe import Probe, probe_template
from .qwen3 import QWEN3

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (BLOBKIT, HERMES, QWEN3, LLAMA3, LFM2)}
"""Every tool format by its ``--tool-format`` name."""

_TRL_ORIGINALS = (("qwen2_5_chat_template", "hermes"), ("qwen3_instruct_2507_chat_template", "hermes"),
                  ("qwen3_chat_template", "qwen3"), ("llama3_chat_template", "llama3"),
                  ("llama3_1_chat_template", "llama3"), ("llama3_2_chat_template", "llama3"),
                  ("lfm2_chat_template", "lfm2"), ("lfm2_v2_chat_template", "lfm2"),
                  ("lfm2_2_5_chat_template", "lfm2"), ("lfm2_2_5_v2_chat_template", "lfm2"))


@dataclass(frozen=True)
class Choice:
    """The format a base gets, and why."""

    format: ToolFormat
    reason: str
    probe: Probe | None = None
    """What the base's own template did with the probe conversation (None when the format was requested)."""

    def to_json(self) -> dict[str, Any]:
        """The choice as plan.json records it."""
        return {"name": self.format.name, "reason": self.reason,
                "probe": self.probe.to_json() if self.probe else None, "source": self.format.source}


def get_format(name: str) -> ToolFormat:
    """The format called ``name``; ToolFormatError listing the names otherwise."""
    if name not in FORMATS:
        raise ToolFormatError(f"unknown tool format {name!r}; formats: {', '.join(FORMATS)}")
    return FORMATS[name]


def _trl_originals() -> dict[str, str]:
    from trl import chat_template_utils as known

    return {getattr(known, attr): name for attr, name in _TRL_ORIGINALS if isinstance(getattr(known, attr, None), str)}


def identify_family(template: str) -> tuple[str, str] | None:
    """(format name, how it was recognised) for a chat template, or None when it belongs to no known family."""
    original = _trl_originals().get(template)
    if original:
        return original, "its chat template is a known original"
    if "<|start_header_id|>" in template:
        return "llama3", "its chat template writes Llama 3 headers"
    if "<|tool_list_start|>" in template or "<|tool_call_start|>" in template:
        return "lfm2", "its chat template writes LFM2 tool tokens"
    if "<|im_start|>" in template and "<tool_call>" in template:
        return ("qwen3", "its ChatML template has <tool_call> and <think>") if "<think>" in template else (
            "hermes", "its ChatML template has <tool_call>")
    if "<|im_start|>" in template:
        return "blobkit", "its chat template is ChatML without a tool-call format"
    return None


def choose_format(template: str | None, requested: str = "auto", *, bos_token: str = "",
                  where: str = "the base") -> Choice:
    """The format for a base whose chat template is ``template`` (see the module docstring)."""
    if requested != "auto":
        return Choice(get_format(requested), f"--tool-format {requested}")
    for fmt in FORMATS.values():
        if template == fmt.template:
            return Choice(fmt, f"{where} already carries blobkit's {fmt.name} template")
    probe = probe_template(template, bos_token)
    family = identify_family(template) if template else None
    if family is None:
        verdict = probe.dropped() or "renders tools in a format blobkit cannot parse"
        raise ToolFormatError(f"{where}: blobkit does not know this chat template's tool format (a probe row shows it "
                              f"{verdict}); pass --tool-format with one of {', '.join(FORMATS)} to choose one")
    name, how = family
    own = "renders tools, calls and results" if probe.ok else probe.dropped()
    return Choice(FORMATS[name], f"{how}; its own template {own} (probe row)", probe)


def apply_tool_format(tokenizer: Any, requested: str = "auto", where: str = "the base") -> Choice:
    """Choose the format for ``tokenizer``'s base and set its chat template to the format's (see :func:`choose_format`).

    Raises ToolFormatError when no format fits or the tokenizer splits the format's control tokens.
    """
    choice = choose_format(tokenizer.chat_template, requested, bos_token=tokenizer.bos_token or "", where=where)
    choice.format.apply(tokenizer)
    return choice


def format_of(tokenizer: Any) -> ToolFormat:
    """The format of a tokenizer that already carries a format's template (a checkpoint, an export, the tiny model);
    any other tokenizer's family format, as ``auto`` would choose it (ToolFormatError when none fits)."""
    return choose_format(tokenizer.chat_template, bos_token=tokenizer.bos_token or "").format
