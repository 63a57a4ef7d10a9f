"""Grounding turns: tool calls whose arguments quote the user's own words, and their extra SFT examples.

An agent grounds a request when it carries a value the user wrote (an email address, a SKU, a name, an order
number) into a tool call. A model learns that by copying a span that starts at no fixed marker, which a small
model learns late or not at all when those calls are a small share of the rows (see README: measured on the
retail example), and later in a conversation — after the identification's observation — harder still.
``with_grounding_repeats`` adds each row's grounding again as one short example: the executed conversation up
to and including its last grounding call (so every grounding call of the row is in it), nothing invented.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from trainers.errors import ConfigError

MIN_QUOTED_CHARS = 3
"""Shorter string arguments ("a", "ok") match user text by chance and are not counted as quotes."""


_FIGURE = re.compile(r"\d+\.\d+")
"""A figure with a fractional part (an amount such as 265.57): quoting one means copying it, digit by digit."""


def _leaves(value: Any) -> Iterator[str | int]:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def _quoted(value: str | int, user_text: str) -> bool:
    """A string the user wrote verbatim, or an integer they wrote as a whole number (``50123`` in "order 50123",
    not in "501234" or "5.50123"), of at least :data:`MIN_QUOTED_CHARS` characters."""
    text = str(value)
    if len(text) < MIN_QUOTED_CHARS:
        return False
    if isinstance(value, str):
        return text in user_text
    return re.search(rf"(?<![\d.]){re.escape(text)}(?![\d]|\.\d)", user_text) is not None


def _quotes(call: dict[str, Any], user_text: str) -> bool:
    arguments = call.get("function", {}).get("arguments")
    return any(_quoted(value, user_text) for value in _leaves(arguments))


def _assistant_turns(row: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], str, str]]:
    """Each assistant message with its index, the user's text before it and the tool observations before it."""
    user_text, observed = "", ""
    for index, message in enumerate(row.get("messages") or []):
        role = message.get("role")
        if role == "user":
            user_text += "\n" + str(message.get("content") or "")
        elif role == "tool":
            observed += "\n" + str(message.get("content") or "")
        elif role == "assistant":
            yield index, message, user_text, observed


def grounding_turns(row: dict[str, Any]) -> list[int]:
    """Indexes of the assistant messages whose tool calls pass a value the user wrote earlier, verbatim."""
    return [index for index, message, user_text, _ in _assistant_turns(row)
            if any(_quotes(call, user_text) for call in message.get("tool_calls") or [])]


def answer_quote_turns(row: dict[str, Any]) -> list[int]:
    """Indexes of the assistant messages whose text quotes a figure from an earlier tool observation (not the user)."""
    return [index for index, message, user_text, observed in _assistant_turns(row)
            if any(figure in observed and figure not in user_text
                   for figure in _FIGURE.findall(str(message.get("content") or "")))]


def _prefix_examples(rows: list[dict[str, Any]],
                     turns_of: Callable[[dict[str, Any]], list[int]]) -> list[dict[str, Any]]:
    examples: list[dict[str, Any]] = []
    for row in rows:
        for index in turns_of(row):
            example: dict[str, Any] = {"messages": row["messages"][: index + 1]}
            if row.get("tools"):
                example["tools"] = row["tools"]
            examples.append(example)
    return examples


def _last_grounding_turn(row: dict[str, Any]) -> list[int]:
    return grounding_turns(row)[-1:]


def grounding_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One example per row with a grounding turn: its messages up to and including the last one (every grounding
    call of the row is in it), with the row's tools."""
    return _prefix_examples(rows, _last_grounding_turn)


def answer_quote_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One example per answer that quotes an observed figure: the row's messages up to and including it."""
    return _prefix_examples(rows, answer_quote_turns)


def with_grounding_repeats(rows: list[dict[str, Any]], repeats: int, answer_repeats: int = 0) -> list[dict[str, Any]]:
    """The rows, then every grounding example ``repeats`` times and every answer-quote example ``answer_repeats``
    times (the trainer shuffles with its seed)."""
    if repeats < 0 or answer_repeats < 0:
        raise ConfigError("grounding repeats must be >= 0")
    extra = grounding_examples(rows) * repeats if repeats else []
    extra += answer_quote_examples(rows) * answer_repeats if answer_repeats else []
    return list(rows) + extra
