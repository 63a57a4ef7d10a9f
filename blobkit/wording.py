"""Wording: numbers with the noun in agreement, and a lint over the text of a kit's minted cases.

Minted instructions and answers are what a model learns to say; a defect in them is taught. The lint
finds the kinds of defect minting has produced before (issue #16): a plural after "1" ("1 orders"),
doubled punctuation ("…warehouse.."), a raw column name with its underscores ("the account_status"),
a word doubled ("the total total"), a tool's error message pasted into what the agent says instead of
an explanation in its own words (``pasted_error``), and a database id the customer never sees (the key
of an ``internal_key`` anchor) in what the customer says (``internal_id``). Counting nouns are the
world's own (its result nouns, its anchor labels in the plural). Grammar facts come from ``inflect``
(its ``singular_noun`` answers False for a noun that is not plural).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from world_format.kit import Kit
from world_format.models import Task, World

if TYPE_CHECKING:
    import inflect

_PUNCTUATION_RUN = re.compile(r"[.!?,;:]{2,}")
_FINE_RUNS = {"...", "?!", "!?"}
_DOUBLED_WORD = re.compile(r"\b([a-z]+) \1\b")


@lru_cache(maxsize=1)
def _engine() -> inflect.engine:
    """inflect's engine, imported on first use: importing inflect costs seconds (typeguard instruments it at import),
    which every ``blobkit`` command would otherwise pay at start-up, most of them without needing a plural."""
    import inflect

    return inflect.engine()


@lru_cache(maxsize=4096)
def singular(noun: str) -> str:
    """The singular of a plural noun phrase ("items" → "item", "access grants" → "access grant"); remembered, as the
    lint asks for the same few nouns thousands of times."""
    found = _engine().singular_noun(noun)
    return found if isinstance(found, str) else noun


def counted(count: int, noun: str) -> str:
    """``count`` and the plural noun ``noun`` in agreement: "1 item", "0 items", "3 items"."""
    return f"{count} {singular(noun) if count == 1 else noun}"


def sentence(text: str) -> str:
    """``text`` ending in a full stop, unless it already ends a sentence (a value quoted at its end may)."""
    return text if text.rstrip().endswith((".", "!", "?")) else f"{text}."


def defects(text: str, column_names: Iterable[str] = (), nouns: Iterable[str] = (), errors: Iterable[str] = (),
            internal: Iterable[str] = ()) -> list[str]:
    """The wording defects of one text, by kind (empty when it reads cleanly). ``column_names``: the world's
    column names, which a text must not use raw; ``nouns``: the plural nouns minting counts with (a result
    noun such as "orders"), which must not follow "1"; ``errors``: the tools' error messages, which an agent's
    text must not paste; ``internal``: internal ids, which a customer's text must not state (whole tokens)."""
    found = []
    folded = text.casefold()
    if any(error.rstrip(" .").casefold() in folded for error in errors if error.strip(" .")):
        found.append("pasted_error")
    if any(re.search(rf"(?<![\w@.-]){re.escape(value)}(?![\w@-])", text) for value in internal):
        found.append("internal_id")
    if any(run not in _FINE_RUNS for run in _PUNCTUATION_RUN.findall(text)):
        found.append("doubled_punctuation")
    if any(re.search(rf"(?<![\w.,-])1 {re.escape(noun)}\b", text) for noun in nouns if singular(noun) != noun):
        found.append("plural_after_one")
    if any(re.search(rf"(?<![\w@.+-]){re.escape(name)}(?![\w@.-])", text) for name in column_names if "_" in name):
        found.append("raw_column_name")
    if _DOUBLED_WORD.search(text.lower()):
        found.append("doubled_word")
    return found


def lint(texts: Iterable[str], column_names: Iterable[str] = (), nouns: Iterable[str] = (),
         errors: Iterable[str] = ()) -> dict[str, int]:
    """How many texts carry each kind of defect (kinds sorted; empty when there are none)."""
    names, plural, messages = tuple(column_names), tuple(nouns), tuple(errors)
    counts: Counter[str] = Counter(kind for text in texts for kind in defects(text, names, plural, messages))
    return dict(sorted(counts.items()))


Speaker = str
"""Who says a minted text: "customer" (the instruction, scripted replies) or "agent" (the answer, questions)."""


def minted_parts(task: Task) -> list[tuple[Speaker, str]]:
    """A minted task's texts with who says them; none for an authored task (the world's own text)."""
    if task.template == "authored":
        return []
    parts = [("customer", task.instruction), *([("agent", task.answer)] if task.answer else [])]
    for turn in task.turns:
        parts += [("agent", turn.assistant), ("customer", turn.user)]
    return parts


def minted_text(task: Task) -> list[str]:
    """A minted task's instruction, answer key and scripted turns; none for an authored task (the world's text)."""
    return [text for _, text in minted_parts(task)]


def internal_ids(world: World, task: Task) -> list[str]:
    """The internal ids a customer could not know in a case: its anchor row's key when the anchor declares it
    ``internal_key``, and every literal argument of its chain that names the key of such an anchor."""
    internal = {anchor.table for anchor in world.state.anchors if anchor.internal_key}
    found: set[str] = set()
    if task.anchor.table in internal:
        key = task.anchor.key
        found.update(str(value) for value in (key.values() if isinstance(key, dict) else [key]))
    for step in task.reference:
        tool = world.tool(step.tool)
        for param, target in (tool.anchors.items() if tool else ()):
            table_name, column = target.split(".")
            table = world.state.table(table_name)
            value = step.arguments.get(param)
            if table_name in internal and table is not None and column in table.key_columns \
                    and isinstance(value, str | int) and not isinstance(value, bool):
                found.add(str(value))
    return sorted(found)


def task_defects(world: World, task: Task, words: WorldWords | None = None) -> list[tuple[str, str]]:
    """(defect kind, text) for each defect of a task's minted text: what the agent says must not paste a tool
    error, what the customer says must not state an internal id."""
    names, nouns, errors = words or world_words(world)
    internal = internal_ids(world, task)
    found = []
    for speaker, text in minted_parts(task):
        agent = speaker == "agent"
        found += [(kind, text) for kind in defects(text, names, nouns, errors if agent else (),
                                                  () if agent else internal)]
    return found


def kit_lint(kit: Kit) -> dict[str, Any]:
    """The lint over a kit's minted text: how many texts were read and the defects found, by kind."""
    world = kit.world().world
    words = world_words(world)
    cases = kit.cases("train") + kit.cases("eval")
    texts = sum(len(minted_parts(case.task)) for case in cases)
    counts: Counter[str] = Counter(kind for case in cases for kind, _ in task_defects(world, case.task, words))
    return {"minted_texts": texts, "defects": dict(sorted(counts.items()))}


WorldWords = tuple[list[str], list[str], list[str]]
"""A world's column names, counting nouns and tool error messages (:func:`world_words`)."""


def world_words(world: World) -> WorldWords:
    """The world's column names, the plural nouns minting counts with (result nouns, plural anchor labels), and
    its tools' error messages (preconditions, not found)."""
    names = sorted({column.name for table in world.state.tables for column in table.columns})
    nouns = {tool.result_noun for tool in world.tools if tool.result_noun} | {"records"}
    nouns |= {_engine().plural_noun(anchor.label) for anchor in world.state.anchors}
    errors = {p.error for tool in world.tools for p in tool.preconditions}
    errors |= {tool.result.not_found for tool in world.tools if tool.result.shape == "row"}
    return names, sorted(nouns), sorted(errors)
