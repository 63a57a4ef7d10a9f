"""Replaying a held-out workflow with an exported model loaded fresh from disk (what ``blobkit replay`` runs).

The export is verified against its manifest, loaded from safetensors, and one held-out case is
run as an ordinary episode; the turn cap and token budget default to those the export was trained
and evaluated with (its ``train_config.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from world_format.kit import Kit

from .config import TrainConfig
from .episode_limit import episode_limit
from .errors import ConfigError
from .evaluation import EpisodeResult, EvalSummary, evaluate_cases, model_policy, run_episode
from .export import load_export
from .trajectories import ScoredFile
from .turn_tokens import rows_turn_tokens, turn_tokens


def replay_case(export: Path, kit: Kit, case_id: str | None = None, *, max_turns: int | None = None,
                max_new_tokens: int | None = None, decoding: str | None = None) -> tuple[EpisodeResult, dict[str, Any]]:
    """(the episode, the export's manifest) of held-out case ``case_id`` (default: the first) replayed by ``export``,
    decoded as ``decoding`` says (default: as the export was trained and evaluated)."""
    model, tokenizer, manifest = load_export(export)
    cases = kit.cases("eval")
    chosen = next((c for c in cases if case_id is None or c.case_id == case_id), None)
    if chosen is None:
        raise ConfigError(f"no held-out case {case_id!r} in {kit.root}")
    trained = trained_config(Path(export), kit)
    turns = max_turns or trained.turn_cap
    tokens = export_token_cap(trained, tokenizer, kit, max_new_tokens)
    runtime = kit.world().runtime()
    try:
        policy = model_policy(model, tokenizer, tokens, decoding=decoding or trained.decoding, world=runtime.world)
        return run_episode(policy, runtime, chosen, turns), manifest
    finally:
        runtime.close()


def trained_config(export: Path, kit: Kit | None = None) -> TrainConfig:
    """The config the export was trained with, or the defaults when the export does not record one (an export of
    a Tinker sampler checkpoint, say); with ``kit``, a turn cap the export does not record is derived from the kit's
    cases (:func:`trainers.episode_limit.episode_limit`)."""
    try:
        config = TrainConfig.model_validate(json.loads((export / "train_config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        config = TrainConfig()
    if kit is not None and config.max_turns is None:
        config = episode_limit(config, kit)[0]
    return config


def requested_token_cap(text: str) -> int | Literal["derived"]:
    """A token cap as a command line gives it (``--max-new-tokens``): a positive number, or ``derived``, in the form
    :func:`export_token_cap` reads; ValueError otherwise (argparse's ``type=`` turns it into a usage error)."""
    if text == "derived":
        return "derived"
    cap = int(text)
    if cap < 1:
        raise ValueError(f"a token cap is at least 1, not {cap}")
    return cap


def export_token_cap(trained: TrainConfig, tokenizer: Any, kit: Kit,
                     asked: int | Literal["derived"] | None = None) -> int:
    """The token cap of a turn for the export trained with ``trained``: ``asked`` when it is a number; else the cap
    the export records, unless ``asked`` is ``"derived"`` or it records none (a Tinker sampler checkpoint's export),
    when it is derived from the kit's rows under the export's tokenizer (:mod:`trainers.turn_tokens`)."""
    if isinstance(asked, int):
        return asked
    if trained.max_new_tokens is not None and asked is None:
        return trained.max_new_tokens
    unset = trained.model_copy(update={"max_new_tokens": None})
    return turn_tokens(unset, rows_turn_tokens(tokenizer, kit.rows()))[0].token_cap


def trained_decoding(export: Path) -> str:
    """The decoding the export was trained and evaluated with (``free`` when it does not record one)."""
    return trained_config(Path(export)).decoding


def replay_record(result: EpisodeResult, manifest: dict[str, Any], decoding: str = "free") -> dict[str, Any]:
    """What ``blobkit replay --json`` prints: the episode record plus the export's kind."""
    return {**result.to_json(), "model_kind": manifest["kind"], "decoding": decoding}


def evaluate_export(export: Path, kit: Kit, *, limit: int | None = None, decoding: str | None = None,
                    max_new_tokens: int | Literal["derived"] | None = None) -> EvalSummary:
    """Greedy episodes of ``export`` (loaded fresh, verified) on the kit's held-out cases (the first ``limit``), with
    the turn cap and token cap it was trained with (``max_new_tokens`` overrides the latter, as
    :func:`export_token_cap` reads it); what ``blobkit eval --model`` prints."""
    model, tokenizer, _ = load_export(export)
    trained = trained_config(Path(export), kit)
    runtime = kit.world().runtime()
    try:
        tokens = export_token_cap(trained, tokenizer, kit, max_new_tokens)
        policy = model_policy(model, tokenizer, tokens, trained.episode_batch,
                              decoding=decoding or trained.decoding, world=runtime.world)
        return evaluate_cases(policy, runtime, kit.cases("eval")[:limit], trained.turn_cap)
    finally:
        runtime.close()


def score_export(export: Path, kit: Kit, *, limit: int | None = None, decoding: str | None = None) -> ScoredFile:
    """:func:`evaluate_export`'s episodes scored as one claim over the kit's cases (partial when ``limit`` leaves
    held-out cases out), the record ``blobkit eval --model`` prints."""
    from .scoring import Scored, conversation_key, score_verdicts, side_universe

    results = list(evaluate_export(export, kit, limit=limit, decoding=decoding).results)
    universe = side_universe(kit.cases("train") + kit.cases("eval"))
    verdicts = [Scored(r.case_id, r.passed, r.entity, conversation_key(list(r.messages)), f"episode {i + 1}")
                for i, r in enumerate(results)]
    return ScoredFile(score_verdicts(verdicts, universe), results, universe)
