"""What each stage of a company job does; the runner (:mod:`blobkit.company.runner`) calls them in order.

``qualify`` → ``kit`` → ``sft`` → ``rl`` → ``evaluate`` → ``export`` → ``replay``

* ``qualify``: validate the source and execute the kit build in memory (minting, the gate, the split,
  the replay of every training case; :func:`~blobkit.company.inspect.qualify_source`), then write that
  kit into the job directory. A job builds its kit once.
* ``kit``: open the written kit (every file against kit.json), re-execute its probes and replays
  (:func:`blobkit.verify.verify_kit`), freeze the training and held-out cases, and prepare the base:
  with ``--base-model tiny`` the tiny model built from the kit's text.
* ``sft``: ``trainers.run.run_training`` with ``config.sft`` (it evaluates the base and the reloaded SFT
  export on the held-out cases).
* ``rl``: ``run_training`` with ``config.rl``, warm-started from the SFT export (it evaluates SFT and RL
  on the same held-out cases and reports ``rl_minus_sft``).
* ``evaluate``: gather the measured base/SFT/RL results and held-out coverage (:mod:`.results`).
* ``export``: verify the RL export's checksums and copy it into the job directory.
* ``replay``: replay one held-out case with the export reloaded in a fresh process (:mod:`.replay`).

A stage's ``TrainConfig`` is the composed one with only :data:`RUN_FIELDS` filled in (:func:`run_config`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from blobkit.builder import write_kit
from blobkit.errors import NotTrainableError, TrainerError
from trainers.config import TrainConfig
from trainers.eval_record import GRPOReport, SFTReport, TrainingReport
from trainers.plan_record import BaseRecord, Tokenized
from world_format.canonical import file_sha256, fsync_dir, replace_dir, staging_dir
from world_format.kit import Kit, open_kit

from .budget import JobBudget, replay_worst_case, rl_calls, sft_calls
from .config import TARGET, TINY, CompanyConfig
from .identity import checked_source
from .inspect import qualify_source
from .replay import replay_export, replay_summary, run_spawned
from .results import SMALL_HELD_OUT, assemble_results
from .stage_records import (
    Admission,
    BuildRecord,
    ExportStage,
    FrozenKit,
    HeldOutSize,
    KitStage,
    KitVerification,
    Leakage,
    PlannedRun,
    PreparedBase,
    QualifyStage,
    ReplayStopped,
    SourceWorld,
    StageRecord,
    TrainingStage,
)
from .store import JobStore

CHECKS = ("source_valid", "trainable", "kit_leakage_free", "kit_verified", "sft_updates_applied",
          "sft_beats_base", "rl_updates_applied", "rl_beats_sft", "heldout_evaluated", "export_verified",
          "replay_passed")
"""Every check a job reports, in order; each is passed, failed or not_run."""
RUN_FIELDS = frozenset({"kit", "base", "revision", "out", "method", "target", "init_adapter", "max_model_calls",
                        "max_minutes"})
"""The TrainConfig fields a stage fills in: where it runs (kit, base, output folder, method, target, warm start)
and the budget the job has left. Every other training setting comes from the composed config unchanged."""


Finished = TypeVar("Finished", QualifyStage, KitStage)

PROGRESS_EVERY_S = 10.0
"""Seconds between two progress events of a stage that reports its own progress (building, verifying a kit)."""


class StageStopped(Exception):  # noqa: N818 - a stop, not an error: the runner ends the job as a budget or cancel does
    """Raised inside a stage at a safe point when the job must stop (its time budget, a cancel, Ctrl-C)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class StageOutcome:
    """What a stage produced."""

    record: StageRecord
    artifacts: dict[str, Path] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    calls_exact: bool = True
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    stopped_by: str | None = None


