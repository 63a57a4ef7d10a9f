"""Constrained decoding of tool calls: a turn can only say what the context allows (``--decoding constrained``).

At every decoding step the tokens that would take the turn outside a grammar are masked out of the logits
(llguidance, https://github.com/guidance-ai/llguidance, ``LLMatcher`` with a Lark grammar and its ``%json`` JSON
Schema lexemes: one wheel without dependencies that runs on the CPU with transformers; xgrammar 0.2.8 would pull
triton and apache-tvm-ffi, and outlines was not tried). The grammar of one turn is built from the request itself:

* a turn is either a final answer or a question (free text that never writes ``<tool_call>``), or one or more
  tool calls, each ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, as the format writes them,
  the first optionally after one line of text without ``<`` (a step's ``say``; where the tokenizer holds the tag as
  one special token, calls alone);
* the name is one of the declared tools (the prompt's tool list), and the arguments are valid against that tool's
  JSON Schema (types, enums, required fields, no other properties);
* a parameter that names a row (the tool's ``anchors``: an order number, an email, a customer id) takes only values
  that appear in the conversation so far as values of what it names (:class:`Evidence`): the customer's words and
  numbers, and what observations showed under a result column holding that column (an order id that
  ``list_orders`` listed, never the customer id ``find_customer_by_email`` answered); a tool whose required
  row-naming argument has no such value yet cannot be called in this turn.

``--decoding grounded`` is all of that, and a text turn (an answer, a question to the customer) and the line before
a call write only numbers the conversation so far wrote (:func:`conversation_numbers`): every maximal run of digits
with its decimal part is one of them, so an amount, an order number or a count is copied from the customer's words,
the system prompt or an observation (or counts a listing's items), never made up or miscopied by a digit. A number
the agent must compute with no tool to compute it (a sum of some listed amounts) cannot be written; give the world a
calculator tool, or decode constrained.

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

from world_format.evidence import Evidence, KeySpace, conversation_evidence

from .errors import ConfigError
from .formats import ToolFormat
from .formats.hermes import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

Decoding = Literal["free", "constrained", "grounded"]
SUPPORTED_FORMATS = ("blobkit", "hermes")
"""Formats whose calls are ``<tool_call>`` blocks of JSON, which the grammar writes."""


def _restricted(schema: Mapping[str, Any], root: str, evidence: Evidence) -> dict[str, Any] | None:
    """A row-naming parameter's schema with its values restricted to the evidence for ``root``; None when its type
    is restricted and the conversation holds no value for it (the argument cannot be given yet). A parameter with
    an enum, or of another type, keeps its schema; an array's items are restricted."""
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        items = _restricted(schema["items"], root, evidence)
        return None if items is None else {**schema, "items": items}
    if "enum" in schema or kind not in ("string", "integer"):
        return dict(schema)
    values = evidence.values(kind, root)
    return {**schema, "enum": values} if values else None


UNCOMPILED_KEYWORDS = frozenset({"uniqueItems"})
"""JSON Schema keywords llguidance 1.9 does not compile ("Unimplemented keys"): the grammar leaves them out, so it
admits a little more than the schema (two equal list items), and the world's own validator still refuses such a
call when it is executed, as it refuses any invalid call."""


def _grammar_schema(schema: Any) -> Any:
    """A deep copy of ``schema`` without :data:`UNCOMPILED_KEYWORDS` (a property of that name stays)."""
    if isinstance(schema, dict):
        kept = {key: _grammar_schema(value) for key, value in schema.items() if key not in UNCOMPILED_KEYWORDS}
        if isinstance(schema.get("properties"), dict):  # property names are not keywords
            kept["properties"] = {name: _grammar_schema(item) for name, item in schema["properties"].items()}
        return kept
    if isinstance(schema, list):
        return [_grammar_schema(item) for item in schema]
    return schema


