"""Whether an answer *asserts* a value: every statement of it affirmative, none negated, conditional or hedged.

A value check (``contains`` and ``number``, :mod:`world_format.vcode`) finds where the answer states the value and
reads each of those statements:

* its **clause** — the text around it up to the nearest clause boundary (``, ; : ( ) —``, a sentence end, or one
  of the words *and, but, although, though, however, whereas, while, yet*) — must hold no negation: *not, never,
  no, none, nothing, neither, nor, cannot, no longer* or a word ending in *n't*
  ("it is not 194.99", "194.99 isn't right");
* its **sentence** (up to ``. ! ? ;`` or a line break) must hold no conditional (*if, unless, assuming, provided,
  suppose, whether, in case*) and no hedge (*maybe, perhaps, possibly, probably, likely, might, may, could,
  would, seems, appears, apparently, guess, think, believe, unsure, uncertain, approximately, roughly, around,
  about*).

The value's own words are left out of both (an explanation that reads "it is no longer confirmed" may state
itself). One statement that fails is enough to fail the answer: an answer that also denies the value hedges.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from decimal import Decimal

from .values import NUMBER_EDGE, NUMBER_TOKEN, Rounding, normalize_text, numbers_equal, to_decimal

_WORD = re.compile(r"\w(?:[\w@]|[.\-](?=\w))*")
_CLAUSE_END = re.compile(r"[;!?()\n—–]|[.,:](?=\s|$)|\b(?:and|but|although|though|however|whereas|while|yet)\b",
                         re.IGNORECASE)
_SENTENCE_END = re.compile(r"[;!?\n]|\.(?=\s|$)")
_NEGATION = re.compile(r"\b(?:not|never|none|nothing|neither|nor|cannot|nobody|no(?!\.))\b|\w+n['’]t\b",
                       re.IGNORECASE)
_CONDITIONAL = re.compile(r"\b(?:if|unless|assuming|provided|suppose|supposing|whether|in case)\b", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:maybe|perhaps|possibly|probably|likely|might|may(?!\s+\d)|could|would|seems?|appears?|"
                    r"apparently|guess|think|believe|unsure|uncertain|approximately|roughly|around|about)\b",
                    re.IGNORECASE)

Span = tuple[int, int]


def prepared(answer: str) -> str:
    """The answer as statements are read: NFKC (so spans index the text every rule sees)."""
    return unicodedata.normalize("NFKC", answer)


def text_spans(answer: str, value: str) -> list[Span]:
    """Where ``prepared(answer)`` states the text ``value`` as whole tokens (the tokens of
    :func:`world_format.values.normalize_text`), as character spans."""
    wanted = normalize_text(value).split()
    if not wanted:
        return []
    words = [(m.group().casefold(), m.start(), m.end()) for m in _WORD.finditer(answer)]
    spans = []
    for start in range(len(words) - len(wanted) + 1):
        if all(words[start + i][0] == token for i, token in enumerate(wanted)):
            spans.append((words[start][1], words[start + len(wanted) - 1][2]))
    return spans


def number_tokens(answer: str) -> list[tuple[Span, str, Decimal]]:
    """Each number ``answer`` states, as :func:`world_format.values.answer_numbers` reads them: the span and text
    of its core (``1,234.50`` of ``$1,234.50.``) and its value."""
    found = []
    for token in re.finditer(r"\S+", answer):
        core = token.group().strip(NUMBER_EDGE)
        number = to_decimal(core) if core and NUMBER_TOKEN.fullmatch(core) else None
        if number is not None:
            start = token.start() + token.group().index(core)
            found.append(((start, start + len(core)), core, number))
    return found


def number_spans(answer: str, expected: Decimal, decimals: int | None = None,
                 rounding: Rounding = "half_even") -> list[Span]:
    """Where ``prepared(answer)`` states the number ``expected``, as character spans of the number's core."""
    return [span for span, _, number in number_tokens(answer) if numbers_equal(number, expected, decimals, rounding)]


def _around(text: str, span: Span, ends: re.Pattern[str]) -> str:
    """The text before and after ``span`` up to the nearest boundary on each side (the span itself left out)."""
    before = text[:span[0]]
    cut = max((m.end() for m in ends.finditer(before)), default=0)
    after = ends.search(text, span[1])
    return before[cut:] + " " + text[span[1]:after.start() if after else len(text)]


def _cues(text: str, span: Span) -> Iterator[str]:
    clause, sentence = _around(text, span, _CLAUSE_END), _around(text, span, _SENTENCE_END)
    for pattern, what in ((_NEGATION, "negated"), (_CONDITIONAL, "conditional"), (_HEDGE, "hedged")):
        found = pattern.search(clause if what == "negated" else sentence)
        if found:
            yield f"{what} ({found.group()!r})"


def unasserted(answer: str, spans: list[Span]) -> str | None:
    """Why one of the statements at ``spans`` of ``answer`` (already :func:`prepared`) does not assert its value
    (``"negated ('not')"``), or None when every one does."""
    for span in spans:
        for why in _cues(answer, span):
            return f"{why}: {answer[max(0, span[0] - 40):span[1] + 40].strip()!r}"
    return None
