"""The JSON Schema a tool parameter may declare: what is honoured end to end, and what is refused at load.

A tool's ``parameters`` is an object schema. Every keyword a property uses is either applied
everywhere (argument validation by ``jsonschema``, binding to SQL, the tool list the model sees) or
refused when the world loads, naming the tool and the parameter — never shown to the model and then
ignored.

==========================  ===============================================================
keyword                     what blobkit does with it
==========================  ===============================================================
``type``                    "string", "integer", "number", "boolean", "array" or "object", or
                            a list of one of them and "null" (``["string", "null"]``: nullable)
``anyOf``                   the same nullable form spelled ``[{"type": T}, {"type": "null"}]``
``items``                   arrays: the schema of every element (a scalar or an object schema)
``minItems``, ``maxItems``, arrays: validated
``uniqueItems``
``properties``,             objects: their fields (each checked like a parameter) and which are
``required``,               required; ``additionalProperties`` must be false
``additionalProperties``
``enum``                    the argument must be one of the values (minting draws from them)
``default``                 applied when the argument is omitted, before binding (validated here)
``description``, ``title``  shown to the model (a top-level parameter needs a description)
``examples``                shown to the model; minting draws write arguments from them
``minimum``, ``maximum``,   validated
``exclusiveMinimum``,
``exclusiveMaximum``,
``minLength``, ``maxLength``,
``pattern``, ``const``
==========================  ===============================================================

Every keyword means what JSON Schema 2020-12 says: ``pattern`` is an ECMA-262 regular expression
(:mod:`world_format.ecma_pattern`: ``$`` does not match before a final newline, ``\\d`` is ``[0-9]``), and
one that is not ECMA-262 is refused; a nullable ``enum`` (or ``const``) must list ``null``, which JSON
Schema otherwise refuses; a default, each ``enum`` value and each example must fit the schema.

Anything else (``$ref``, ``oneOf``, ``allOf``, ``not``, ``format``…) is refused. An array or object
argument is bound to SQL as canonical JSON text, which tool SQL reads with SQLite's JSON functions
(``json_each(:item_ids)``, ``json_extract(:address, '$.city')``). An omitted argument without a
default binds SQL ``NULL``.
"""

from __future__ import annotations

from typing import Any

from world_format.errors import WorldFormatError

from .ecma_pattern import ParameterValidator, compile_pattern

SCALAR_TYPES = ("string", "integer", "number", "boolean")
STRUCTURED_TYPES = ("array", "object")
SCALAR_KEYWORDS = frozenset({"type", "anyOf", "enum", "default", "description", "title", "examples", "minimum",
                             "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
                             "const"})
ARRAY_KEYWORDS = frozenset({"items", "minItems", "maxItems", "uniqueItems"})
OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties"})
PROPERTY_KEYWORDS = SCALAR_KEYWORDS | ARRAY_KEYWORDS | OBJECT_KEYWORDS
MAX_DEPTH = 4
"""Most levels of arrays and objects inside one parameter."""


def _types(prop: dict[str, Any]) -> list[str] | None:
    """The property's types (one type, possibly with "null"), or None when the form is not supported."""
    if "type" in prop and "anyOf" in prop:
        return None
    if "anyOf" in prop:
        options = prop["anyOf"]
        if not isinstance(options, list) or not all(isinstance(o, dict) and set(o) == {"type"} for o in options):
            return None
        declared: Any = [o["type"] for o in options]
    else:
        declared = prop.get("type")
    kinds = [declared] if isinstance(declared, str) else declared
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds) or len(set(kinds)) != len(kinds):
        return None
    main = [k for k in kinds if k != "null"]
    if len(main) != 1 or main[0] not in SCALAR_TYPES + STRUCTURED_TYPES or len(kinds) - len(main) > 1:
        return None
    return kinds