def _call_option(function: Mapping[str, Any], named: Mapping[str, str], evidence: Evidence) -> dict[str, Any] | None:
    """The JSON Schema of one call of ``function`` (None when a required row-naming argument has no evidence)."""
    parameters = _grammar_schema(function.get("parameters") or {"type": "object"})
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    for name, root in named.items():
        if name not in properties:
            continue
        restricted = _restricted(properties[name], root, evidence)
        if restricted is not None:
            properties[name] = restricted
        elif name in required:
            return None
        else:
            del properties[name]
    parameters.setdefault("additionalProperties", False)
    return {"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def call_schema(tools: Sequence[Mapping[str, Any]], keys: KeySpace,
                messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The JSON Schema of one call: ``{"name": <a declared tool>, "arguments": <valid for that tool>}``, with
    row-naming arguments restricted to the conversation's evidence for them; a tool whose required row-naming
    argument has none is left out (None when every tool is)."""
    evidence = conversation_evidence(messages, keys)
    options = []
    for tool in tools:
        function = tool.get("function", tool)
        option = _call_option(function, keys.parameters.get(function["name"], {}), evidence)
        if option is not None:
            options.append(option)
    if not options:
        return None
    return {"anyOf": options, "x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                                             "key_separator": ": "}}


def turn_grammar(tools: Sequence[Mapping[str, Any]], keys: KeySpace,
                 messages: Sequence[Mapping[str, Any]], tags: tuple[str, str] | None = None,
                 grounded: bool = False) -> str:
    """The Lark grammar (llguidance's dialect) of one assistant turn after ``messages`` (module docstring).

    ``tags``: how the grammar writes ``<tool_call>`` and ``</tool_call>`` (:func:`_tag`: the token itself where the
    tokenizer holds it as one, else the text). ``grounded``: the numbers of a text turn, and of the line before a
    call, are the conversation's (:func:`grounded_text`)."""
    schema = call_schema(tools, keys, messages)
    text = f"TEXT: /(?s:.+)/ & ~/(?s:.*{re.escape(TOOL_CALL_OPEN)}.*)/"
    numbers = f" & /{grounded_text(conversation_numbers(messages))}/" if grounded else ""
    text += numbers
    if schema is None:
        return "\n".join(["start: TEXT", text, ""])
    open_tag, close_tag = tags or (json.dumps(TOOL_CALL_OPEN), json.dumps(TOOL_CALL_CLOSE))
    lines = ["start: TEXT | calls", text, 'calls: first ("\\n" call)*', "first: call",
             f'call: {open_tag} "\\n" args "\\n" {close_tag}',
             f"args: %json {json.dumps(schema, ensure_ascii=False)}"]
    if not open_tag.startswith("<["):
        # one line of text before the first call, lexed with the tag as one lexeme: a TEXT lexeme alive beside a
        # separate line lexeme would swallow the newline (the lexer is greedy) and the call after it
        lead = f"[^<\\n]+\\n{re.escape(TOOL_CALL_OPEN)}"
        lines[3] = "first: call | lead_call"
        lines += [f'lead_call: LEAD_OPEN "\\n" args "\\n" {close_tag}', f"LEAD_OPEN: /{lead}/{numbers}"]
    return "\n".join([*lines, ""])


NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
"""A number as text turns write and ground them: a run of digits with an optional decimal part."""


def _list_lengths(value: Any) -> list[int]:
    """The length of every list in a JSON value (a listing's count of items), depth first."""
    if isinstance(value, list):
        return [len(value), *(n for item in value for n in _list_lengths(item))]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _list_lengths(item)]
    return []


COUNTED_ITEMS = 100
"""Lists up to this long give every count from 0 to their length (how many of the listed loans are overdue); a longer
one gives its length alone."""


def _observed_counts(message: Mapping[str, Any]) -> list[str]:
    """The counts a tool message's JSON lists allow, as text: 0 to the length of each list of at most
    :data:`COUNTED_ITEMS` items (some of the items counted), the length of a longer one; none when the content is not
    JSON."""
    if message.get("role") != "tool" or not isinstance(message.get("content"), str):
        return []
    try:
        lengths = _list_lengths(json.loads(message["content"]))
    except ValueError:
        return []
    counts = {n for length in lengths for n in (range(length + 1) if length <= COUNTED_ITEMS else (length,))}
    return [str(n) for n in sorted(counts)]


def conversation_numbers(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every number (:data:`NUMBER`) the messages write, in their contents and tool-call arguments, and the counts
    of the items of every list an observation showed (:func:`_observed_counts`: of the loans listed, how many are
    overdue), sorted; one with fewer than two decimals also with two (62.9 as 62.90, 10 as 10.00: an observation's
    JSON drops an amount's trailing zeros, and a policy may ask for two decimals)."""
    found: set[str] = set()
    for message in messages:
        texts = [message.get("content") or "", *_observed_counts(message)]
        texts += [json.dumps((call.get("function") or {}).get("arguments"), ensure_ascii=False)
                  for call in message.get("tool_calls") or []]
        for text in texts:
            for number in NUMBER.findall(text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)):
                whole, _, decimals = number.partition(".")
                found.update({number, f"{whole}.{decimals.ljust(2, '0')}"} if len(decimals) < 2 else {number})
    return sorted(found)


def grounded_text(numbers: Sequence[str]) -> str:
    """A regular expression (llguidance's dialect) of text whose every number (:data:`NUMBER`, maximal) is one of
    ``numbers``: a number is followed by the end, a character that is no digit and no point, or a point and a
    character that is no digit."""
    if not numbers:
        return "(?s:[^0-9]*)"
    number = "(?:" + "|".join(re.escape(n) for n in numbers) + ")"
    return f"(?s:(?:[^0-9]|{number}(?:[^0-9.]|\\.[^0-9]))*(?:{number}\\.?)?)"


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
    parameters, :func:`world_format.evidence.key_space`); ``grounded``: text turns write the conversation's numbers
    only."""

    def __init__(self, tokenizer: Any, fmt: ToolFormat, keys: KeySpace, grounded: bool = False) -> None:
        if fmt.name not in SUPPORTED_FORMATS:
            raise ConfigError(f"--decoding constrained writes <tool_call> JSON blocks ({', '.join(SUPPORTED_FORMATS)}"
                              f" formats); this base uses the {fmt.name} format: use --decoding free")
        try:
            import llguidance
            import llguidance.hf
        except ImportError:
            raise ConfigError("--decoding constrained needs llguidance: pip install llguidance") from None
        self.llguidance, self.keys, self.grounded = llguidance, keys, grounded
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokens(tokenizer)))
        self.tags = (_tag(tokenizer, TOOL_CALL_OPEN), _tag(tokenizer, TOOL_CALL_CLOSE))

    def matcher(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> TurnMatcher:
        """The matcher of the next assistant turn after ``messages`` with ``tools`` declared."""
        grammar = self.llguidance.LLMatcher.grammar_from_lark(turn_grammar(tools, self.keys, messages, self.tags,
                                                                           self.grounded))
        matcher = self.llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ConfigError(f"the constrained grammar of this turn does not compile: {matcher.get_error()}")
        return TurnMatcher(matcher, self.tokenizer.vocab_size)