@dataclass
class StageContext:
    """What a stage may read and call: the job, its config, the records of finished stages, the budget."""

    store: JobStore
    job_id: str
    identity: dict[str, Any]
    config: CompanyConfig
    records: dict[str, StageRecord]
    """The records of the finished stages, by stage."""
    budget: JobBudget
    stop: Callable[..., str | None]
    """Why the job must stop now, or None; ``stop(force=True)`` polls the store at once."""
    log: Callable[[str], Callable[[str], None]]
    """``log(stage)``: a trainer ``log`` callable that records each line as an event of ``stage``."""

    @property
    def dir(self) -> Path:
        """The job's artifact directory."""
        return self.store.job_dir(self.job_id)

    def record(self, stage: str, kind: type[Finished]) -> Finished:
        """The record of a finished ``stage``; TrainerError when it has not run (or left another kind of record)."""
        found = self.records.get(stage)
        if not isinstance(found, kind):
            raise TrainerError(f"stage {stage} has not completed (its {kind.__name__} is needed here)")
        return found

    @property
    def kit_dir(self) -> Path:
        """The kit the qualify stage wrote."""
        return Path(self.record("qualify", QualifyStage).build.kit.path)

    def eval_cases(self) -> int:
        """Held-out cases in the frozen kit (0 before the kit stage)."""
        kit = self.records.get("kit")
        return kit.frozen.eval_cases if isinstance(kit, KitStage) else 0


def stage_progress(ctx: StageContext, stage: str) -> Callable[[str, int, int], None]:
    """A build/verify ``progress(step, done, total)`` that is a safe point of ``stage``: it raises StageStopped
    once the job must stop, and records ``step done/total`` as an event when the step changes and every
    :data:`PROGRESS_EVERY_S` seconds, so a long stage is never silent."""
    import time

    at, steps = [float("-inf")], [""]

    def update(step: str, done: int, total: int) -> None:
        reason = ctx.stop()
        if reason:
            raise StageStopped(reason)
        now = time.monotonic()
        if step != steps[0] or now - at[0] >= PROGRESS_EVERY_S or done == total:
            at[0], steps[0] = now, step
            ctx.log(stage)(f"{step} {done}/{total}")

    return update


def run_config(composed: TrainConfig, **run: Any) -> TrainConfig:
    """``composed`` with only :data:`RUN_FIELDS` filled in (validated again, as the trainers receive it)."""
    unknown = sorted(set(run) - RUN_FIELDS)
    if unknown:
        raise ValueError(f"a stage fills in run fields only, not {unknown}")
    return TrainConfig.model_validate({**composed.model_dump(), **run})


# --------------------------------------------------------------------------- qualify and kit


def _qualified(report: dict[str, Any], build: dict[str, Any]) -> QualifyStage:
    """The qualify record: the inspection's verdict, world and admission, the held-out size (and whether the job
    waived its minimum), and the kit written."""
    admission = Admission.model_validate(report["admission"])
    entities = admission.independent_entities
    held_out = HeldOutSize(entities=entities.eval, minimum=entities.eval_minimum, needed=entities.eval_needed,
                           minimum_waived=bool(report.get("held_out_minimum_waived")))
    return QualifyStage(verdict=report["verdict"], world=SourceWorld.model_validate(report["world"]),
                        admission=admission, held_out=held_out, build=BuildRecord.model_validate(build))


