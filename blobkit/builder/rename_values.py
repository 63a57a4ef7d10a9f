"""What a renamed replay renames, and to what: a seed's identifying values, and fresh values of the same shape.

**Identifying columns** of a world: every primary-key, ``unique`` or natural-key column and every column a tool
parameter ``anchors`` (the key columns), and every TEXT column of names: at least :data:`MIN_NAME_ROWS` values,
:data:`NAME_DISTINCT` of them distinct and as many shaped like a name (capitalised words: a person, a product).
A value of one counts when :func:`blobkit.builder.leakage.identifying_text` does (text of 4+ characters, an
integer of 3+ digits) and it is not a date or a time of day.

**Fresh values** keep the original's shape: each ASCII letter becomes a letter of its kind (vowel or consonant)
and case, each digit a digit (a leading one not 0), everything else stays; so do an email's domain and the
positions every value of the column of that length shares (a SKU's ``TO-``). An email's local part keeps the
renamed names it contains (``jasmineu`` of Jasmine Underwood becomes ``doreklim`` of Dorekli Umbaresk). An integer
keeps its number of digits. A fresh value is none that the seed holds in any cell (case aside), none the same
replay drew for another value and, for a text, where the shape allows, none the build has drawn before.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from world_format.renaming import occurs
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier
from world_format.text_keys import key_columns

from .leakage import identifying_text

MIN_NAME_ROWS = 10
"""Fewest values a column of names holds."""
NAME_DISTINCT = 0.9
"""Share of a column of names' values that are distinct and shaped like a name."""
ATTEMPTS = 64
"""Fresh values drawn for one original before the replay gives up on it."""
_NAME = re.compile(r"[A-Z][a-z'\-]+(?: [A-Z][a-z'\-]+){0,3}")
_DATE_OR_TIME = re.compile(r"\d{4}-\d{2}-\d{2}.*|\d{1,2}:\d{2}(:\d{2})?")
_FIRST_TOKEN = re.compile(r"[a-z0-9_]+(?:[.@+\-][a-z0-9_]+)*")
_VOWELS, _CONSONANTS = "aeiou", "bcdfghjklmnpqrstvwxyz"


def _counts(value: object) -> str | None:
    text = identifying_text(value)
    return None if text is None or _DATE_OR_TIME.fullmatch(text) else text


def _is_names(values: list[object]) -> bool:
    texts = [value for value in values if isinstance(value, str)]
    if len(texts) < MIN_NAME_ROWS:
        return False
    shaped = sum(1 for text in texts if _NAME.fullmatch(text))
    return len(set(texts)) >= NAME_DISTINCT * len(texts) and shaped >= NAME_DISTINCT * len(texts)


def _fixed_positions(values: list[str]) -> dict[int, dict[int, str]]:
    """By length: the positions where every value of that length (two at least) has the same character."""
    by_length: dict[int, list[str]] = {}
    for value in values:
        if " " not in value:
            by_length.setdefault(len(value), []).append(value)
    fixed: dict[int, dict[int, str]] = {}
    for length, group in by_length.items():
        if len(group) >= 2:
            fixed[length] = {i: group[0][i] for i in range(length) if all(v[i] == group[0][i] for v in group)}
    return fixed


@dataclass(frozen=True)
class SeedIdentifiers:
    """A seed's identifying text values (to find in a row) and every value it holds (that a fresh one avoids)."""

    text: dict[str, tuple[str, tuple[str, ...]]]
    """Lowercased identifying text → (the value as the seed holds it, the ``table.column`` it identifies)."""
    by_first_token: dict[str, tuple[str, ...]]
    """First token of each lowercased identifying text → those texts."""
    taken: frozenset[str]
    """Lowercased text of every value of 3+ characters in any cell of the seed."""
    fixed: dict[str, dict[int, dict[int, str]]]
    """``table.column`` → :func:`_fixed_positions` of its values."""

    @classmethod
    def of(cls, runtime: WorldRuntime) -> SeedIdentifiers:
        """Read the seed once (the runtime's pristine copy)."""
        world, keys = runtime.world, set(key_columns(runtime.world))
        text: dict[str, tuple[str, list[str]]] = {}
        taken: set[str] = set()
        fixed: dict[str, dict[int, dict[int, str]]] = {}
        for table in world.state.tables:
            for column in table.columns:
                name = quote_identifier(column.name)
                values = [v for (v,) in runtime.pristine.execute(
                    f"SELECT {name} FROM {quote_identifier(table.name)} WHERE {name} IS NOT NULL ORDER BY 1")]
                taken |= {str(v).strip().lower() for v in values if len(str(v).strip()) >= 3}
                identifying = (table.name, column.name) in keys or (column.type == "TEXT" and not column.json_data
                                                                    and _is_names(values))
                if not identifying:
                    continue
                target = f"{table.name}.{column.name}"
                strings = [v for v in values if isinstance(v, str) and _counts(v) == v]
                fixed[target] = _fixed_positions(strings)
                for value in strings:
                    text.setdefault(value.lower(), (value, []))[1].append(target)
        by_first: dict[str, list[str]] = {}
        for lowered in sorted(text):
            tokens = _FIRST_TOKEN.findall(lowered)
            if tokens:
                by_first.setdefault(tokens[0], []).append(lowered)
        return cls({k: (v, tuple(dict.fromkeys(c))) for k, (v, c) in text.items()},
                   {k: tuple(v) for k, v in by_first.items()}, frozenset(taken), fixed)


