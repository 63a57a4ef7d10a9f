"""What a conversation so far says about rows: the values a row-naming argument may take (its *evidence*).

An agent can only name a row (an order number, an email, a booking reference) it was told about: by the customer,
or by an observation. :class:`Evidence` collects those values from a conversation in the kit's row format, typed by
what they name: an observation's value under a result column is evidence only for the root column that result
column holds (:mod:`world_format.result_columns`), so the customer id ``find_customer_by_email`` answered is never
evidence for an ``order_id``. Constrained decoding (``trainers/constrained.py``) restricts row-naming arguments to
it, and the builder's gate refuses a reference chain that names a row before the conversation gave it
(:func:`ungrounded_arguments`), which a kit would otherwise teach as guessing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .models import World
from .result_columns import ResultSources, result_sources, root_column

_INTEGER = re.compile(r"(?<![\w.])-?\d+(?![\w.]*\d)")
_WORD = re.compile(r"[^\s\"'(),;:!?<>\[\]{}]+")
MAX_PHRASE_WORDS = 4
"""The longest run of the customer's words a string argument may take whole (a name: "Ana Lee")."""


@dataclass(frozen=True)
class KeySpace:
    """What a world's tools say about row-naming values: which root column each row-naming parameter names, and
    which root columns each tool's result columns hold (:mod:`world_format.result_columns`)."""

    parameters: Mapping[str, Mapping[str, str]]
    """``{tool: {parameter: the root column ("table.column") it names}}``, from the tools' ``anchors``."""
    sources: Mapping[str, ResultSources]
    """``{tool: {result column: root columns}}``: what an observation's values name, by the tool that answered."""


def key_space(world: World, sources: Mapping[str, ResultSources] | None = None) -> KeySpace:
    """The world's :class:`KeySpace`: each tool's ``anchors`` as root columns, and its result columns' sources
    (``sources`` when the caller traced them already: :func:`~world_format.result_columns.sql_reads`)."""
    parameters = {tool.name: {name: root_column(world, anchor) for name, anchor in tool.anchors.items()}
                  for tool in world.tools if tool.anchors}
    return KeySpace(parameters=parameters, sources=result_sources(world) if sources is None else sources)


@dataclass
class Evidence:
    """The values the conversation so far holds, each once, in order of appearance (the system prompt and the
    assistant's own words are not evidence).

    A row-naming argument may take a value the customer wrote (a word, a run of up to :data:`MAX_PHRASE_WORDS`
    words, an integer), a value an observation shows under a result column of unknown source (and the words and
    integers of such a string), or a value an observation shows under a result column whose source is the root
    column the argument names (:attr:`typed`): a customer's id, shown as ``id`` by ``find_customer_by_email``,
    is never evidence for an ``order_id``."""

    strings: dict[str, None] = field(default_factory=dict)
    """Untyped strings: the customer's words and phrases, observations' strings of unknown source."""
    integers: dict[int, None] = field(default_factory=dict)
    """Untyped integers: written in the customer's words or shown under a result column of unknown source."""
    typed: dict[str, dict[Any, None]] = field(default_factory=dict)
    """``{root column: values observations showed under a result column holding it}``."""

    def add_text(self, text: str, phrases: bool) -> None:
        """The words (surrounding punctuation and a sentence's final full stop dropped; a word after ``#`` also
        without it: "order #W8704143"), runs of words when ``phrases``, and integers of ``text``, untyped."""
        words = [word.rstrip(".") for word in _WORD.findall(text)]
        for word in words:
            if word.startswith("#") and len(word) > 1:
                self.strings.setdefault(word[1:], None)
        for start in range(len(words)):
            for end in range(start + 1, min(len(words), start + (MAX_PHRASE_WORDS if phrases else 1)) + 1):
                if all(words[start:end]):
                    self.strings.setdefault(" ".join(words[start:end]), None)
        for number in _INTEGER.findall(text):
            self.integers.setdefault(int(number), None)

    def add_observed(self, value: Any, roots: frozenset[str] | None) -> None:
        """A scalar an observation shows, under a result column holding ``roots`` (None: unknown source)."""
        if roots:
            for root in roots:
                self.typed.setdefault(root, {}).setdefault(value, None)
        elif isinstance(value, str):
            self.strings.setdefault(value, None)
            self.add_text(value, phrases=False)
        elif isinstance(value, int):
            self.integers.setdefault(value, None)

    def add_observation(self, value: Any, sources: ResultSources, column: str | None = None) -> None:
        """Every scalar inside an observation's JSON value, typed by the result column it sits under (``sources``:
        the answering tool's; a nested object's keys are not result columns, so below the top level values are of
        unknown source)."""
        if isinstance(value, dict):
            for key, item in value.items():
                self.add_observation(item, sources, key if column is None else "")
        elif isinstance(value, list):
            for item in value:
                self.add_observation(item, sources, column)
        elif value is not None and not isinstance(value, bool | float):
            self.add_observed(value, sources.get(column) if column else None)

    def holds(self, value: Any, root: str) -> bool:
        """Whether ``value`` (a string or an integer) is evidence for an argument naming ``root``: the membership
        :meth:`values` lists, without building the list."""
        untyped: dict[Any, None] = self.strings if isinstance(value, str) else self.integers
        return value != "" and (value in untyped or value in self.typed.get(root, {}))

    def values(self, kind: Any, root: str) -> list[Any]:
        """The values of JSON Schema type ``kind`` ("string" or "integer") an argument naming ``root`` may take."""
        python = str if kind == "string" else int
        untyped: Any = self.strings if kind == "string" else self.integers
        typed = [v for v in self.typed.get(root, {}) if isinstance(v, python) and not isinstance(v, bool)]
        return [value for value in dict.fromkeys([*untyped, *typed]) if value != ""]


def conversation_evidence(messages: Sequence[Mapping[str, Any]], keys: KeySpace) -> Evidence:
    """The :class:`Evidence` of ``messages``: the customer's messages and the observations (a tool message's
    ``name`` says which tool answered; an observation that is not JSON is text of unknown source)."""
    evidence = Evidence()
    for message in messages:
        text = message.get("content")
        if message.get("role") not in ("user", "tool") or not isinstance(text, str):
            continue
        if message.get("role") == "user":
            evidence.add_text(text, phrases=True)
            continue
        try:
            observation = json.loads(text)
        except ValueError:
            evidence.add_text(text, phrases=False)
            continue
        evidence.add_observation(observation, keys.sources.get(str(message.get("name")), {}))
    return evidence


def ungrounded_arguments(evidence: Evidence, named: Mapping[str, str], arguments: Mapping[str, Any]) -> list[str]:
    """``name=value`` for each row-naming argument of a call (``named``: parameter → root column) whose value, or
    one of whose list items, is a string or integer the evidence does not hold for that column, in order."""
    missing = []
    for name, root in named.items():
        value = arguments.get(name)
        for item in value if isinstance(value, list) else [value]:
            if (isinstance(item, str) or type(item) is int) and not evidence.holds(item, root):
                missing.append(f"{name}={json.dumps(item, ensure_ascii=False)}")
                break
    return missing