def stage_qualify(ctx: StageContext) -> StageOutcome:
    report, built = qualify_source(checked_source(ctx.identity), ctx.config.build, ctx.config.allow_small_held_out,
                                   stage_progress(ctx, "qualify"))
    path = ctx.store.write_json_artifact(ctx.job_id, "inspection.json", report)
    ctx.store.set_check(ctx.job_id, "source_valid", "passed" if report["valid"] else "failed",
                        "; ".join(report["reasons"]) or report["kind"])
    waived = bool(report.get("held_out_minimum_waived"))
    if report["valid"]:
        ctx.store.set_check(ctx.job_id, "trainable", "passed" if report["trainable"] else "failed",
                            report["verdict"] + (f"; {SMALL_HELD_OUT}: trained anyway (allow_small_held_out)"
                                                 if waived else ""))
    if built is None:
        raise NotTrainableError(f"{report['verdict']}: {'; '.join(report['reasons'])}")
    if waived:
        ctx.log("qualify")(f"{SMALL_HELD_OUT}: {report['reasons'][-1]}; training anyway because "
                           "allow_small_held_out is set")
    record = _qualified(report, write_kit(built, ctx.dir / "kit"))
    artifacts = {"inspection": path, "kit": Path(record.build.kit.path) / "kit.json",
                 "kit_archive": Path(record.build.kit.archive)}
    return StageOutcome(record, artifacts)


def _prepare_base(ctx: StageContext, kit: Kit) -> PreparedBase:
    """The base model: the tiny model built from the kit's text, or the catalog/local model."""
    base = ctx.identity["base_model"]
    if base["id"] != TINY:
        return PreparedBase(source=base["source"], name_or_path=base["name_or_path"], revision=base["revision"])
    from trainers.tiny_model import build_tiny_model, row_texts

    out = build_tiny_model(row_texts(kit.rows()), ctx.dir / "base", ctx.config.tiny)
    weights = file_sha256(out / "model.safetensors")
    return PreparedBase(source=TINY, name_or_path=str(out), revision=f"tiny-sha256:{weights}")


def _verified(verification: dict[str, Any], archive_ok: bool) -> tuple[bool, str]:
    """The kit_verified check: every file matches kit.json, every probe and replay re-executes identically."""
    problems = verification["mismatches"] + ([] if archive_ok else ["the kit archive changed since qualify wrote it"])
    if problems:
        return False, f"{len(problems)} problem(s): {'; '.join(problems[:3])}"
    return True, (f"every file matches kit.json; {verification['tasks_checked']} probe matrices, "
                  f"{verification['train_cases_replayed']} training replays and {verification['eval_cases_checked']} "
                  "held-out cases re-executed identically; the archive is the one qualify wrote")


def stage_kit(ctx: StageContext) -> StageOutcome:
    from blobkit.verify import verify_kit

    build = ctx.record("qualify", QualifyStage).build
    with open_kit(ctx.kit_dir) as kit:
        verification = verify_kit(kit, stage_progress(ctx, "kit"))
        leakage = Leakage.model_validate(kit.meta["leakage"])
        frozen = FrozenKit(train_cases=build.train_cases, eval_cases=build.eval_cases, kit_sha256=kit.sha256,
                           train_cases_sha256=file_sha256(kit.path("train_cases.jsonl")),
                           eval_cases_sha256=file_sha256(kit.path("eval_cases.jsonl")), leakage=leakage)
        base = _prepare_base(ctx, kit)
    archive_ok = file_sha256(Path(build.kit.archive)) == build.kit.sha256
    path = ctx.store.write_json_artifact(ctx.job_id, "kit_verification.json", verification)
    artifacts = {"verification": path}
    if base.source == TINY:
        artifacts["base_weights"] = Path(base.name_or_path) / "model.safetensors"
    shared, leaked = leakage.shared_entities, leakage.held_out_identifiers_in_training
    checks = {"kit_leakage_free": (shared == 0 and leaked == 0,
                                   f"{shared} entities shared between train and held-out, {leaked} held-out "
                                   "identifiers in training rows"),
              "kit_verified": _verified(verification, archive_ok)}
    checked = KitVerification.model_validate({k: verification[k] for k in KitVerification.model_fields})
    record = KitStage(verification=checked, frozen=frozen, base=base)
    return StageOutcome(record, artifacts, checks=checks)


# --------------------------------------------------------------------------- training


