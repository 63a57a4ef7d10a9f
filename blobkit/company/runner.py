"""Running a job: claim it, run every stage not yet checkpointed, and end it with one outcome.

Each completed stage is checkpointed with its record and artifacts (pinned by sha256), so a resumed
job never redoes a finished stage, and refuses to go on when a finished stage's artifacts changed.
Cancellation (``jobs cancel``, Ctrl-C) and the time budget are seen through :meth:`Runner.stop`,
which the trainers poll at every optimizer step, the kit build and verification at every progress
report (:func:`.stages.stage_progress`, which also records progress events), and the runner at
every stage boundary; the
model-call budget is checked before each stage against its worst case (:mod:`.budget`). A job
ends ``succeeded``, ``failed`` (an error, or a budget ran out) or ``cancelled``; completed stages
and the partial evidence of the stopped one are kept either way.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from blobkit.errors import JobError
from trainers.episode_limit import longest_case
from world_format.kit import open_kit

from .budget import BUDGETS, JobBudget
from .config import CompanyBudgets, CompanyConfig, with_turn_caps
from .identity import job_identity
from .results import assemble_results
from .stage_records import ReplayStage, StageRecord, stage_record
from .stages import CHECKS, STAGE_FUNCTIONS, STAGES, StageContext, StageOutcome, StageStopped
from .store import JobStore
from .workers import HEARTBEAT_S, worker_id

POLL_S = 0.5
"""Seconds between two reads of the store (cancel requests, heartbeat) while the job runs."""
Echo = Callable[[str], None]


def create_job(store: JobStore, source: Path, base_model: str, config: CompanyConfig,
               revision: str | None = None) -> str:
    """Queue a job for ``source`` on ``base_model``; return its id."""
    return store.create_job(job_identity(source, base_model, config, revision), CHECKS)


def job_config(job: dict[str, Any]) -> CompanyConfig:
    """The config a job was created with."""
    try:
        return CompanyConfig.model_validate(job["identity"]["config"])
    except ValidationError as exc:
        raise JobError(f"job {job['id']}: its config is not one this blobkit can run ({exc.error_count()} "
                       f"problem(s), first at {'.'.join(map(str, exc.errors()[0]['loc']))}); it was probably created "
                       "by another blobkit version: create a new job") from None


def run_job(store: JobStore, job_id: str, echo: Echo | None = None) -> dict[str, Any]:
    """Run or resume a job in this process until it succeeds, fails, is cancelled or runs out of budget.

    Returns the final job record. Ctrl-C (when called from the main thread) cancels at the next safe
    point; a second Ctrl-C stops at once (the job is still marked cancelled, then KeyboardInterrupt).
    """
    job_config(store.get(job_id))
    worker = worker_id()
    store.claim(job_id, worker)
    Runner(store, job_id, worker, echo or (lambda line: None)).run()
    return store.get(job_id)


class Runner:
    """Runs the stages of one claimed job; every state change goes to the store."""

    def __init__(self, store: JobStore, job_id: str, worker: str, echo: Echo) -> None:
        job = store.get(job_id)
        self.store, self.job_id, self.worker, self.echo = store, job_id, worker, echo
        self.config = job_config(job)
        raised = job["budgets"]
        if raised["raised"]:  # a resume raised them (jobs resume --max-minutes/--max-model-calls)
            self.config = self.config.model_copy(update={"budgets": CompanyBudgets(
                max_minutes=raised["max_minutes"], max_model_calls=raised["max_model_calls"])})
        self.budget = JobBudget(self.config.budgets, float(job["usage"]["active_seconds"]),
                                int(job["usage"]["model_calls"]))
        self.records: dict[str, StageRecord] = {}
        self.context = StageContext(store, job_id, job["identity"], self.config, self.records, self.budget,
                                    self.stop, self.log)
        self.interrupted = False
        self.stage = "job"
        self._polled_at = float("-inf")
        self._cancel: str | None = None

    # ------------------------------------------------------------------ events, stop, Ctrl-C

    def say(self, stage: str, message: str, level: str = "info", data: Any = None) -> None:
        """Record a progress event and echo it."""
        self.store.add_event(self.job_id, stage, level, message, data)
        self.echo(f"[{stage}] {message}")

    def log(self, stage: str) -> Echo:
        """A trainer ``log`` callable that records each line as an event."""
        return lambda line: self.say(stage, line)

    def stop(self, force: bool = False) -> str | None:
        """Why the job must stop now (cancel, Ctrl-C, time budget), else None; also the heartbeat."""
        now = time.monotonic()
        if force or now - self._polled_at >= POLL_S:
            self._polled_at = now
            if not self.store.heartbeat(self.job_id, self.worker, self.budget.active_seconds()):
                self._cancel = "another worker took the job over"
            else:
                self._cancel = self._cancel or self.store.cancel_reason(self.job_id)
        if self.interrupted:
            return "cancelled: interrupted (Ctrl-C)"
        if self._cancel:
            return f"cancelled: {self._cancel}"
        return "max_minutes" if self.budget.out_of_time() else None

    @contextmanager
    def _sigint(self) -> Iterator[None]:
        """First Ctrl-C: cancel at the next safe point; second: stop at once (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            self.echo("interrupted: cancelling at the next safe point (Ctrl-C again to stop at once)")

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextmanager
    def _heartbeat(self) -> Iterator[None]:
        """Heartbeat every HEARTBEAT_S seconds from a thread (its own store connection), through stages that poll
        nothing for minutes (a kit build, an evaluation), so liveness never depends on a process id."""
        done = threading.Event()

        def beat() -> None:
            with JobStore(self.store.root, create=False) as own:
                while not done.wait(HEARTBEAT_S):
                    own.touch(self.job_id, self.worker)

        thread = threading.Thread(target=beat, name=f"heartbeat-{self.job_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Run every stage not yet checkpointed, then finish the job."""
        try:
            with self._sigint(), self._heartbeat():
                self._run_stages()
        except KeyboardInterrupt:
            self._end("cancelled", self.stage, "cancelled: interrupted (Ctrl-C twice)",
                      f"interrupted during {self.stage}; the stage is redone on resume")
            raise

    def _run_stages(self) -> None:
        done = self.store.checkpoints(self.job_id)
        for position, stage in enumerate(STAGES):
            self.stage = stage
            if "qualify" in self.records:
                self._resolve_turn_caps()
            if stage in done:
                if not self._skip(stage, done[stage]):
                    return
                continue
            reason = self.stop(force=True) or self._model_calls_short(stage)
            if reason:
                self._end_stopped(stage, reason, None)
                return
            if not self._run_stage(position, stage):
                return
        replay = self.records["replay"]
        assert isinstance(replay, ReplayStage)  # a completed replay stage's record (a stopped one ends the job)
        self._end("succeeded", None, None, f"every stage completed; the replay {replay.outcome}")

    def _resolve_turn_caps(self) -> None:
        """Once the kit exists, derive the stages' unset turn caps from its longest case (the stages, the budget
        checks and the replay read ``context.config``)."""
        if self.context.config.sft.max_turns is not None and self.context.config.rl.max_turns is not None:
            return
        with open_kit(self.context.kit_dir) as kit:
            self.context.config = with_turn_caps(self.context.config, longest_case(kit)[1])

    def _skip(self, stage: str, checkpoint: dict[str, Any]) -> bool:
        """Reuse a checkpointed stage; False (job failed) when its artifacts changed since, or when its record is
        not one this blobkit reads (:func:`.stage_records.stage_record`)."""
        stale = self.store.stale_artifacts(self.job_id, stage)
        if stale:
            self._end_failed(stage, JobError(f"stage {stage} was checkpointed but its artifacts changed since: "
                                             f"{', '.join(stale)}; start a new job"))
            return False
        try:
            self.records[stage] = stage_record(stage, checkpoint["record"], self.job_id)
        except JobError as exc:
            self._end_failed(stage, exc)
            return False
        self.say(stage, f"stage {stage} skipped: completed at {checkpoint['completed_at']}")
        return True

    def _run_stage(self, position: int, stage: str) -> bool:
        """Run one stage; True when it completed and was checkpointed."""
        started = time.time()
        self.say(stage, f"stage {stage} started")
        try:
            outcome = STAGE_FUNCTIONS[stage](self.context)
        except StageStopped as stopped:  # a budget or cancel seen at a safe point inside the stage
            self._end_stopped(stage, stopped.reason, None, inside=True)
            return False
        except Exception as exc:  # every failure is recorded with its real type and message
            self._end_failed(stage, exc)
            return False
        if outcome.usage:
            self.store.add_usage(self.job_id, exact=outcome.calls_exact, **outcome.usage)
        self.budget.spend(outcome.usage.get("model_calls", 0))
        if outcome.stopped_by:
            self._end_stopped(stage, outcome.stopped_by, outcome)
            return False
        for name, (passed, detail) in outcome.checks.items():
            self.store.set_check(self.job_id, name, "passed" if passed else "failed", detail)
        self.records[stage] = outcome.record
        self.store.checkpoint(self.job_id, stage, position, started, outcome.record, outcome.artifacts)
        self.echo(f"[{stage}] completed")
        return True

    def _model_calls_short(self, stage: str) -> str | None:
        """"max_model_calls" when the stage's worst case no longer fits the model-call budget."""
        short = self.budget.short_for(stage, self.context.config, self.context.eval_cases())
        if short is None:
            return None
        need, remaining = short
        self.say(stage, f"stage {stage} may need up to {need} model calls but {remaining} of "
                 f"{self.context.config.budgets.max_model_calls} remain", "warning")
        return "max_model_calls"

    # ------------------------------------------------------------------ endings

    def _end(self, status: str, stage: str | None, stopped_by: str | None, message: str,
             budget: str | None = None) -> None:
        outcome = {"status": status, "stage": stage, "stopped_by": stopped_by, "budget": budget, "message": message}
        self.store.finish(self.job_id, self.worker, outcome, round(self.budget.active_seconds(), 3))
        self.echo(f"job {status}: {message}")

    def _keep_evidence(self, stage: str, outcome: StageOutcome | None) -> None:
        records = dict(self.records)
        if outcome is not None:
            entries = {name: self.store.artifact_entry(path) for name, path in outcome.artifacts.items()
                       if path.is_file()}
            self.say(stage, f"partial evidence of stage {stage} kept (not checkpointed)", "warning",
                     {"record": outcome.record.to_json(), "artifacts": entries})
            records[stage] = outcome.record
        self.store.set_results(self.job_id, assemble_results(records, complete=False))

    def _end_stopped(self, stage: str, reason: str, outcome: StageOutcome | None, inside: bool = False) -> None:
        self._keep_evidence(stage, outcome)
        where = "during" if outcome is not None or inside else "before"
        if reason.startswith("cancelled"):
            self._end("cancelled", stage, reason, f"{reason} {where} stage {stage}; completed stages and their "
                      "evidence are kept; jobs resume continues from the last completed stage")
            return
        budget = reason if reason in BUDGETS else None
        message = (f"the {reason} budget ({self.budget.limit(reason)}) ran out {where} stage {stage} after "
                   f"{self.budget.active_seconds() / 60:.2f} active minutes and {self.budget.model_calls} model "
                   "calls; completed stages and partial evidence are kept" if budget else f"stopped by {reason}")
        self.store.add_error(self.job_id, stage, "budget_exhausted" if budget else "stopped", message)
        self._end("failed", stage, reason, message, budget)

    def _end_failed(self, stage: str, exc: Exception) -> None:
        code = str(getattr(exc, "code", type(exc).__name__))
        self.store.add_error(self.job_id, stage, code, str(exc) or repr(exc))
        self._keep_evidence(stage, None)
        self._end("failed", stage, None, f"stage {stage} failed: {code}: {exc}")
