"""The company job's stage records as typed records: what each stage of :mod:`.stages` returns and the job store
checkpoints, one definition for every reader (the stages after it, :mod:`.results`, the runner, the worker).

``qualify`` → :class:`QualifyStage`, ``kit`` → :class:`KitStage`, ``sft``/``rl`` → :class:`TrainingStage`,
``evaluate`` → the job's results (:class:`~blobkit.company.records.JobResults`), ``export`` →
:class:`ExportStage`, ``replay`` → :class:`ReplayStage` (or :class:`ReplayStopped`, the partial evidence of a
replay that was stopped). Each serialises to exactly the JSON the stages wrote before these records existed: a field
named in ``_omitted`` is absent when it does not apply (:class:`~trainers.record.Record`). :func:`stage_record`
reads a checkpointed record back, and says plainly when a store written by another blobkit version holds one this
blobkit cannot read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from blobkit.errors import JobError
from trainers.eval_record import TrainingReport
from trainers.plan_record import BaseRecord, NotTokenized, Tokenized
from trainers.record import Record

from .records import JobResults, ReplayOutcome

# --------------------------------------------------------------------------- qualify


class SourceWorld(Record):
    """The world a job's source is (the inspection's ``world``)."""

    id: str
    """The world's identity id."""
    name: str
    """Its name."""
    sha256: str
    """The world's content sha256."""
    form: str
    """Its on-disk form (a single ``world.json`` or a packaged directory)."""


class RejectedTask(Record):
    """A candidate task the gate rejected."""

    task_id: str
    """The task's id."""
    template: str
    """Its template."""
    reasons: list[str]
    """Why the gate rejected it."""


class SideCounts(Record):
    """Independent anchor families on each side of the split."""

    train: int
    """On the training side."""
    eval: int
    """On the held-out side."""
    shared: int
    """On both (must be 0)."""


class EntityCounts(SideCounts):
    """Independent entities on each side, and the held-out minimum."""

    _omitted = frozenset({"eval_available", "rows_needed"})
    eval_minimum: int
    """Fewest held-out entities a trainable kit needs."""
    eval_needed: int
    """How many more it needs (0: enough)."""
    eval_available: int | None = None
    """Held-out entities the world's rows could give at most (only when the held-out side is too small)."""
    rows_needed: int | None = None
    """Anchor rows the world needs for the minimum (only when the held-out side is too small)."""


class ToolCoverage(Record):
    """How much of the kit exercises one declared tool."""

    _omitted = frozenset({"reason"})
    cases: int
    """Admitted cases whose reference chain calls it."""
    rows: int
    """Training rows with a call of it."""
    reason: str | None = None
    """Why no case calls it (only then)."""


class Admission(Record):
    """What minting and the gate admitted (the inspection's ``admission``)."""

    tasks_admitted: int
    """Tasks admitted."""
    tasks_minted: int
    """Candidate tasks minted from the tools and anchors."""
    tasks_authored: int
    """Candidate tasks the world authored."""
    tasks_rejected: int
    """Candidates the gate rejected."""
    templates: list[str]
    """Templates of the admitted tasks, sorted."""
    rejected: list[RejectedTask]
    """Each rejected candidate and why."""
    train_cases: int
    """Training cases."""
    eval_cases: int
    """Held-out cases."""
    sft_rows: int
    """Training rows."""
    independent_families: SideCounts
    """Anchor families per side."""
    independent_entities: EntityCounts
    """Entities per side, and the held-out minimum."""
    held_out_identifiers_in_training: int
    """Held-out identifiers stated in training rows (must be 0)."""
    tool_coverage: dict[str, ToolCoverage]
    """Per declared tool: the cases and rows that call it."""


class HeldOutSize(Record):
    """The held-out side's size as qualify found it, and whether the job waived the minimum."""

    entities: int
    """Independent held-out entities."""
    minimum: int
    """The minimum a pass rate needs."""
    needed: int
    """How many more it needs (0: enough)."""
    minimum_waived: bool
    """Whether the job trains below the minimum anyway (``allow_small_held_out``)."""


class KitLocation(Record):
    """The kit qualify wrote: its folder and its archive, pinned by sha256."""

    path: str
    """The kit folder."""
    archive: str
    """The kit's ``.tar.zst`` archive."""
    sha256: str
    """The archive's sha256."""
    bytes: int
    """The archive's size."""


