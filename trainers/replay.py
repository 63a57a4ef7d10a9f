"""Replaying a held-out workflow with an exported model loaded fresh from disk (what ``blobkit replay`` runs).

The export is verified against its manifest, loaded from safetensors, and one held-out case is
run as an ordinary episode; the turn cap and token budget default to those the export was trained
and evaluated with (its ``train_config.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from world_format.kit import Kit

from .config import TrainConfig
from .errors import ConfigError
from .evaluation import EpisodeResult, model_generator, run_episode
from .export import load_export


def replay_case(export: Path, kit: Kit, case_id: str | None = None, *, max_turns: int | None = None,
                max_new_tokens: int | None = None) -> tuple[EpisodeResult, dict[str, Any]]:
    """(the episode, the export's manifest) of held-out case ``case_id`` (default: the first) replayed by ``export``."""
    model, tokenizer, manifest = load_export(export)
    cases = kit.cases("eval")
    chosen = next((c for c in cases if case_id is None or c.case_id == case_id), None)
    if chosen is None:
        raise ConfigError(f"no held-out case {case_id!r} in {kit.root}")
    trained = _trained_config(Path(export))
    turns = max_turns or trained.max_turns
    tokens = max_new_tokens or trained.max_new_tokens
    runtime = kit.world().runtime()
    try:
        return run_episode(model_generator(model, tokenizer, tokens), runtime, chosen, turns), manifest
    finally:
        runtime.close()


def _trained_config(export: Path) -> TrainConfig:
    """The config the export was trained with, or the defaults when the export does not record one."""
    try:
        return TrainConfig.model_validate(json.loads((export / "train_config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return TrainConfig()


def replay_record(result: EpisodeResult, manifest: dict[str, Any]) -> dict[str, Any]:
    """What ``blobkit replay --json`` prints: the episode record plus the export's kind."""
    return {**result.to_json(), "model_kind": manifest["kind"]}