def _letter(rng: random.Random, ch: str) -> str:
    if not ch.isascii() or not ch.isalpha():
        return ch
    pool = _VOWELS if ch.lower() in _VOWELS else _CONSONANTS
    new = rng.choice(pool)
    return new.upper() if ch.isupper() else new


def like(rng: random.Random, text: str, fixed: dict[int, str] | None = None) -> str:
    """A value shaped like ``text``: letters of the same kind and case, digits (a leading one not 0), the rest and
    the ``fixed`` positions kept."""
    out = []
    for i, ch in enumerate(text):
        if fixed and i in fixed:
            out.append(ch)
        elif ch.isascii() and ch.isdigit():
            leading = ch != "0" and (i == 0 or not text[i - 1].isdigit())
            out.append(rng.choice("123456789" if leading else "0123456789"))
        else:
            out.append(_letter(rng, ch))
    return "".join(out)


def _email(rng: random.Random, email: str, words: dict[str, str]) -> str:
    """``email`` with a fresh local part: renamed name words it contains kept renamed, the rest :func:`like`."""
    local, _, domain = email.partition("@")
    out, i = [], 0
    lowered = local.lower()
    while i < len(local):
        word = next((w for w in sorted(words, key=lambda w: (-len(w), w)) if lowered.startswith(w, i)), None)
        if word is not None:
            out.append(words[word])
            i += len(word)
        else:
            out.append(like(rng, local[i]))
            i += 1
    return "".join(out) + "@" + domain


def _words(original: str, renamed: str) -> dict[str, str]:
    """The name words a renamed name maps (lowercased, three letters or more)."""
    pairs = zip(original.lower().split(" "), renamed.lower().split(" "), strict=True)
    return {old: new for old, new in pairs if len(old) >= 3 and old.isalpha()}


class FreshValues:
    """Draws fresh values for one renamed replay (its own seeded RNG), avoiding the seed's values and this replay's,
    and where it can the texts the build drew before (integers may repeat across replays: a 3-digit key has few
    fresh values)."""

    def __init__(self, identifiers: SeedIdentifiers, rng: random.Random, used: set[str]) -> None:
        self.identifiers = identifiers
        self.rng = rng
        self.used = used
        """Lowercased text of every text value the build has renamed to so far (this replay's added as drawn)."""
        self.drawn: set[str] = set()
        self.words: dict[str, str] = {}

    def _free(self, value: str | int, reuse: bool) -> bool:
        text = str(value).lower()
        return text not in self.identifiers.taken and text not in self.drawn and (reuse or text not in self.used)

    def draw(self, original: str | int, column: str) -> str | int | None:
        """A fresh value like ``original`` (of ``column``): one the build has not drawn if :data:`ATTEMPTS` draws find
        one, else one of its earlier texts if as many more do (a shape with few values: a 3-digit flight number);
        None when all of them are taken."""
        for attempt in range(2 * ATTEMPTS):
            candidate = self._candidate(original, column)
            if self._free(candidate, reuse=attempt >= ATTEMPTS):
                self.drawn.add(str(candidate).lower())
                if isinstance(candidate, str):
                    self.used.add(candidate.lower())
                if isinstance(original, str) and isinstance(candidate, str) and _NAME.fullmatch(original):
                    self.words.update(_words(original, candidate))
                return candidate
        return None

    def _candidate(self, original: str | int, column: str) -> str | int:
        if isinstance(original, int):
            digits = len(str(abs(original)))
            return self.rng.randrange(10 ** (digits - 1), 10 ** digits) * (-1 if original < 0 else 1)
        if original.count("@") == 1 and " " not in original:
            return _email(self.rng, original, self.words)
        if _NAME.fullmatch(original):
            return like(self.rng, original)
        return like(self.rng, original, self.identifiers.fixed.get(column, {}).get(len(original)))


def name_first(values: list[tuple[str | int, tuple[str, ...]]]) -> list[tuple[str | int, tuple[str, ...]]]:
    """``values`` in drawing order: names first (so emails can reuse them), then the rest, each group sorted."""
    def order(item: tuple[str | int, tuple[str, ...]]) -> tuple[int, str]:
        value = item[0]
        rank = 0 if isinstance(value, str) and _NAME.fullmatch(value) else 1 if isinstance(value, str) else 2
        return rank, str(value)

    return sorted(values, key=order)


def found_in(identifiers: SeedIdentifiers, text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The seed's identifying text values that ``text`` states as whole tokens (case aside), with their columns."""
    found = []
    for token in sorted(set(_FIRST_TOKEN.findall(text.lower()))):
        for value in identifiers.by_first_token.get(token, ()):
            if occurs(value, text):
                original, columns = identifiers.text[value]
                found.append((original, columns))
    return found