class BuildRecord(Record):
    """The kit build's record (:func:`blobkit.builder.write_kit`; kit.json's ``record`` plus where it is)."""

    status: Literal["kit_ready"]
    """The kit is built."""
    tasks_count: int
    """Tasks admitted."""
    tasks_minted: int
    """Candidate tasks minted."""
    tasks_authored: int
    """Candidate tasks the world authored."""
    tasks_rejected: int
    """Candidates rejected."""
    tasks_persisted: bool
    """Whether tasks were written back to the world (never)."""
    sft_rows: int
    """Training rows."""
    sft_rows_dropped: int
    """Training cases without a row."""
    sft_source: str
    """Where the rows come from (the executed reference chains)."""
    train_cases: int
    """Training cases."""
    train_cases_withheld: int
    """Training cases withheld because they state a held-out identifier."""
    eval_cases: int
    """Held-out cases."""
    tool_coverage: dict[str, ToolCoverage]
    """Per declared tool: the cases and rows that call it."""
    kit: KitLocation
    """Where the kit is."""


class QualifyStage(Record):
    """The record of the ``qualify`` stage: the verdict, the world, what was admitted, and the kit written."""

    verdict: str
    """The inspection's verdict (``trainable: …``, or why not)."""
    world: SourceWorld
    """The world."""
    admission: Admission
    """What minting and the gate admitted."""
    held_out: HeldOutSize
    """The held-out side's size."""
    build: BuildRecord
    """The kit written into the job directory."""


# --------------------------------------------------------------------------- kit


class KitVerification(Record):
    """What :func:`blobkit.verify.verify_kit` re-executed (kit_verification.json holds the mismatches too)."""

    verified: bool
    """No mismatch."""
    tasks_checked: int
    """Probe matrices re-executed."""
    train_cases_replayed: int
    """Training replays re-executed."""
    eval_cases_checked: int
    """Held-out cases re-checked."""


class Leakage(Record):
    """kit.json's ``leakage``: what the split's sides share (entities and anchors, and held-out identifiers in
    training rows: each must be 0) and the most similar instruction pair (:func:`blobkit.builder.leakage`)."""

    shared_entities: int
    """Entities rows of both sides touch."""
    train_entities: int
    """Independent entities of the training cases."""
    eval_entities: int
    """Independent entities of the held-out cases."""
    shared_anchors: int
    """Anchor rows both sides touch."""
    train_anchors: int
    """Anchor rows the training cases touch."""
    eval_anchors: int
    """Anchor rows the held-out cases touch."""
    held_out_identifiers: int
    """Identifiers the held-out cases state."""
    held_out_identifiers_in_training: int
    """Of those, stated in a training row."""
    held_out_cases_with_identifiers_in_training: int
    """Held-out cases one of whose identifiers a training row states."""
    identifier_examples: list[str]
    """Up to 5 such identifiers, with their case."""
    identifier_rule: str
    """What counts as an identifier."""
    entity_rule: str
    """What an entity is."""
    max_instruction_similarity: float
    """Highest similarity of a training and a held-out instruction."""
    similarity_measure: str
    """How similarity is measured."""


class FrozenKit(Record):
    """The cases a job trains and evaluates on, frozen by sha256 when the kit was verified."""

    train_cases: int
    """Training cases."""
    eval_cases: int
    """Held-out cases."""
    kit_sha256: str
    """The kit's sha256 (kit.json's)."""
    train_cases_sha256: str
    """sha256 of train_cases.jsonl."""
    eval_cases_sha256: str
    """sha256 of eval_cases.jsonl."""
    leakage: Leakage
    """What the sides share."""


class PreparedBase(Record):
    """The base the training stages start from: the catalog's or a local model, or the tiny model built from the
    kit's text."""

    source: Literal["hub", "local", "registry", "tiny"]
    """Where it comes from (``tiny``: built in the job directory)."""
    name_or_path: str
    """The hub id, or the directory the weights are in."""
    revision: str | None
    """The hub revision, or ``tiny-sha256:`` and the tiny weights' sha256."""


class KitStage(Record):
    """The record of the ``kit`` stage: the kit re-verified, its cases frozen, the base prepared."""

    verification: KitVerification
    """What was re-executed."""
    frozen: FrozenKit
    """The frozen cases."""
    base: PreparedBase
    """The base."""


# --------------------------------------------------------------------------- sft and rl


