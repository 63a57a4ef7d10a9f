"""Which base models the Tinker API can load: registered local directories and catalog ids available here.

A script's ``base_model`` is looked up in order: a name registered with ``blobkit serve bases add``
(a local model directory: the tiny model in tests), then a catalog id that resolves on this machine
(SmolLM2-135M-Instruct offline, from its registry package, converted once; a hub id only when the
hub can be reached). Anything else is refused with the names that would work.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobkit.errors import ConfigError, UnknownBaseError

from ..store import ServiceStore
from . import tables
from .records import RegisteredBase


@dataclass(frozen=True)
class ServedBase:
    """A base the server loads."""

    name: str
    """The name scripts use."""
    path: Path
    """The model directory (its tokenizer is what ``get_info`` names)."""
    record: dict[str, Any]
    """The base as blobkit exports record it (source, name_or_path, revision, sha256)."""


_RESOLVED: dict[str, ServedBase] = {}
_LOCK = threading.Lock()


def register_base(store: ServiceStore, name: str, path: Path) -> RegisteredBase:
    """Register the model directory ``path`` as ``name`` (its sha256 identity computed now).

    Raises ConfigError when ``path`` is not a model directory or holds a ``:`` (the SDK cuts a tokenizer id there).
    """
    from trainers.base_identity import base_fingerprint

    path = Path(path).resolve()
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: not a model directory (no config.json)")
    if ":" in str(path):
        raise ConfigError(f"{path}: the path holds ':', which the Tinker SDK cuts tokenizer ids at; move the model")
    if not name or any(c.isspace() for c in name):
        raise ConfigError(f"base name {name!r}: use a non-empty name without spaces")
    with _LOCK:
        _RESOLVED.pop(name, None)
    return tables.add_base(store, name, str(path), base_fingerprint(path))


def accepted_names(store: ServiceStore) -> list[str]:
    """Registered base names and the catalog's ids."""
    from trainers.catalog import CATALOG

    return [base.name for base in tables.list_bases(store)] + [entry.id for entry in CATALOG]


def served_base(store: ServiceStore, name: str) -> ServedBase:
    """The base ``name`` (see the module docstring); UnknownBaseError listing the accepted names otherwise."""
    with _LOCK:
        if name in _RESOLVED:
            return _RESOLVED[name]
    registered = tables.get_base(store, name)
    if registered is not None:
        path = Path(registered.path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"base {name!r}: its directory {path} is gone; register it again with "
                              "blobkit serve bases add")
        served = ServedBase(name, path, {"source": "local", "name_or_path": str(path), "revision": "local",
                                         "sha256": registered.sha256})
    else:
        served = _catalog_base(store, name)
    with _LOCK:
        _RESOLVED[name] = served
    return served


def _catalog_base(store: ServiceStore, name: str) -> ServedBase:
    from trainers.catalog import CATALOG, hub_offline, resolve_base

    if not any(entry.id == name for entry in CATALOG):
        error = UnknownBaseError(f"base_model {name!r} is neither a registered base nor a catalog id; accepted: "
                                 f"{', '.join(accepted_names(store))}")
        error.field, error.accepted = "base_model", accepted_names(store)
        raise error
    resolved = resolve_base(name)
    if resolved.source == "hub" and hub_offline():
        raise UnknownBaseError(f"base_model {name!r} is only on the Hugging Face hub, which is off here; register a "
                               "local copy with blobkit serve bases add --store DIR NAME PATH")
    return ServedBase(name, Path(resolved.name_or_path), resolved.record())
