"""Exact, typed comparison of values, and the numbers and phrases an answer states.

Every comparison VCode makes goes through :func:`values_equal`:

* integers (and booleans, and integral reals) compare **exactly**, at any size: 5123409000027 is
  not 5123409004027;
* a real compares as the decimal its shortest repr spells (``0.1`` is ``Decimal("0.1")``), so
  ``0.30000000000000004`` is not ``0.3`` — unless the check (or the column it reads) declares
  ``decimals``: then both sides are rounded to that many places with the declared rule
  (``half_even`` by default, ``half_up`` on request) before they compare, as a careful person
  quotes money;
* a string equals only the same string; a number never equals a string.

:func:`answer_numbers` reads the numbers an answer states, as tokens (``$1,234.50`` is 1234.50;
``2026-05-22``, ``MER-LT-0069`` and ``10:30`` are not numbers).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Literal

from .state import normalize_value

Rounding = Literal["half_even", "half_up"]
_ROUNDING = {"half_even": ROUND_HALF_EVEN, "half_up": ROUND_HALF_UP}
_NUMBER_TOKEN = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_EDGE = "$€£¥%()[]{}\"'`*,.;:!?"
NUMBER_TOKEN, NUMBER_EDGE = _NUMBER_TOKEN, _EDGE
"""A number token's core (``1,234.50``) and the characters stripped around it (currency signs, brackets, quotes,
sentence punctuation): how :func:`answer_numbers` reads numbers, for modules that locate them."""


def is_number(value: Any) -> bool:
    """A JSON number (bools excluded: they are normalised to integers first)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def to_decimal(value: Any) -> Decimal | None:
    """The decimal a number (or a numeric string) spells, or None when it is not a finite number."""
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            parsed = Decimal(value.strip().replace(",", ""))
        except InvalidOperation:
            return None
        return parsed if parsed.is_finite() else None
    return None


def rounded(value: Decimal, decimals: int, rounding: Rounding = "half_even") -> Decimal:
    """``value`` rounded to ``decimals`` places with the named rule."""
    return value.quantize(Decimal(1).scaleb(-decimals), rounding=_ROUNDING[rounding])


def numbers_equal(left: Decimal, right: Decimal, decimals: int | None = None,
                  rounding: Rounding = "half_even") -> bool:
    """Exact decimal equality, or equality after rounding both sides to ``decimals`` places."""
    if decimals is None:
        return left == right
    return rounded(left, decimals, rounding) == rounded(right, decimals, rounding)


def values_equal(left: Any, right: Any, decimals: int | None = None, rounding: Rounding = "half_even",
                 list_match: Literal["ordered", "multiset"] = "ordered") -> bool:
    """Typed equality (see the module docstring): integers exactly, reals as decimals, strings exactly; lists
    element by element (in order, or as multisets), objects field by field."""
    if isinstance(left, list) or isinstance(right, list):
        if not (isinstance(left, list) and isinstance(right, list)) or len(left) != len(right):
            return False
        if list_match == "multiset":
            return sorted(map(_canonical, left)) == sorted(map(_canonical, right))
        return all(values_equal(a, b, decimals, rounding, list_match) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) or isinstance(right, dict):
        return (isinstance(left, dict) and isinstance(right, dict) and set(left) == set(right)
                and all(values_equal(left[k], right[k], decimals, rounding, list_match) for k in left))
    left, right = normalize_value(left), normalize_value(right)
    if is_number(left) and is_number(right):
        if isinstance(left, int) and isinstance(right, int):
            return left == right
        dl, dr = to_decimal(left), to_decimal(right)
        return dl is not None and dr is not None and numbers_equal(dl, dr, decimals, rounding)
    return bool(type(left) is type(right) and left == right)


def _canonical(value: Any) -> str:
    """A value's canonical text with numbers normalised (integral reals as integers), for multiset comparison."""
    if isinstance(value, list):
        return "[" + ",".join(_canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_canonical(value[k])}" for k in sorted(value)) + "}"
    return json.dumps(normalize_value(value), sort_keys=True)


def answer_numbers(text: str) -> list[Decimal]:
    """The numbers ``text`` states, one per whitespace-separated token that is a number once the
    currency signs, brackets, quotes and sentence punctuation around it are stripped."""
    found = []
    for token in text.split():
        core = token.strip(_EDGE)
        if core and _NUMBER_TOKEN.fullmatch(core):
            value = to_decimal(core)
            if value is not None:
                found.append(value)
    return found


def normalize_text(text: str) -> str:
    """Case-folded, NFKC, punctuation replaced by spaces (keeping . @ - inside tokens), spaces collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s.@-]", " ", text)
    text = re.sub(r"(?<!\w)[.\-]|[.\-](?!\w)", " ", text)
    return " ".join(text.split())


def states(answer: str, phrase: str) -> bool:
    """Whether the normalized ``phrase`` occurs in the normalized ``answer`` as whole tokens."""
    wanted = normalize_text(phrase)
    return bool(wanted) and f" {wanted} " in f" {normalize_text(answer)} "


def without(answer: str, phrase: str) -> str:
    """The normalized answer with every whole-token occurrence of the normalized ``phrase`` removed."""
    wanted = normalize_text(phrase)
    text = f" {normalize_text(answer)} "
    return text.replace(f" {wanted} ", "  ") if wanted else text
