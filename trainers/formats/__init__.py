"""Tool formats per model family: render rows and prompts, mask what the model writes, parse it back.

One module per concept: :mod:`.format` (the :class:`ToolFormat` record and text rendering),
:mod:`.parsed` (the parsed turn), one module per call syntax (:mod:`.hermes` for Qwen2.5 and blobkit's
own template, :mod:`.qwen3`, :mod:`.llama3`, :mod:`.lfm2`), :mod:`.probe` (does a template drop tools?)
and :mod:`.choose` (which format a base gets). ``spec/tool-formats.md`` describes the formats.
"""

from .choose import FORMATS, Choice, apply_tool_format, choose_format, format_of, get_format
from .format import Rendered, ToolFormat
from .parsed import ParsedTurn, assistant_message
from .probe import Probe, probe_template

__all__ = ["FORMATS", "Choice", "ParsedTurn", "Probe", "Rendered", "ToolFormat",
           "apply_tool_format", "assistant_message", "choose_format", "format_of", "get_format", "probe_template"]