def _check_structure(what: str, prop: dict[str, Any], kind: str, depth: int) -> None:
    """Arrays need ``items``; objects need ``properties`` and ``additionalProperties: false``; each part checked."""
    if depth > MAX_DEPTH:
        raise WorldFormatError(f"{what}: nested deeper than {MAX_DEPTH} levels")
    misplaced = sorted(set(prop) & ((ARRAY_KEYWORDS if kind != "array" else set())
                                    | (OBJECT_KEYWORDS if kind != "object" else set())))
    if misplaced:
        raise WorldFormatError(f"{what}: keyword {misplaced[0]!r} does not apply to type {kind!r}")
    if kind == "array":
        if not isinstance(prop.get("items"), dict):
            raise WorldFormatError(f"{what}: an array declares the schema of its elements in items")
        _check(f"{what} items", prop["items"], depth + 1, described=False)
    elif kind == "object":
        properties = prop.get("properties")
        if not isinstance(properties, dict) or not properties or prop.get("additionalProperties") is not False:
            raise WorldFormatError(f"{what}: an object declares its properties and additionalProperties: false")
        for field, sub in properties.items():
            _check(f"{what} field {field!r}", sub, depth + 1, described=False)


def _check(what: str, prop: Any, depth: int, described: bool) -> None:
    if not isinstance(prop, dict):
        raise WorldFormatError(f"{what}: must be a JSON Schema object")
    unsupported = sorted(set(prop) - PROPERTY_KEYWORDS)
    if unsupported:
        raise WorldFormatError(f"{what}: keyword {unsupported[0]!r} is not supported (supported: "
                               f"{', '.join(sorted(PROPERTY_KEYWORDS))}; see spec/world-format.md)")
    kinds = _types(prop)
    if kinds is None:
        raise WorldFormatError(f"{what}: declare one of {list(SCALAR_TYPES + STRUCTURED_TYPES)} as its type, "
                               'optionally nullable (["string", "null"] or anyOf with {"type": "null"})')
    _check_structure(what, prop, next(k for k in kinds if k != "null"), depth)
    if described and (not isinstance(prop.get("description"), str) or not prop["description"].strip()):
        raise WorldFormatError(f"{what}: needs a description for the model")
    _check_exact(what, prop, kinds)


def _check_exact(what: str, prop: dict[str, Any], kinds: list[str]) -> None:
    """Keywords whose meaning blobkit applies exactly, or refuses: an ECMA-262 ``pattern``; a nullable ``enum`` or
    ``const`` that admits null; a ``default``, every ``enum`` value and every example that fits the schema."""
    if "pattern" in prop:
        if not isinstance(prop["pattern"], str):
            raise WorldFormatError(f"{what}: pattern must be a string (an ECMA-262 regular expression)")
        try:
            compile_pattern(prop["pattern"])
        except ValueError as exc:
            raise WorldFormatError(f"{what}: {exc} (JSON Schema patterns are ECMA-262, not Python re)") from None
    if "null" in kinds and ("enum" in prop and None not in _listed(prop["enum"]) or "const" in prop
                            and prop["const"] is not None):
        keyword = "enum" if "enum" in prop else "const"
        raise WorldFormatError(f"{what}: its type admits null but its {keyword} does not list null, so JSON Schema "
                               f"refuses null; a nullable {keyword} must list null (or drop \"null\" from type)")
    rest = {k: v for k, v in prop.items() if k not in ("default", "examples", "description", "title")}
    validator = ParameterValidator(rest)
    for keyword, values in (("default", [prop["default"]] if "default" in prop else []),
                            ("enum", _listed(prop.get("enum"))), ("examples", _listed(prop.get("examples")))):
        for value in values:
            problems = list(validator.iter_errors(value))
            if problems:
                what_value = "its default" if keyword == "default" else f"{keyword} value {value!r}"
                raise WorldFormatError(f"{what}: {what_value} does not fit its own schema: {problems[0].message}")


def _listed(values: Any) -> list[Any]:
    return values if isinstance(values, list) else []


def check_parameter_schema(tool: str, name: str, prop: Any, where: str) -> None:
    """Refuse (WorldFormatError naming tool and parameter) a property schema blobkit does not honour."""
    _check(f"{where}: tool {tool!r} parameter {name!r}", prop, 1, described=True)


def defaults(parameters: dict[str, Any]) -> dict[str, Any]:
    """The declared defaults of a tool's parameters, by name."""
    properties = parameters.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {name: prop["default"] for name, prop in properties.items() if isinstance(prop, dict) and "default" in prop}
