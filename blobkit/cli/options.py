"""Command-line options generated from the configuration models, so a default can never drift.

A command declares which model it is configured by (``TrainConfig``, ``BuildConfig``…); every
field becomes an option whose help is the field's docstring and whose shown default is the
model's own. Options default to None on the command line, so a command can tell a flag that was
given from one that was not, and layer them: the model's defaults, then a preset or a
``--config`` file, then the flags given.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

FLAG_NAMES: dict[str, tuple[str, ...]] = {"kit": ("--world", "--kit"), "learning_rate": ("--lr", "--learning-rate"),
                                          "train_cases_per_task": ("--train-cases",),
                                          "eval_cases_per_task": ("--eval-cases",), "num_layers": ("--layers",),
                                          "num_heads": ("--heads",),
                                          "gpu_count": ("--gpus", "--gpu-count")}
"""Fields whose flags are not simply ``--field-name`` (the seed product spells these ``--world`` and ``--lr``)."""


def _help(info: FieldInfo) -> str:
    return " ".join((info.description or "").split())


def _optional(annotation: Any) -> Any:
    """``T | None`` for a field's annotation (every generated option may be left out)."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        annotation = inner[0] if len(inner) == 1 else annotation
    return typing.Optional[annotation]  # noqa: UP045 - typer needs a runtime Optional, not a PEP 604 union here


def _shown(value: Any) -> str:
    if isinstance(value, Path):
        return str(value)
    return "none" if value is None else str(value)


def _flags(name: str, annotation: Any, prefix: str = "", spelled: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The flags of a field: ``spelled`` as given, else its usual flags with ``prefix`` after the dashes."""
    if spelled is None:
        dashed = prefix.replace("_", "-")
        spelled = tuple("--" + dashed + flag[2:] for flag in FLAG_NAMES.get(name, ("--" + name.replace("_", "-"),)))
    if annotation is bool and "/" not in spelled[0]:
        return (f"{spelled[0]}/--no-{spelled[0][2:]}", *spelled[1:])
    return spelled


def _nested(annotation: Any) -> type[BaseModel] | None:
    """The settings model of a nested section (``TrainConfig.runpod``), else None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _leaves(model: type[BaseModel], chosen: Iterable[str]) -> list[tuple[str, str | None, FieldInfo, Any]]:
    """(field, sub-field or None, its FieldInfo, its annotation) for each option: a nested section's fields are
    options of their own, spelled as if they were the model's (``runpod.gpu_type`` is ``--gpu-type``)."""
    hints = typing.get_type_hints(model)
    leaves: list[tuple[str, str | None, FieldInfo, Any]] = []
    for name in chosen:
        section = _nested(hints[name])
        if section is None:
            leaves.append((name, None, model.model_fields[name], hints[name]))
            continue
        sub_hints = typing.get_type_hints(section)
        leaves += [(name, sub, info, sub_hints[sub]) for sub, info in section.model_fields.items()]
    return leaves


def model_options(model: type[BaseModel], *, only: Iterable[str] | None = None,
                  skip: Iterable[str] = (), defaults: Mapping[str, Any] | None = None, prefix: str = "",
                  flags: Mapping[str, tuple[str, ...]] | None = None,
                  helps: Mapping[str, str] | None = None) -> list[inspect.Parameter]:
    """One keyword option per field of ``model`` (``only`` those, less ``skip``), each defaulting to None.

    A field holding a settings model (a nested section, such as ``TrainConfig.runpod``) gives one option per
    field of that section, named ``<section>_<field>`` and spelled like a field of ``model`` (``--gpu-type``).
    ``defaults`` replaces the default shown in the help (a command that applies a preset shows its values).
    ``prefix`` goes in front of each parameter name and flag (``sft_`` makes ``epochs`` the parameter
    ``sft_epochs`` and the flag ``--sft-epochs``), so one model can give options twice; ``flags`` spells a
    field's flags outright and ``helps`` replaces a field's help (both by field name).
    """
    chosen = [name for name in (list(only) if only is not None else list(model.model_fields)) if name not in set(skip)]
    shown = {**{name: info.default for name, info in model.model_fields.items()}, **(defaults or {})}
    parameters = []
    for name, sub, info, annotation in _leaves(model, chosen):
        key = name if sub is None else sub
        default = shown[name] if sub is None else info.default
        option = typer.Option(None, *_flags(key, annotation, prefix, (flags or {}).get(key)),
                              help=(helps or {}).get(key, _help(info)), show_default=_shown(default))
        parameter = prefix + (name if sub is None else f"{name}_{sub}")
        parameters.append(inspect.Parameter(parameter, inspect.Parameter.KEYWORD_ONLY, default=option,
                                            annotation=_optional(annotation)))
    return parameters


def given(values: Mapping[str, Any], model: type[BaseModel], *, only: Iterable[str] | None = None,
          prefix: str = "") -> dict[str, Any]:
    """The options of ``model`` (``only`` those; named with ``prefix``) given on the command line (not left at None).

    Returns field values by field name; a nested section's given options as a dict under the section's name.
    """
    found: dict[str, Any] = {}
    for name, sub, _, _ in _leaves(model, list(model.model_fields if only is None else only)):
        value = values.get(prefix + (name if sub is None else f"{name}_{sub}"))
        if value is None:
            continue
        if sub is None:
            found[name] = value
        else:
            found.setdefault(name, {})[sub] = value
    return found


def layered(values: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with ``update`` on top; a nested section (a dict in both) is layered field by field."""
    merged = dict(values)
    for name, value in update.items():
        below = merged.get(name)
        merged[name] = {**below, **value} if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


def with_parameters(function: Callable[..., Any], parameters: list[inspect.Parameter]) -> Callable[..., Any]:
    """``function`` with ``parameters`` (generated options plus its own) as the signature typer reads."""
    own = [p for p in inspect.signature(function).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    names = {p.name for p in own}
    function.__signature__ = inspect.Signature([*own, *(p for p in parameters if p.name not in names)])  # type: ignore[attr-defined]
    return function
