"""Constrained decoding of tool calls: a turn can only say what the context allows (``--decoding constrained``).

At every decoding step the tokens that would take the turn outside a grammar are masked out of the logits
(llguidance, https://github.com/guidance-ai/llguidance, ``LLMatcher`` with a Lark grammar and its ``%json`` JSON
Schema lexemes: one wheel without dependencies that runs on the CPU with transformers; xgrammar 0.2.8 would pull
triton and apache-tvm-ffi, and outlines was not tried). The grammar of one turn is built from the request itself:

* a turn is either a final answer or a question (free text that never writes ``<tool_call>``), or one or more
  tool calls, each ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, as the format writes them;
* the name is one of the declared tools (the prompt's tool list), and the arguments are valid against that tool's
  JSON Schema (types, enums, required fields, no other properties);
* a parameter that names a row (the tool's ``anchors``: an order number, an email, a customer id) takes only values
  that appear in the conversation so far: the customer's words and earlier observations
  (:func:`conversation_values`); when none of the right type appears it keeps its declared schema.

Only the model's choice of tokens changes: the text is parsed, validated against the declared schemas, executed
and judged exactly as a free turn is (tests/test_constrained.py replays constrained episodes through the free
scoring path and gets the same verdicts). The hermes-style formats (``blobkit``, ``hermes``) are supported; another
format is refused with :class:`~trainers.errors.ConfigError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from world_format.models import World

from .errors import ConfigError
from .formats import ToolFormat
from .formats.hermes import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

Decoding = Literal["free", "constrained"]
SUPPORTED_FORMATS = ("blobkit", "hermes")
"""Formats whose calls are ``<tool_call>`` blocks of JSON, which the grammar writes."""
_INTEGER = re.compile(r"(?<![\w.])-?\d+(?![\w.]*\d)")
_WORD = re.compile(r"[^\s\"'(),;:!?<>\[\]{}]+")


def key_parameters(world: World) -> dict[str, frozenset[str]]:
    """``{tool: parameters that name a row}``: the parameters each tool declares in its ``anchors``."""
    return {tool.name: frozenset(tool.anchors) for tool in world.tools if tool.anchors}


def _strings(value: Any) -> list[str]:
    """Every string and number (as text) inside a JSON value."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]


def conversation_values(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[int]]:
    """(strings, integers) a row-naming argument may take: what the customer and the observations said so far (the
    system prompt and the assistant's own words are not evidence), in order of appearance, each once.

    Strings: every whitespace-delimited word (surrounding punctuation and a sentence's final full stop dropped) and
    every string of a JSON observation; integers: every integer written in that text.
    """
    strings: dict[str, None] = {}
    integers: dict[int, None] = {}
    for message in messages:
        if message.get("role") not in ("user", "tool") or not isinstance(message.get("content"), str):
            continue
        text = message["content"]
        values: list[str] = []
        if message.get("role") == "tool":
            try:
                values = _strings(json.loads(text))
            except ValueError:
                values = []
        for piece in (text, *values):
            for word in _WORD.findall(piece):
                strings.setdefault(word.rstrip("."), None)
            for number in _INTEGER.findall(piece):
                integers.setdefault(int(number), None)
        for value in values:
            strings.setdefault(value, None)
    return [s for s in strings if s], list(integers)


def _restricted(schema: Mapping[str, Any], strings: list[str], integers: list[int]) -> dict[str, Any]:
    """A row-naming parameter's schema, its values restricted to those of its type the conversation holds."""
    kind = schema.get("type")
    values: list[Any] = strings if kind == "string" else integers if kind == "integer" else []
    if "enum" in schema or not values:
        return dict(schema)
    return {**schema, "enum": values}