def _train_config(ctx: StageContext, stage: str, **budget: Any) -> TrainConfig:
    """The stage's TrainConfig: ``config.sft`` or ``config.rl`` with the run's location (and ``budget``) filled in."""
    base = ctx.record("kit", KitStage).base
    composed, method = (ctx.config.sft, "sft") if stage == "sft" else (ctx.config.rl, "grpo")
    return run_config(composed, kit=ctx.kit_dir, base=base.name_or_path, method=method, target=TARGET,
                      revision=base.revision if base.source == "hub" else None, out=ctx.dir / stage, **budget)


def _train(ctx: StageContext, stage: str, config: TrainConfig) -> tuple[PlannedRun, TrainingReport]:
    """Plan then run one training method on the kit (the trainers write their own artifacts): what the stage
    record keeps of the plan, and the run's report."""
    from trainers.plan import plan
    from trainers.run import run_training

    with open_kit(ctx.kit_dir) as kit:
        rows = kit.rows()
        plan_record = plan(config, kit, rows, kit.path("sft.jsonl"))
        report = run_training(config, kit, rows, plan_record, ctx.log(stage), ctx.stop)
    return PlannedRun(rows=plan_record.rows, tokens=plan_record.tokens, base=plan_record.base,
                      estimated_optimizer_steps=plan_record.estimated_optimizer_steps), report


def _training_artifacts(config: TrainConfig) -> dict[str, Path]:
    return {"plan": config.out / "plan.json", "eval": config.out / "eval.json",
            "export": config.out / "export" / "manifest.json"}


