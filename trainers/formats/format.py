"""A tool format: how one model family writes tool lists, tool calls and tool results, and how to read them back.

A :class:`ToolFormat` is a training chat template (Jinja, with ``{% generation %}`` markers around
what the model writes, so TRL's ``assistant_only_loss`` and mlx SFT mask exactly those tokens), the
tokens that end an assistant turn, the control tokens a tokenizer must hold as single tokens, and a
parser from generated text back to calls. Applying a format to a tokenizer sets its chat template;
the tokenizer is saved with every checkpoint and export, so what trained with a format also
evaluates, replays and continues (GRPO) with it.

The generation block of an assistant turn is ``mask_lead + what the model writes + mask_trail``:
what the model writes is the text after the generation prompt, up to and including its end token;
``mask_lead``/``mask_trail`` are template text inside the block that the model never generates
(blobkit's and Qwen2.5's templates put the newline after ``<|im_start|>assistant`` and the one after
``<|im_end|>`` inside it, as TRL's Qwen2.5 training template does).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from trainers.errors import ToolFormatError

from .parsed import ParsedTurn

_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


@cache
def read_template(file: str) -> str:
    """The text of ``trainers/templates/FILE``."""
    return (TEMPLATES / file).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Rendered:
    """A conversation rendered as text, with the character spans of its generation blocks."""

    text: str
    spans: list[tuple[int, int]]
    """``(start, end)`` character offsets of each ``{% generation %}`` block, in order."""


@dataclass(frozen=True)
class ToolFormat:
    """One model family's tool-calling format (see the module docstring)."""

    name: str
    """The ``--tool-format`` value."""
    template_file: str
    """Training chat template under ``trainers/templates/``."""
    end_tokens: tuple[str, ...]
    """Tokens that end an assistant turn (decoding stops at any of them, and the tokenizer's eos)."""
    control_tokens: tuple[str, ...]
    """Tokens the template writes that a tokenizer must encode as one token each."""
    parser: Callable[[str], ParsedTurn]
    """Generated text → calls, content and parse errors; never raises."""
    source: str
    """Where the format comes from (model card, template origin)."""
    mask_lead: str = ""
    mask_trail: str = ""
    bos_token: str = ""
    """The ``bos_token`` the template writes when rendered as text (the tokenizer's own when applied)."""
    one_call_per_turn: bool = False
    """The family writes at most one tool call per assistant turn (Llama 3.x)."""
    content_with_calls: bool = True
    """The template writes an assistant turn's text before its calls (a step's ``say``); False: it writes the calls
    alone and drops that text, so such a turn still renders and parses back to its calls (Llama 3.x)."""

    @property
    def template(self) -> str:
        """The training chat template."""
        return read_template(self.template_file)

    def parse(self, text: str) -> ParsedTurn:
        """Split generated text into tool calls, content and parse errors (never raises)."""
        return self.parser(text)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               add_generation_prompt: bool = False) -> Rendered:
        """The conversation as text under this format, without a tokenizer (ToolFormatError when it cannot render)."""
        return render_text(self.template, messages, tools, add_generation_prompt=add_generation_prompt,
                           bos_token=self.bos_token, what=f"the {self.name} format")

    def apply(self, tokenizer: Any) -> Any:
        """Set ``tokenizer``'s chat template to this format's; ToolFormatError when it splits a control token."""
        split = [token for token in self.control_tokens if not _single_token(tokenizer, token)]
        if split:
            raise ToolFormatError(f"the {self.name} tool format needs {', '.join(split)} as single tokens and this "
                                  "tokenizer splits them; choose a format of this base's family with --tool-format")
        tokenizer.chat_template = self.template
        return tokenizer


def _single_token(tokenizer: Any, token: str) -> bool:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(token_id, int) or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return False
    return list(tokenizer.encode(token, add_special_tokens=False)) == [token_id]


def render_text(template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                add_generation_prompt: bool = False, bos_token: str = "", what: str = "the chat template") -> Rendered:
    """Render ``template`` as transformers' ``apply_chat_template`` does, returning text and generation spans.

    Raises ToolFormatError when the template refuses the conversation (its ``raise_exception``) or
    fails on it.
    """
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import render_jinja_template

    render: Any = render_jinja_template  # its return annotation says str; it returns (texts, spans)
    marked = bool(_GENERATION.search(template))
    try:
        texts, spans = render(conversations=[messages], tools=tools or None, chat_template=template,
                              return_assistant_tokens_mask=marked, add_generation_prompt=add_generation_prompt,
                              bos_token=bos_token, eos_token="")
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ToolFormatError(f"{what} cannot render this conversation: {exc}") from None
    return Rendered(texts[0], [(int(a), int(b)) for a, b in spans[0]] if marked else [])