def call_schema(tools: Sequence[Mapping[str, Any]], keys: Mapping[str, frozenset[str]],
                messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of one call: ``{"name": <a declared tool>, "arguments": <valid for that tool>}``, with
    row-naming arguments restricted to the conversation's values."""
    strings, integers = conversation_values(messages)
    options = []
    for tool in tools:
        function = tool.get("function", tool)
        parameters = json.loads(json.dumps(function.get("parameters") or {"type": "object"}))
        properties = parameters.get("properties") or {}
        for name in keys.get(function["name"], ()):
            if name in properties:
                properties[name] = _restricted(properties[name], strings, integers)
        parameters.setdefault("additionalProperties", False)
        options.append({"type": "object", "properties": {"name": {"const": function["name"]},
                                                         "arguments": parameters},
                        "required": ["name", "arguments"], "additionalProperties": False})
    return {"anyOf": options, "x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                                             "key_separator": ": "}}


def turn_grammar(tools: Sequence[Mapping[str, Any]], keys: Mapping[str, frozenset[str]],
                 messages: Sequence[Mapping[str, Any]], tags: tuple[str, str] | None = None) -> str:
    """The Lark grammar (llguidance's dialect) of one assistant turn after ``messages`` (module docstring).

    ``tags``: how the grammar writes ``<tool_call>`` and ``</tool_call>`` (:func:`_tag`: the token itself where the
    tokenizer holds it as one, else the text)."""
    schema = json.dumps(call_schema(tools, keys, messages), ensure_ascii=False)
    open_tag, close_tag = tags or (json.dumps(TOOL_CALL_OPEN), json.dumps(TOOL_CALL_CLOSE))
    return "\n".join([
        "start: TEXT | calls",
        f"TEXT: /(?s:.+)/ & ~/(?s:.*{re.escape(TOOL_CALL_OPEN)}.*)/",
        'calls: call ("\\n" call)*',
        f'call: {open_tag} "\\n" args "\\n" {close_tag}',
        f"args: %json {schema}",
        ""])


def _tag(tokenizer: Any, tag: str) -> str:
    """``tag`` in the grammar: the token by id (``<[id]>``) when the tokenizer holds it as one special token (which no
    text can spell), else the text, JSON-quoted."""
    ids = tokenizer.encode(tag, add_special_tokens=False)
    special = len(ids) == 1 and ids[0] in tokenizer.all_special_ids
    return f"<[{ids[0]}]>" if special else json.dumps(tag)


class _ByteTokens:
    """A byte-level BPE tokenizer as llguidance reads one: each id's bytes, the special ids, eos and encoding.

    llguidance's own ``hf.from_tokenizer`` treats every added token as special (a control token no text can
    contain); blobkit's tiny tokenizer and Qwen2.5's add ordinary words and tags (``<tool_call>``) as tokens, which
    must stay text. ConfigError for a tokenizer that is not byte-level (its pieces are not GPT-2 byte characters).
    """

    def __init__(self, tokenizer: Any) -> None:
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        chars = {char: byte for byte, char in bytes_to_unicode().items()}
        added = tokenizer.added_tokens_decoder
        size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        self.tokens: list[bytes] = [b""] * size
        self.special_token_ids = [i for i, token in added.items() if token.special]
        for piece, index in tokenizer.get_vocab().items():
            if index in added:
                self.tokens[index] = added[index].content.encode("utf-8")
            elif all(char in chars for char in piece):
                self.tokens[index] = bytes(chars[char] for char in piece)
            else:
                raise ConfigError("--decoding constrained reads byte-level BPE tokenizers; this one writes "
                                  f"{piece!r}: use --decoding free")
        self.eos_token_id, self.bos_token_id = tokenizer.eos_token_id, tokenizer.bos_token_id
        self._tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))


class TurnMatcher:
    """One turn's grammar state: the tokens it allows next, advanced by the token chosen."""

    def __init__(self, matcher: Any, vocab: int) -> None:
        self.matcher, self.vocab = matcher, vocab

    def mask(self, logits: Any) -> None:
        """Set the logits (one row, [vocabulary]) of every token the grammar forbids to -inf, in place."""
        import llguidance.torch

        if self.matcher.is_error():
            return
        bitmask = llguidance.torch.allocate_token_bitmask(1, self.vocab)
        llguidance.torch.fill_next_token_bitmask(self.matcher, bitmask, 0)
        row = logits[None, : self.vocab]
        llguidance.torch.apply_token_bitmask_inplace(row, bitmask)
        logits[self.vocab:] = float("-inf")

    def advance(self, token: int) -> None:
        """The token chosen (allowed by :meth:`mask`)."""
        if not self.matcher.is_error():
            self.matcher.consume_token(token)


class ToolCallConstraint:
    """Builds each turn's :class:`TurnMatcher` for one tokenizer and tool format (and the world's row-naming
    parameters, :func:`key_parameters`)."""

    def __init__(self, tokenizer: Any, fmt: ToolFormat, keys: Mapping[str, frozenset[str]]) -> None:
        if fmt.name not in SUPPORTED_FORMATS:
            raise ConfigError(f"--decoding constrained writes <tool_call> JSON blocks ({', '.join(SUPPORTED_FORMATS)}"
                              f" formats); this base uses the {fmt.name} format: use --decoding free")
        try:
            import llguidance
            import llguidance.hf
        except ImportError:
            raise ConfigError("--decoding constrained needs llguidance: pip install llguidance") from None
        self.llguidance, self.keys = llguidance, dict(keys)
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokens(tokenizer)))
        self.tags = (_tag(tokenizer, TOOL_CALL_OPEN), _tag(tokenizer, TOOL_CALL_CLOSE))

    def matcher(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> TurnMatcher:
        """The matcher of the next assistant turn after ``messages`` with ``tools`` declared."""
        grammar = self.llguidance.LLMatcher.grammar_from_lark(turn_grammar(tools, self.keys, messages, self.tags))
        matcher = self.llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ConfigError(f"the constrained grammar of this turn does not compile: {matcher.get_error()}")
        return TurnMatcher(matcher, self.tokenizer.vocab_size)


def constraint_for(decoding: Decoding, tokenizer: Any, fmt: ToolFormat, world: World) -> ToolCallConstraint | None:
    """The constraint ``--decoding`` asks for (None for free decoding)."""
    return ToolCallConstraint(tokenizer, fmt, key_parameters(world)) if decoding == "constrained" else None
