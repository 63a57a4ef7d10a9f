"""Which sampled RFT episodes become training rows: verifier passes only, each conversation once, in a seeded order.

An episode the verifier passed is kept when it is also a training row of the world, checked as the kit's own rows
are (:func:`trainers.plan.row_problem`: system and user first, an assistant answer last, known tools, arguments
valid against their schemas, every tool message answering a call); a passed episode with an unparsable turn (its
error comes back as a ``parse_error`` tool message without a call) or without a final answer is counted
``unusable``, never trained on. Two kept episodes with the same tools and messages (canonical JSON) are one row,
however often they were sampled (``copies`` records how often). The rows are ordered by that content hash, then
shuffled with ``random.Random(seed)``, so the same episodes give the same rows in the same order whatever order
they were sampled in.

With a fill (``--rft-fill reference``), a sampled case none of whose episodes was kept contributes its kit row (the
executed reference chain, ``metadata.rft_fill: reference``), ordered and shuffled with the kept rows: the mix then
holds every sampled case, not only those the policy already passes.

A row has the kit's row shape (``messages`` with ``tool_calls`` and their ids, ``tools``, ``metadata``), the
messages exactly as the episode loop recorded them (:mod:`world_format.conversation`), and metadata naming the
case and the sample it came from (``sft_source: rft_sample``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from world_format.canonical import canonical_json
from world_format.kit import KitCase

from .eval_record import RFTSelection
from .evaluation import EpisodeResult
from .plan import row_problem

RFT_SOURCE = "rft_sample"
"""``metadata.sft_source`` of an RFT row."""


@dataclass(frozen=True)
class SampledEpisode:
    """One episode sampled from the SFT policy for RFT."""

    case: KitCase
    """The training case (its prompt: the SFT row's system and user messages and tools)."""
    sample: int
    """Which of the case's k samples it is (0-based)."""
    episode: EpisodeResult
    """What the policy did and the verifier's verdict."""


@dataclass(frozen=True)
class Selected:
    """The rows RFT trains on and how they were chosen."""

    rows: list[dict[str, Any]]
    """Kit-shaped rows, deduplicated, in the seeded order."""
    counts: RFTSelection
    """Passed, unusable, duplicate and kept episodes."""


def episode_row(item: SampledEpisode) -> dict[str, Any]:
    """The episode as a kit-shaped SFT row (``metadata.copies`` is set by :func:`select`)."""
    case, episode = item.case, item.episode
    assert case.prompt is not None  # an RL case always carries its prompt
    return {"messages": [dict(message) for message in episode.messages], "tools": case.prompt.tools,
            "metadata": {"task_id": case.task_id, "case_id": case.case_id, "template": case.template,
                         "sft_source": RFT_SOURCE, "rft_sample": item.sample, "verdict": episode.verdict.outcome}}


def row_key(row: dict[str, Any]) -> str:
    """sha256 of the row's tools and messages as canonical JSON (metadata left out): what makes two rows one."""
    return hashlib.sha256(canonical_json({"messages": row["messages"], "tools": row["tools"]}).encode()).hexdigest()


def select(sampled: Sequence[SampledEpisode], runtime: Any, seed: int,
           fill: Mapping[str, dict[str, Any]] | None = None) -> Selected:
    """The verifier-passed episodes that are training rows of ``runtime``'s world, each once, seeded order.

    ``fill``: the kit's row of each training case (case id → row, ``--rft-fill reference``); a sampled case with no
    kept episode is trained on its kit row instead (``metadata.rft_fill``), counted in ``reference_rows``."""
    kept: dict[str, dict[str, Any]] = {}
    copies: dict[str, int] = {}
    passed = unusable = 0
    for item in sorted(sampled, key=lambda s: (s.case.case_id, s.sample)):
        if not item.episode.passed:
            continue
        passed += 1
        row = episode_row(item)
        if item.episode.parse_failures or item.episode.answer is None or row_problem(runtime, row) is not None:
            unusable += 1
            continue
        key = row_key(row)
        copies[key] = copies.get(key, 0) + 1
        kept.setdefault(key, row)
    rows = [{**kept[key], "metadata": {**kept[key]["metadata"], "copies": copies[key]}} for key in sorted(kept)]
    kept_cases = {row["metadata"]["case_id"] for row in rows}
    filled = _reference_rows(sampled, kept_cases, fill or {})
    counts = RFTSelection(
        episodes=len(sampled), passed=passed,
        verifier_errors=sum(s.episode.verdict.outcome == "error" for s in sampled),
        unusable=unusable, duplicates=passed - unusable - len(rows), kept=len(rows),
        cases_kept=len(kept_cases), reference_rows=len(filled))
    rows = sorted(rows + filled, key=row_key)
    random.Random(seed).shuffle(rows)
    return Selected(rows, counts)


def _reference_rows(sampled: Sequence[SampledEpisode], kept_cases: set[str],
                    fill: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The kit row of each sampled case in ``fill`` with no kept episode, marked ``metadata.rft_fill``."""
    missing = sorted({item.case.case_id for item in sampled} - kept_cases)
    return [{**fill[case_id], "metadata": {**(fill[case_id].get("metadata") or {}), "rft_fill": "reference"}}
            for case_id in missing if case_id in fill]
