"""Cases a model on a given tokenizer can pass at all: the text the verifier requires survives encode→decode.

A model writes text only through its tokenizer. A tokenizer that normalises (Qwen2.5's NFC normaliser
writes a decomposed ``é`` back composed), maps a character it does not know to an unknown token, or
drops characters, cannot reproduce a value that holds such text, and the verifier compares exactly.
So a case whose *required text* does not survive ``decode(encode(text))`` unchanged is no test of the
model: it is left out of the evaluation and counted (``eval.json``'s ``left_out``), and the summary's
coverage says the held-out side was not wholly scored.

The required text of a case is every string the verifier will compare with what the agent wrote: the
string arguments of its reference calls (as executed, values threaded from observations included), the
string arguments its ``tool_called`` checks expect, and the values of its answer checks (for the modes that
compare NFKC-normalised text, the normalised value).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from world_format.chain import final_answer, run_chain
from world_format.kit import KitCase
from world_format.models import AnswerCheck, Ref, Task, ToolCalledCheck
from world_format.runtime import WorldRuntime

from .eval_record import LeftOut

NORMALISED_MODES = ("contains", "normalized")
"""Answer-check modes that compare NFKC-normalised, case-folded text (world_format.values), so only the normalised
form of their value has to survive the tokenizer."""


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def required_texts(runtime: WorldRuntime, task: Task) -> list[str]:
    """Every string the verifier of ``task`` compares with the agent's output (see the module docstring), sorted."""
    with runtime.episode() as episode:
        run = run_chain(episode, task.reference, task.turns)
    texts = {text for event in run.events for text in _strings(event.arguments)}
    for check in task.vcode.checks:
        if isinstance(check, ToolCalledCheck):
            texts.update(text for text in _strings(check.arguments))
        elif isinstance(check, AnswerCheck) and check.mode != "regex":
            value = check.value
            if isinstance(value, Ref):
                value = final_answer(task)[0] if value.ref == "answer_key" else None
            loose = check.mode in NORMALISED_MODES  # compared after NFKC: the composed form is what must survive
            texts.update(unicodedata.normalize("NFKC", text) if loose else text for text in _strings(value))
    return sorted(text for text in texts if text)


def survives(tokenizer: Any, text: str) -> bool:
    """Whether ``text`` comes back unchanged from the tokenizer's encode then decode (no special tokens added,
    no clean-up of spaces)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return bool(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text)


@dataclass(frozen=True)
class Tokenizable:
    """The cases a tokenizer can express, and those left out."""

    kept: list[KitCase]
    left_out: dict[str, str]
    """Case id → the first required text that does not survive encode→decode."""

    def record(self) -> LeftOut:
        """``eval.json``'s ``left_out`` entry: how many cases, which, and the text of each."""
        return LeftOut(untokenizable=len(self.left_out), cases=dict(sorted(self.left_out.items())),
                       why="the required text does not survive the base tokenizer's encode→decode: no model on it "
                           "can write it")


def tokenizable_cases(cases: Sequence[KitCase], runtime: WorldRuntime, tokenizer: Any) -> Tokenizable:
    """Split ``cases`` into those whose required text survives ``tokenizer`` and those left out (in case order)."""
    kept, left_out = [], {}
    checked: dict[str, bool] = {}
    for case in cases:
        failing = None
        for text in required_texts(runtime, case.task):
            if text not in checked:
                checked[text] = survives(tokenizer, text)
            if not checked[text]:
                failing = text
                break
        if failing is None:
            kept.append(case)
        else:
            left_out[case.case_id] = failing
    return Tokenizable(kept, left_out)
