"""Whether an answer *asserts* a value: every statement of it affirmative, none negated, conditional or hedged.

A value check (``contains`` and ``number``, :mod:`world_format.vcode`) finds where the answer states the value and
reads each of those statements in its **clause** — the text around it up to the nearest clause boundary
(``, ; : ( ) —``, a sentence end, or one of the words *and, but, although, though, however, whereas, while, yet*):

* no negation: *not, never, no, none, nothing, neither, nor, cannot, nobody* or a word ending in *n't*
  ("it is not 194.99", "194.99 isn't right");
* no modal or approximation: *might, may, could, would, should, about, around, roughly, approximately*
  ("it may be shipped", "about $194.99");
* no hedge or condition: *maybe, perhaps, possibly, probably, likely, apparently, seems, appears, guess, think,
  believe, unsure, uncertain, if, unless, assuming, provided, suppose, whether, in case* ("I think it is
  shipped", "it is shipped if the carrier is right").

The clause that opens the statement's **sentence** (up to ``. ! ? ;`` or a line break) governs it too: it may hold
no hedge or condition ("If approved, you get $194.99 back.", "Perhaps, it is shipped."). The value's own words are
left out (an explanation that reads "it is no longer confirmed" may state itself). One statement that fails is
enough to fail the answer: an answer that also denies the value hedges.
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
_MODAL = re.compile(r"\b(?:might|may(?!\s+\d)|could|would|should|about|around|roughly|approximately)\b",
                    re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:maybe|perhaps|possibly|probably|likely|apparently|seems?|appears?|guess|think|believe|"
                    r"unsure|uncertain|if|unless|assuming|provided|suppose|supposing|whether|in case)\b",
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


def _opening(text: str, span: Span) -> str:
    """The first clause of the sentence ``span`` stands in, when it is not the span's own clause (else empty)."""
    start = max((m.end() for m in _SENTENCE_END.finditer(text[:span[0]])), default=0)
    first = _CLAUSE_END.search(text, start)
    return text[start:first.start()] if first is not None and first.end() <= span[0] else ""


def _cues(text: str, span: Span) -> Iterator[str]:
    clause, opening = _around(text, span, _CLAUSE_END), _opening(text, span)
    for pattern, what, where in ((_NEGATION, "negated", clause), (_MODAL, "hedged", clause),
                                 (_HEDGE, "hedged", clause), (_HEDGE, "hedged", opening)):
        found = pattern.search(where)
        if found:
            yield f"{what} ({found.group()!r})"


def unasserted(answer: str, spans: list[Span]) -> str | None:
    """Why one of the statements at ``spans`` of ``answer`` (already :func:`prepared`) does not assert its value
    (``"negated ('not')"``), or None when every one does."""
    for span in spans:
        for why in _cues(answer, span):
            return f"{why}: {answer[max(0, span[0] - 40):span[1] + 40].strip()!r}"
    return None
