"""The company job's measured results as typed records: what ``jobs show --json`` reports under ``results`` and
``replay``, and what the training service returns for a worker job (one definition, :mod:`.results` fills it).
The rates, refusal errors and deltas are eval.json's own records (:mod:`trainers.eval_record`), not copies.

:func:`blobkit.company.results.assemble_results` builds :class:`JobResults` from the stage records
(:mod:`.stage_records`); the job store and results.json keep :meth:`JobResults.to_json` (what does not apply absent),
the API the model itself (null). :func:`typed_results` and :func:`typed_replay` read the store's JSON back
(strictly: an unknown key is an error, so drift between the pipeline and these records fails a test rather than
passing silently).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trainers.eval_record import Delta, RateRecord, Refusal
from trainers.failure_kinds import FailureKinds
from trainers.pass_k import PassK


class Record(BaseModel):
    """Frozen, unknown fields refused, field docstrings as schema descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Rate(RateRecord):
    """One model's held-out evaluation as a job reports it."""

    side: str | None = None
    """The side(s) of the kit the scored cases are on: ``eval``, ``train`` or ``train+eval``."""
    cases_in_side: int | None = None
    """That side's cases in the kit."""
    coverage: float | None = None
    """Distinct cases scored / cases_in_side."""
    partial: bool | None = None
    """Whether the score leaves some of the side's cases out."""
    duplicates: int | None = None
    """Repeated case ids counted once."""

    per_template: dict[str, RateRecord] | None = None
    """The rate per task template."""
    tool_call_parse_failures: int | None = None
    """Model turns whose tool call could not be parsed."""
    refusal: Refusal | None = None
    """Refusal errors."""
    decoding: str | None = None
    """How its tool calls were decoded: ``free`` or ``constrained`` (trainers.constrained)."""
    pass_hat_k: PassK | None = None
    """k sampled attempts per case (pass^k: all pass) beside this greedy pass@1, when the run asked for them."""
    failures: FailureKinds | None = None
    """The failed cases by kind (trainers.failure_kinds)."""
    measured_by: str
    """Which stage measured it, on which model."""


class HeldOut(Record):
    """How much of the kit's held-out set the rates are over."""

    cases_in_kit: int
    """Held-out cases in the kit."""
    cases_evaluated: int
    """Held-out cases every evaluated model ran (the fewest of them)."""
    coverage: float
    """cases_evaluated / cases_in_kit."""
    case_counts_match: bool
    """Whether base, SFT and RL ran the same number of cases."""
    entities_in_kit: int | None = None
    """Independent held-out entities in the kit."""
    entities_evaluated: int | None = None
    """Independent entities the evaluated cases concern."""
    entities_minimum: int | None = None
    """Fewest independent entities a held-out rate needs to mean anything."""
    too_small: str | None = None
    """Set when the rates are over fewer entities than the minimum: why they mean little."""
    partial: bool | None = None
    """Whether the rates leave some of the kit's held-out cases out."""
    left_out_untokenizable: int | None = None
    """Held-out cases left out (and counted) because the base's tokenizer cannot write their required text."""
    partial_unexplained: str | None = None
    """Set when neither the left-out cases nor ``eval_limit`` account for the missing cases."""


class JobResults(Record):
    """A job's measured results (``results`` of ``jobs show --json``); nothing in it is re-run or invented."""

    complete: bool
    """Whether every evaluation ran (False: a stopped or failed job's partial evidence)."""
    base: Rate | None = None
    """The base model before training (measured by the SFT stage)."""
    sft: Rate | None = None
    """The reloaded SFT export."""
    sft_minus_base: Delta | None = None
    """SFT's gain over the base."""
    sft_stopped_by: str | None = None
    """What stopped SFT early (a budget, a cancel), if anything."""
    rl: Rate | None = None
    """The GRPO export."""
    rl_minus_sft: Delta | None = None
    """RL's gain over SFT on the same cases, reported separately."""
    rl_stopped_by: str | None = None
    """What stopped GRPO early, if anything."""
    sft_as_measured_by_rl: Rate | None = None
    """The RL stage's own evaluation of its SFT start, when it differs from the SFT stage's."""
    held_out: HeldOut | None = None
    """How much of the held-out set the rates cover."""

    def to_json(self) -> dict[str, Any]:
        """The results as the job store and results.json hold them: what does not apply is absent (the API's form,
        ``model_dump``, gives it as null)."""
        return dict(self.model_dump(mode="json", exclude_unset=True))


class ReplayOutcome(Record):
    """The replay of one held-out case by the export, reloaded in a fresh process."""

    outcome: Literal["passed", "failed", "error"]
    """The case's verifier verdict on the replay (error: the fresh process failed)."""
    case_id: str | None = None
    """The case replayed."""
    template: str | None = None
    """Its task template."""
    turns: int | None = None
    """Model turns the replay took."""
    tool_calls: int | None = None
    """Tool calls it made."""
    error: str | None = None
    """Why the process failed (outcome error)."""
    claims: str | None = None
    """What the replay shows, and what it does not."""


def typed_results(results: dict[str, Any]) -> JobResults:
    """A job's results as the job store holds them (:meth:`JobResults.to_json`) as :class:`JobResults`."""
    return JobResults.model_validate(results)


def typed_replay(replay: dict[str, Any] | None) -> ReplayOutcome | None:
    """A job's replay record as :class:`ReplayOutcome` (the fields people read; the rest stays in replay.json)."""
    if not replay:
        return None
    return ReplayOutcome.model_validate({k: replay.get(k) for k in ReplayOutcome.model_fields if k in replay})
