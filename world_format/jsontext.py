"""Strict JSON text and JSON Lines, read so that every value blobkit writes reads back byte-identical.

* **JSON Lines are split only on ``\\n``** (RFC 8259 text, one value a line, as https://jsonlines.org
  defines it). ``str.splitlines`` also splits on U+2028, U+2029, U+0085 (NEL), ``\\v``, ``\\f`` and
  ``\\x1c``–``\\x1e``, all of which JSON carries raw inside strings; a file read that way loses every
  line holding one. A ``\\r`` before the ``\\n`` is JSON whitespace and is accepted.
* **No lone surrogates.** JSON's ``\\uD800``–``\\uDFFF`` escapes can name half a UTF-16 pair; Python
  decodes it to a string that cannot be written as UTF-8 again, so such a value is refused where it is
  read, naming the line and the JSON pointer (:func:`lone_surrogate`).
* **No duplicate keys, no NaN or Infinity** (:func:`loads_strict`): a document means one thing.

Every refusal is a ``ValueError`` here; each reader turns it into its own typed error (a world's
``WorldFormatError``, a kit's ``KitError``, a trajectory file's ``TrajectoryError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""The only way a lone surrogate gets into decoded JSON text (UTF-8 itself cannot carry one)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _escape_pointer(part: str) -> str:
    """A JSON pointer token; a surrogate in it is written as ``\\uXXXX`` so the pointer itself stays writable."""
    escaped = part.replace("~", "~0").replace("/", "~1")
    return "".join(f"\\u{ord(char):04x}" if 0xD800 <= ord(char) <= 0xDFFF else char for char in escaped)


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def lone_surrogate(value: Any, pointer: str = "") -> str | None:
    """The JSON pointer of the first string (or object key) in ``value`` holding a lone surrogate, else None.

    A lone surrogate (U+D800–U+DFFF outside a pair) is no Unicode scalar value: UTF-8 cannot encode it,
    so a value holding one can be read but never written back.
    """
    stack: list[tuple[str, Any]] = [(pointer, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return where or "/"
        elif isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                child = f"{where}/{_escape_pointer(str(key))}"
                if isinstance(key, str) and _has_surrogate(key):
                    return child
                stack.append((child, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}/{index}", sub) for index, sub in reversed(list(enumerate(item))))
    return None


def check_text(value: Any) -> None:
    """ValueError when ``value`` holds a lone surrogate anywhere (with its JSON pointer)."""
    found = lone_surrogate(value)
    if found is not None:
        raise ValueError(f"{found}: holds a lone UTF-16 surrogate (no Unicode character; it cannot be written as "
                         "UTF-8): write the character itself, or both halves of its pair")


def loads_strict(text: str) -> Any:
    """Parse one JSON text strictly: no duplicate keys, no NaN/Infinity, no lone surrogates.

    Raises ValueError (``json.JSONDecodeError`` for syntax; "nested too deeply" for deep nesting).
    """
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text):
        check_text(value)
    return value


def json_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every non-blank line of JSON Lines text, split on ``\\n`` only (1-based)."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip(" \t\r"):
            yield number, line
