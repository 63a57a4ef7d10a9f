"""JSON Schema's ``pattern``: an ECMA-262 regular expression, matched as ECMA-262 matches it.

JSON Schema 2020-12 (Validation, section 6.3.3) says a ``pattern`` is an ECMA-262 regular expression
that matches anywhere in the string unless anchored. Python's :mod:`re`, which ``jsonschema`` uses by
default, reads the same text differently: ``$`` also matches before a final newline (so
``^[a-z]+$`` accepts ``"abc\\n"``), ``\\d`` and ``\\w`` match every Unicode digit and letter, ``.`` matches
U+2028, and Python-only syntax (``(?P<name>)``, ``\\Z``) compiles. blobkit compiles patterns with
``regress`` (Rust's ECMA-262 engine, with the ``u`` flag JSON Schema implies) and refuses at load
a pattern that is no ECMA-262 regular expression.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import jsonschema
import regress


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> regress.Regex:
    """The ECMA-262 regular expression (``u`` flag); ValueError naming the problem when it is none."""
    try:
        return regress.Regex(pattern, "u")
    except (regress.RegressError, UnicodeEncodeError) as exc:
        raise ValueError(f"pattern {pattern!r} is not an ECMA-262 regular expression: {exc}") from None


def matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (a text no UTF-8 can hold never matches)."""
    try:
        return compile_pattern(pattern).find(text) is not None
    except UnicodeEncodeError:
        return False


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


ParameterValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})
"""Draft 2020-12 with ``pattern`` matched by ECMA-262 rules: the validator of every tool's parameters."""
