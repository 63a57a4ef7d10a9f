"""The JSON Schema a tool parameter may declare: what is honoured end to end, and what is refused at load.

A tool's ``parameters`` is an object schema whose properties are single values. Every keyword a
property uses is either applied everywhere (argument validation by ``jsonschema``, binding to SQL,
the tool list the model sees) or refused when the world loads, naming the tool and the parameter —
never shown to the model and then ignored.

==========================  ===============================================================
keyword                     what blobkit does with it
==========================  ===============================================================
``type``                    "string", "integer", "number", "boolean", or a list of one of them
                            and "null" (``["string", "null"]``: the argument may be null)
``anyOf``                   the same nullable form spelled ``[{"type": T}, {"type": "null"}]``
``enum``                    the argument must be one of the values (minting draws from them)
``default``                 applied when the argument is omitted, before binding (validated here)
``description``, ``title``  shown to the model (a description is required)
``examples``                shown to the model; minting draws write arguments from them
``minimum``, ``maximum``,   validated
``exclusiveMinimum``,
``exclusiveMaximum``,
``minLength``, ``maxLength``,
``pattern``, ``const``
==========================  ===============================================================

Anything else (``$ref``, ``oneOf``, ``allOf``, ``not``, ``format``, ``items``, ``properties``…) is
refused. An omitted argument without a default binds SQL ``NULL``.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from world_format.errors import WorldFormatError

SCALAR_TYPES = ("string", "integer", "number", "boolean")
PROPERTY_KEYWORDS = frozenset({"type", "anyOf", "enum", "default", "description", "title", "examples", "minimum",
                               "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                               "pattern", "const"})


def _types(prop: dict[str, Any]) -> list[str] | None:
    """The property's types (one scalar type, possibly with "null"), or None when the form is not supported."""
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
    scalars = [k for k in kinds if k != "null"]
    if len(scalars) != 1 or scalars[0] not in SCALAR_TYPES or len(kinds) - len(scalars) > 1:
        return None
    return kinds


def check_parameter_schema(tool: str, name: str, prop: Any, where: str) -> None:
    """Refuse (WorldFormatError naming tool and parameter) a property schema blobkit does not honour."""
    what = f"{where}: tool {tool!r} parameter {name!r}"
    if not isinstance(prop, dict):
        raise WorldFormatError(f"{what}: must be a JSON Schema object")
    unsupported = sorted(set(prop) - PROPERTY_KEYWORDS)
    if unsupported:
        raise WorldFormatError(f"{what}: keyword {unsupported[0]!r} is not supported (supported: "
                               f"{', '.join(sorted(PROPERTY_KEYWORDS))}; see spec/world-format.md)")
    if _types(prop) is None:
        raise WorldFormatError(f"{what}: declare one of {list(SCALAR_TYPES)} as its type, optionally nullable "
                               '(["string", "null"] or anyOf with {"type": "null"})')
    if not isinstance(prop.get("description"), str) or not prop["description"].strip():
        raise WorldFormatError(f"{what}: needs a description for the model")
    if "default" in prop:
        problems = list(jsonschema.Draft202012Validator({k: v for k, v in prop.items() if k != "default"})
                        .iter_errors(prop["default"]))
        if problems:
            raise WorldFormatError(f"{what}: its default does not fit its own schema: {problems[0].message}")


def defaults(parameters: dict[str, Any]) -> dict[str, Any]:
    """The declared defaults of a tool's parameters, by name."""
    properties = parameters.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {name: prop["default"] for name, prop in properties.items() if isinstance(prop, dict) and "default" in prop}