def stage_sft(ctx: StageContext) -> StageOutcome:
    config = _train_config(ctx, "sft")
    planned, report = _train(ctx, "sft", config)
    if not isinstance(report, SFTReport):
        raise TrainerError(f"the SFT stage reported a {type(report).__name__}")
    calls, exact = sft_calls(report)
    updates = report.optimizer_updates
    tokens = planned.tokens.tokens if isinstance(planned.tokens, Tokenized) else 0
    steps_per_epoch = -(-planned.rows // config.batch_size)
    usage = {"model_calls": calls, "optimizer_updates": updates, "tokens": round(tokens * updates / steps_per_epoch)}
    gain = round(report.sft.pass_rate - report.base.pass_rate, 4)
    checks = {"sft_updates_applied": (updates > 0, f"{updates} optimizer updates"),
              "sft_beats_base": (gain > 0, f"SFT {report.sft.pass_rate} vs base {report.base.pass_rate} "
                                           f"on {report.sft.cases} held-out cases")}
    record = TrainingStage(plan=planned, report=report, model_calls=calls, model_calls_exact=exact)
    return StageOutcome(record, _training_artifacts(config), usage, exact, checks, report.stopped_by)


def stage_rl(ctx: StageContext) -> StageOutcome:
    rollout_calls = ctx.budget.rollout_allowance(ctx.config, ctx.eval_cases())
    config = _train_config(ctx, "rl", init_adapter=ctx.dir / "sft" / "export", max_model_calls=rollout_calls,
                           max_minutes=ctx.budget.minutes_left())
    planned, report = _train(ctx, "rl", config)
    if not isinstance(report, GRPOReport) or report.rl_minus_sft is None:
        raise TrainerError("the RL stage reported no rl_minus_sft (GRPO did not start from the SFT export)")
    updates = report.optimizer_updates
    calls, exact = rl_calls(report)
    usage = {"model_calls": calls, "optimizer_updates": updates, "tokens": 0}
    delta = report.rl_minus_sft
    checks = {"rl_updates_applied": (updates > 0, f"{updates} optimizer updates in {report.steps_completed} steps"),
              "rl_beats_sft": (delta.pass_rate > 0, f"rl_minus_sft {delta.pass_rate} on {delta.cases} "
                                                    "held-out cases")}
    record = TrainingStage(plan=planned, report=report, model_calls=calls, model_calls_exact=exact,
                           rollout_model_calls_allowed=rollout_calls)
    return StageOutcome(record, _training_artifacts(config), usage, exact, checks, report.stopped_by)


# --------------------------------------------------------------------------- evaluate, export, replay


def stage_evaluate(ctx: StageContext) -> StageOutcome:
    results = assemble_results(ctx.records, complete=True)
    path = ctx.store.write_json_artifact(ctx.job_id, "results.json", results.to_json())
    ctx.store.set_results(ctx.job_id, results)
    held_out = results.held_out
    if held_out is None:
        raise TrainerError("the job's models were not evaluated on held-out cases (no base, SFT or RL rate)")
    ok = held_out.case_counts_match and held_out.cases_evaluated > 0 and held_out.partial_unexplained is None
    detail = (f"base, SFT and RL each ran {held_out.cases_evaluated} of {held_out.cases_in_kit} "
              "held-out cases" if ok else held_out.partial_unexplained
              or "the models were not evaluated on the same held-out cases")
    if held_out.partial:
        detail += (f" (partial: {held_out.left_out_untokenizable} left out as untokenizable"
                   f"{', the rest by eval_limit' if held_out.partial_unexplained is None else ''})")
    return StageOutcome(results, {"results": path}, checks={"heldout_evaluated": (ok, detail)})


def _copy_durable(source: Path, target: Path) -> None:
    """Copy a file and fsync it (the folder is fsynced by the caller's rename)."""
    shutil.copyfile(source, target)
    with open(target, "rb") as handle:
        os.fsync(handle.fileno())


def stage_export(ctx: StageContext) -> StageOutcome:
    from trainers.export import verify_export

    source, target = ctx.dir / "rl" / "export", ctx.dir / "export"
    verify_export(source)
    staging = staging_dir(target)
    try:
        for path in sorted(source.iterdir()):
            _copy_durable(path, staging / path.name)
        fsync_dir(staging)
        replace_dir(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    manifest = verify_export(target)
    record = ExportStage(path=str(target), kind=manifest["kind"], base=BaseRecord.model_validate(manifest["base"]),
                         kit_sha256=manifest["kit_sha256"], files=len(manifest["files"]))
    checks = {"export_verified": (True, f"{len(manifest['files'])} files match manifest.json")}
    return StageOutcome(record, {"export": target / "manifest.json"}, checks=checks)


def stage_replay(ctx: StageContext) -> StageOutcome:
    export, turns = ctx.dir / "export", replay_worst_case(ctx.config)
    run = run_spawned(replay_export, (export, ctx.kit_dir, turns), ctx.stop)
    if run.stopped_by:
        return StageOutcome(ReplayStopped(replay="killed", pid=run.pid), stopped_by=run.stopped_by)
    reason = ctx.stop(force=True) if run.error else None
    if reason:  # the child died of the Ctrl-C that cancels the job
        return StageOutcome(ReplayStopped(replay="interrupted", pid=run.pid), stopped_by=reason)
    replay = replay_summary(run, f"trainers.replay.replay_case({export}, {ctx.kit_dir}, max_turns={turns})")
    path = ctx.store.write_json_artifact(ctx.job_id, "replay.json", {**replay.to_json(), "episode": run.value})
    ctx.store.set_replay(ctx.job_id, replay)
    detail = f"case {replay.case_id}: {replay.outcome}" + (f" ({replay.error})" if replay.error else "")
    return StageOutcome(replay, {"replay": path}, {"model_calls": turns if replay.turns is None else replay.turns},
                        replay.turns is not None, {"replay_passed": (replay.outcome == "passed", detail)})


STAGE_FUNCTIONS: dict[str, Callable[[StageContext], StageOutcome]] = {
    "qualify": stage_qualify, "kit": stage_kit, "sft": stage_sft, "rl": stage_rl, "evaluate": stage_evaluate,
    "export": stage_export, "replay": stage_replay}
"""Every stage, in the order a job runs them."""
STAGES = tuple(STAGE_FUNCTIONS)
