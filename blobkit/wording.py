"""Wording: numbers with the noun in agreement, and a lint over the text of a kit's minted cases.

Minted instructions and answers are what a model learns to say; a defect in them is taught. The lint
finds the kinds of defect minting has produced before (issue #16): a plural after "1" ("1 orders"),
doubled punctuation ("…warehouse.."), a raw column name with its underscores ("the account_status"),
and a word doubled ("the total total"); counting nouns are the world's own (its result nouns, its
anchor labels in the plural). Grammar facts come from ``inflect`` (its ``singular_noun``
answers False for a noun that is not plural).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import inflect

from world_format.kit import Kit
from world_format.models import Task, World

_PUNCTUATION_RUN = re.compile(r"[.!?,;:]{2,}")
_FINE_RUNS = {"...", "?!", "!?"}
_DOUBLED_WORD = re.compile(r"\b([a-z]+) \1\b")


@lru_cache(maxsize=1)
def _engine() -> inflect.engine:
    return inflect.engine()


def singular(noun: str) -> str:
    """The singular of a plural noun phrase ("items" → "item", "access grants" → "access grant")."""
    found = _engine().singular_noun(noun)
    return found if isinstance(found, str) else noun


def counted(count: int, noun: str) -> str:
    """``count`` and the plural noun ``noun`` in agreement: "1 item", "0 items", "3 items"."""
    return f"{count} {singular(noun) if count == 1 else noun}"


def sentence(text: str) -> str:
    """``text`` ending in a full stop, unless it already ends a sentence (a value quoted at its end may)."""
    return text if text.rstrip().endswith((".", "!", "?")) else f"{text}."


def defects(text: str, column_names: Iterable[str] = (), nouns: Iterable[str] = ()) -> list[str]:
    """The wording defects of one text, by kind (empty when it reads cleanly). ``column_names``: the world's
    column names, which a text must not use raw; ``nouns``: the plural nouns minting counts with (a result
    noun such as "orders"), which must not follow "1"."""
    found = []
    if any(run not in _FINE_RUNS for run in _PUNCTUATION_RUN.findall(text)):
        found.append("doubled_punctuation")
    if any(re.search(rf"(?<![\w.,-])1 {re.escape(noun)}\b", text) for noun in nouns if singular(noun) != noun):
        found.append("plural_after_one")
    if any(re.search(rf"(?<![\w@.+-]){re.escape(name)}(?![\w@.-])", text) for name in column_names if "_" in name):
        found.append("raw_column_name")
    if _DOUBLED_WORD.search(text.lower()):
        found.append("doubled_word")
    return found


def lint(texts: Iterable[str], column_names: Iterable[str] = (), nouns: Iterable[str] = ()) -> dict[str, int]:
    """How many texts carry each kind of defect (kinds sorted; empty when there are none)."""
    names, plural = tuple(column_names), tuple(nouns)
    counts: Counter[str] = Counter(kind for text in texts for kind in defects(text, names, plural))
    return dict(sorted(counts.items()))


def minted_text(task: Task) -> list[str]:
    """A minted task's instruction, answer key and scripted turns; none for an authored task (the world's text)."""
    if task.template == "authored":
        return []
    return [task.instruction, *([task.answer] if task.answer else []),
            *(text for turn in task.turns for text in (turn.assistant, turn.user))]


def minted_texts(kit: Kit) -> list[str]:
    """The minted text of every case of the kit, training and held-out."""
    return [text for case in kit.cases("train") + kit.cases("eval") for text in minted_text(case.task)]


def kit_lint(kit: Kit) -> dict[str, Any]:
    """The lint over a kit's minted text: how many texts were read and the defects found, by kind."""
    texts = minted_texts(kit)
    world = kit.world().world
    return {"minted_texts": len(texts), "defects": lint(texts, *world_words(world))}


def world_words(world: World) -> tuple[list[str], list[str]]:
    """The world's column names and the plural nouns minting counts with (result nouns, plural anchor labels)."""
    names = sorted({column.name for table in world.state.tables for column in table.columns})
    nouns = {tool.result_noun for tool in world.tools if tool.result_noun} | {"records"}
    nouns |= {_engine().plural_noun(anchor.label) for anchor in world.state.anchors}
    return names, sorted(nouns)
