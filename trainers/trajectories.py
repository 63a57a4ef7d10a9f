"""Trajectory files, and assistant messages in every shape a real client sends.

A trajectory file (``blobkit eval --trajectories``, written by ``blobkit adversary``) is JSON Lines, one
recorded conversation a line::

    {"case_id": "c-...", "messages": [{"role": "system", ...}, ..., {"role": "assistant", ...}],
     "agent": "optional name", "metadata": {optional}}

It is read strictly (:func:`read_trajectories`): lines end at ``\\n`` only, each is strict JSON (no
duplicate keys, NaN or lone surrogates: :mod:`world_format.jsontext`), within a size budget; any problem
is a :class:`~trainers.errors.TrajectoryError` naming ``file:line``.

:func:`score_trajectories` re-executes the distinct conversations and scores them as one claim about the
kit's cases (:mod:`trainers.scoring`); each assistant message is read as a client writes it
(:mod:`trainers.messages`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world_format.jsontext import json_lines, loads_strict
from world_format.kit import Kit

from .errors import TrajectoryError
from .evaluation import EpisodeResult, EvalSummary, replay_trajectory
from .scoring import Score, Scored, Side, conversation_key, distinct_verdicts, score_verdicts, side_universe

MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024
"""The largest trajectory file read."""
LINE_KEYS = frozenset({"case_id", "messages", "agent", "metadata"})
"""The keys a trajectory line may hold."""


@dataclass(frozen=True)
class TrajectoryLine:
    """One recorded conversation of a trajectory file."""

    number: int
    """1-based line number in the file."""
    case_id: str
    """The kit case the conversation answers."""
    messages: list[dict[str, Any]]
    """The conversation (only its assistant turns are scored)."""
    agent: str | None
    """The agent's name, when the line gives one."""

    @property
    def conversation(self) -> str:
        """:func:`trainers.scoring.conversation_key` of the messages (equal keys: the same attempt)."""
        return conversation_key(self.messages)


def _line(value: Any, number: int, where: str) -> TrajectoryLine:
    if not isinstance(value, dict):
        raise TrajectoryError(f"{where}: expected a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - LINE_KEYS)
    if unknown:
        raise TrajectoryError(f"{where}: unknown key {unknown[0]!r} (a line holds {', '.join(sorted(LINE_KEYS))})")
    case_id, messages, agent = value.get("case_id"), value.get("messages"), value.get("agent")
    if not isinstance(case_id, str) or not isinstance(messages, list):
        raise TrajectoryError(f"{where}: each line needs a case_id (string) and messages (list)")
    bad = next((i for i, m in enumerate(messages) if not isinstance(m, dict) or not isinstance(m.get("role"), str)),
               None)
    if bad is not None:
        raise TrajectoryError(f"{where}: /messages/{bad}: each message is an object with a role (string)")
    if agent is not None and not isinstance(agent, str):
        raise TrajectoryError(f"{where}: /agent: a string when given")
    return TrajectoryLine(number, case_id, messages, agent)


def read_trajectories(path: Path, max_bytes: int = MAX_TRAJECTORY_BYTES) -> list[TrajectoryLine]:
    """Every line of a trajectory file, checked (see the module docstring); TrajectoryError naming ``file:line``."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TrajectoryError(f"{path}: {size} bytes, over the {max_bytes}-byte budget for a trajectory file")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TrajectoryError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    lines = []
    for number, raw in json_lines(text):
        where = f"{path}:{number}"
        try:
            value = loads_strict(raw)
        except ValueError as exc:
            raise TrajectoryError(f"{where}: invalid JSON: {exc}") from None
        lines.append(_line(value, number, where))
    if not lines:
        raise TrajectoryError(f"{path} holds no trajectories: nothing to score")
    return lines


@dataclass(frozen=True)
class ScoredFile:
    """A trajectory file scored against a kit: the score and each distinct case's episode, in file order."""

    score: Score
    results: list[EpisodeResult]
    universe: dict[str, Side]
    """Every case id of the kit, with its side."""

    def summary(self) -> dict[str, Any]:
        """The evaluation summary of the distinct episodes (:meth:`EvalSummary.to_json`: per template, parse
        failures, refusals) with the file's score over it (its sides, duplicates and partial)."""
        return {**EvalSummary(tuple(self.results), self.universe).to_json(), **self.score.model_dump(),
                "side": self.score.side}


def score_trajectories(kit: Kit, lines: list[TrajectoryLine], source: str, max_turns: int | None = None) -> ScoredFile:
    """Re-execute each distinct conversation of ``lines`` on the kit's world and score them as one claim
    (:func:`trainers.scoring.score_verdicts`): unknown case ids and a case repeated with different messages
    raise ScoreError naming the lines before anything runs; a repeat with the same messages runs once.
    ``source`` names the file in those errors."""
    cases = {case.case_id: case for case in kit.cases("train") + kit.cases("eval")}
    universe = side_universe(list(cases.values()))
    attempts = [Scored(line.case_id, False, "", line.conversation, f"{source}:{line.number}") for line in lines]
    distinct_verdicts(attempts, universe)
    results: dict[str, EpisodeResult] = {}
    runtime = kit.world().runtime()
    try:
        for line in lines:
            if line.case_id not in results:
                results[line.case_id] = replay_trajectory(runtime, cases[line.case_id], line.messages, max_turns)
    finally:
        runtime.close()
    verdicts = [Scored(a.case_id, results[a.case_id].passed, results[a.case_id].entity, a.conversation, a.origin)
                for a in attempts]
    return ScoredFile(score_verdicts(verdicts, universe), list(results.values()), universe)