class PlannedRun(Record):
    """What a training stage keeps of its plan.json (the whole plan is the stage's ``plan`` artifact)."""

    rows: int
    """Training rows."""
    tokens: Tokenized | NotTokenized
    """Their token counts, when the base's tokenizer is here."""
    estimated_optimizer_steps: int
    """Optimizer steps the plan expects."""
    base: BaseRecord
    """Where the base comes from."""


class TrainingStage(Record):
    """The record of the ``sft`` or ``rl`` stage of a company job, as the job store keeps it."""

    _omitted = frozenset({"rollout_model_calls_allowed"})
    plan: PlannedRun
    """The plan's figures."""
    report: TrainingReport
    """The run's eval.json."""
    model_calls: int
    """Model calls the stage made (its evaluations, and GRPO's rollouts)."""
    model_calls_exact: bool
    """Whether ``model_calls`` is counted (else an upper bound)."""
    rollout_model_calls_allowed: int | None = None
    """The rl stage: the rollout calls the job's budget allowed it."""


# --------------------------------------------------------------------------- export and replay


class ExportStage(Record):
    """The record of the ``export`` stage: the RL export, verified and copied into the job directory."""

    path: str
    """The copied export."""
    kind: str
    """The export's kind (``lora`` or ``full``)."""
    base: BaseRecord
    """The base it was trained from (its manifest's)."""
    kit_sha256: str
    """The kit it was trained on."""
    files: int
    """Files its manifest lists."""


class ReplayVerdict(Record):
    """The case's VCode verdict on the replay (:class:`world_format.vcode.Verdict`)."""

    outcome: Literal["pass", "fail", "error"]
    """The verdict."""
    reason: str
    """Why it is not a pass ("" for a pass)."""
    checks: list[str]
    """The checks that ran."""


class ReplayStage(ReplayOutcome):
    """The record of the ``replay`` stage (and the job's ``replay``): how the fresh process ran and what the
    replayed case's verifier said (replay.json adds the whole episode)."""

    fresh_process: Literal[True]
    """The export was reloaded in a new interpreter."""
    start_method: Literal["spawn"]
    """How that interpreter was started."""
    pid: int | None
    """Its process id."""
    exitcode: int | None
    """Its exit code."""
    call: str
    """The call it ran."""
    claims: str
    """What the replay shows, and what it does not."""
    verdict: ReplayVerdict | None = None
    """The verifier's verdict (absent when the process failed)."""
    answer: str | None = None
    """The model's answer, its first :data:`~blobkit.company.replay.ANSWER_CHARS` characters."""
    model_kind: str | None = None
    """The export's kind."""

    def to_json(self) -> dict[str, Any]:
        """The record as the job store holds it: the fields that do not apply to its outcome absent."""
        return dict(self.model_dump(mode="json", exclude_unset=True))


class ReplayStopped(Record):
    """What a stopped replay leaves (never checkpointed: the partial evidence of a cancelled or timed-out job)."""

    replay: Literal["killed", "interrupted"]
    """``killed``: stopped by a cancel or budget; ``interrupted``: the Ctrl-C that cancels the job ended it."""
    pid: int | None
    """The fresh process's id."""


StageRecord = QualifyStage | KitStage | TrainingStage | JobResults | ExportStage | ReplayStage | ReplayStopped
"""Any stage's record."""

STAGE_RECORDS: dict[str, type[QualifyStage | KitStage | TrainingStage | JobResults | ExportStage | ReplayStage]] = {
    "qualify": QualifyStage, "kit": KitStage, "sft": TrainingStage, "rl": TrainingStage, "evaluate": JobResults,
    "export": ExportStage, "replay": ReplayStage}
"""The record each stage checkpoints, by stage."""


def stage_record(stage: str, record: Any, job_id: str) -> StageRecord:
    """A checkpointed record of ``stage`` read back as its typed record; JobError naming the job, the stage and the
    first problem when it is not one this blobkit reads (a store written by another blobkit version)."""
    try:
        return STAGE_RECORDS[stage].model_validate(record)
    except ValidationError as exc:
        where = ".".join(map(str, exc.errors()[0]["loc"])) or "(the record)"
        raise JobError(f"job {job_id}: the checkpointed record of stage {stage} is not one this blobkit reads "
                       f"({exc.error_count()} problem(s), first at {where}: {exc.errors()[0]['msg']}); it was "
                       "probably written by another blobkit version: create a new job") from None
