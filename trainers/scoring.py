"""A score is a claim about a kit's cases: each case counted once, and how much of each side it covers.

Every place blobkit turns verdicts into a pass rate goes through :func:`score_verdicts`: ``blobkit eval
--trajectories`` (a file of recorded conversations), the held-out evaluation of every training run
(``eval.json``, :class:`trainers.evaluation.EvalSummary`) and so a company job's results. The rules:

* **a case counts once.** A second verdict on a case from the *same* conversation (the same messages) is a
  duplicate: counted once, and the score says how many lines it dropped. A second verdict from a
  *different* conversation is an error naming both (which of the two would the score claim?);
* **a case the kit does not hold is an error**, never a line quietly skipped or counted;
* **the score says what it covers**: the side(s) of the kit its cases are on, and for each side how many
  of its cases were scored. A score that does not cover the whole held-out set is **partial**; the CLI
  fails a partial score against ``--min-pass-rate`` unless ``--allow-partial`` says that is meant.

The pass rate, case count, entities and Wilson interval are over the distinct cases
(:func:`trainers.intervals.rate_record`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from world_format.canonical import canonical_bytes, sha256_hex

from .errors import ScoreError
from .intervals import rate_record

Side = Literal["train", "eval"]
SIDE_NAMES: dict[Side, str] = {"train": "training", "eval": "held-out"}


def conversation_key(messages: Any) -> str:
    """The identity of a conversation: sha256 of its messages as canonical JSON."""
    return sha256_hex(canonical_bytes(messages))


@dataclass(frozen=True)
class Scored:
    """One verdict on one case, as the score reads it."""

    case_id: str
    passed: bool
    entity: str
    """The connected entity the case concerns (cases of one entity are one independent unit)."""
    conversation: str
    """:func:`conversation_key` of the conversation judged: equal keys are the same attempt."""
    origin: str
    """Where the verdict came from, for errors: ``agent.jsonl:7``, ``episode 3``."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Coverage(_Record):
    """How much of one side of the kit a score covers."""

    cases_in_kit: int
    """The side's cases in the kit."""
    covered: int
    """Distinct cases of that side the score counts."""
    coverage: float
    """covered / cases_in_kit, rounded to 4 places (0.0 for an empty side)."""


class Score(_Record):
    """A pass rate over distinct cases, with what it covers."""

    pass_rate: float
    """Passed / cases, rounded to 4 places."""
    cases: int
    """Distinct cases scored."""
    passed: int
    """Distinct cases the verifier passed."""
    entities: int
    """Independent entities the scored cases concern."""
    interval_95: list[float]
    """95 % Wilson score interval of the pass rate, over cases."""
    sides: dict[Side, Coverage]
    """Coverage of each side the scored cases are on; the held-out side is always listed."""
    partial: bool
    """True when the score does not cover every held-out case of the kit."""
    duplicates: int
    """Verdicts dropped because an earlier one judged the same case on the same conversation."""

    @property
    def side(self) -> str:
        """The side(s) scored: ``eval``, ``train``, or ``train+eval``."""
        scored = [side for side in ("train", "eval") if side in self.sides and self.sides[side].covered]
        return "+".join(scored) or "eval"

    def summary(self) -> str:
        """``held-out: 66 of 66 cases`` (plus the training side when scored, duplicates and partial)."""
        parts = [f"{SIDE_NAMES[side]}: {c.covered} of {c.cases_in_kit} cases"
                 for side, c in sorted(self.sides.items(), key=lambda item: item[0] != "eval")
                 if side == "eval" or c.covered]
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicate line{'s' * (self.duplicates != 1)} counted once")
        text = "; ".join(parts)
        return text + (" (partial: not every held-out case is scored)" if self.partial else "")


def _word(passed: bool) -> str:
    return "pass" if passed else "fail"


def distinct_verdicts(verdicts: Sequence[Scored], universe: Mapping[str, Side]) -> tuple[list[Scored], int]:
    """The first verdict of each case and how many duplicates were dropped (the rules in the module docstring).

    ``universe`` maps every case id the kit holds (of the sides that may be scored) to its side. Raises
    ScoreError for a case id not in ``universe`` and for a case judged on two different conversations,
    naming both origins. Callers that pay for each verdict may check their attempts with this first.
    """
    first: dict[str, Scored] = {}
    duplicates = 0
    for verdict in verdicts:
        if verdict.case_id not in universe:
            raise ScoreError(f"{verdict.origin}: the kit has no case {verdict.case_id!r}")
        seen = first.get(verdict.case_id)
        if seen is None:
            first[verdict.case_id] = verdict
        elif seen.conversation != verdict.conversation:
            raise ScoreError(f"{verdict.origin}: case {verdict.case_id} is already scored from {seen.origin} with "
                             "different messages; a case counts once: keep one conversation per case")
        elif seen.passed != verdict.passed:
            raise ScoreError(f"{verdict.origin}: case {verdict.case_id} is judged {_word(verdict.passed)} on the "
                             f"messages {seen.origin} was judged {_word(seen.passed)} on: the judge is not "
                             "deterministic")
        else:
            duplicates += 1
    return list(first.values()), duplicates


def score_verdicts(verdicts: Sequence[Scored], universe: Mapping[str, Side]) -> Score:
    """One score over ``verdicts``: distinct cases (:func:`distinct_verdicts`), their rate, and each side's coverage.

    ``universe`` maps every case id of the kit that could be scored to its side (for a held-out evaluation,
    the kit's held-out cases). Raises ScoreError (see :func:`distinct_verdicts`).
    """
    distinct, duplicates = distinct_verdicts(verdicts, universe)
    rate = rate_record((v.passed, v.entity) for v in distinct)
    in_kit = {side: sum(1 for s in universe.values() if s == side) for side in ("train", "eval")}
    covered = {side: sum(1 for v in distinct if universe[v.case_id] == side) for side in ("train", "eval")}
    sides: dict[Side, Coverage] = {
        side: Coverage(cases_in_kit=in_kit[side], covered=covered[side],
                       coverage=round(covered[side] / in_kit[side], 4) if in_kit[side] else 0.0)
        for side in ("train", "eval") if side == "eval" or covered[side] or in_kit[side]}
    return Score(**rate, sides=sides, partial=covered["eval"] < in_kit["eval"] or not in_kit["eval"],
                 duplicates=duplicates)


def side_universe(cases: Sequence[Any]) -> dict[str, Side]:
    """``{case_id: side}`` of kit cases (anything with ``case_id`` and ``side``)."""
    return {case.case_id: case.side for case in cases}
