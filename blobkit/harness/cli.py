"""The harnesses ``blobkit replay --harness NAME`` runs (one registration each)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError
from trainers.evaluation import EpisodeResult
from trainers.export import verify_export
from world_format.kit import Kit


def _codex(export: Path, kit: Kit, case_id: str | None) -> EpisodeResult:
    from .codex import replay_with_codex

    return replay_with_codex(export, kit, case_id)


HARNESSES: dict[str, Callable[[Path, Kit, str | None], EpisodeResult]] = {"codex": _codex}
"""Harness name → its replay."""


def harness_replay(name: str, export: Path, kit: Kit, case_id: str | None) -> tuple[EpisodeResult, dict[str, Any]]:
    """(the episode, the export's manifest) of a held-out case replayed inside harness ``name``."""
    if name not in HARNESSES:
        raise ConfigError(f"unknown harness {name!r}; harnesses: {', '.join(HARNESSES)}")
    manifest = verify_export(export)
    return HARNESSES[name](export, kit, case_id), manifest
