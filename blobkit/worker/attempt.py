"""One claimed job, run through the company pipeline (:func:`blobkit.company.run_job`) in a local job store.

The local job is labelled with the service job and recipe, so the next attempt on this store (after a lost
lease, a crash, a SIGKILL) finds it and resumes from its checkpoints: a finished stage is never redone. The
server's lease is the authority on who runs the job, so the local store lets the claiming worker take over at
once. A :class:`Reporter` thread heartbeats the server, streams progress events and checkpoints, checks that the
kit the worker built is the recipe's (byte-reproducible builds make the sha256 comparable) and turns a cancel
request or a lost lease into a cancel of the local job at its next safe point.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from blobkit.company import CHECKS, JobStore, run_job
from blobkit.company.identity import job_identity
from blobkit.company.records import typed_replay, typed_results
from blobkit.company.stage_records import QualifyStage, stage_record
from blobkit.errors import BlobkitError, ConflictError
from blobkit.service.records import (
    AttemptFinish,
    AttemptReport,
    Check,
    CheckpointPin,
    Claim,
    Progress,
    ProgressEvent,
    Usage,
)
from blobkit.service.sources import materialize
from blobkit.service.steps import LOSS, REWARD, STEP

from .client import WorkerClient

Echo = Callable[[str], None]
EVIDENCE = {"inspection.json": "inspection.json", "kit_verification.json": "kit_verification.json",
            "results.json": "results.json", "replay.json": "replay.json", "sft/plan.json": "sft-plan.json",
            "sft/eval.json": "sft-eval.json", "sft/eval_cases_base.json": "sft-eval_cases_base.json",
            "sft/eval_cases_sft.json": "sft-eval_cases_sft.json", "sft/training.png": "sft-training.png",
            "rl/plan.json": "rl-plan.json", "rl/eval.json": "eval.json",
            "rl/eval_cases_sft.json": "eval_cases_sft.json", "rl/eval_cases_rl.json": "eval_cases_rl.json",
            "rl/rl_steps.jsonl": "rl_steps.jsonl", "rl/training.png": "training.png",
            "export/manifest.json": "export-manifest.json"}
"""Evidence files of a job directory and the names they are uploaded under."""


def source_path(client: WorkerClient, claim: Claim, job_store: Path) -> Path:
    """The recipe's world on this machine (downloaded once, checked against the pinned sha256)."""
    pinned = claim.recipe.source
    folder = job_store / "sources" / pinned.sha256
    if not folder.is_dir():
        staging = job_store / "sources" / f".{pinned.sha256}.download"
        staging.parent.mkdir(parents=True, exist_ok=True)
        digest = client.download(claim.source_url, staging)
        if digest != pinned.sha256:
            raise ConflictError(f"the source's sha256 {digest} is not the recipe's {pinned.sha256}")
        materialize(staging.read_bytes(), pinned.form, folder)
        staging.unlink()
    if pinned.form == "world.json":
        return folder / "world.json"
    return sorted(folder.rglob("world.json"))[0].parent


def local_job(store: JobStore, claim: Claim, source: Path) -> str:
    """The local job of this service job and recipe: found (a resume) or created."""
    label = f"{claim.job_id}:{claim.recipe_sha256}"
    found = store.find_labelled(label)
    if found is not None:
        return found
    identity = {**job_identity(source, claim.recipe.base_model.id, claim.recipe.config), "label": label,
                "service": {"job_id": claim.job_id, "recipe_sha256": claim.recipe_sha256,
                            "attempt": claim.attempt.attempt_id}}
    return store.create_job(identity, CHECKS)


def _usage(usage: dict[str, Any], start: dict[str, Any] | None = None) -> Usage:
    start = start or {"active_seconds": 0, "model_calls": 0, "optimizer_updates": 0, "tokens": 0}
    return Usage(active_minutes=round((usage["active_seconds"] - start["active_seconds"]) / 60, 3),
                 model_calls=usage["model_calls"] - start["model_calls"],
                 optimizer_updates=usage["optimizer_updates"] - start["optimizer_updates"],
                 tokens=usage["tokens"] - start["tokens"])


def pins(job: dict[str, Any]) -> list[CheckpointPin]:
    """The local job's checkpoints as pins."""
    return [CheckpointPin(stage=c["stage"], completed_at=c["completed_at"], artifacts=c["artifacts"])
            for c in job["checkpoints"]]


def progress(job: dict[str, Any], claim: Claim) -> Progress:
    """Where the local job is: its stage, the last reported step and loss or reward, usage against the budget."""
    events, usage, budgets = job["events"], job["usage"], claim.recipe.config.budgets
    stage = events[-1]["stage"] if events else None
    found: dict[str, Any] = {}
    for event in reversed(events):
        if event["stage"] not in ("sft", "rl"):
            continue
        step, loss, reward = (pattern.search(event["message"]) for pattern in (STEP, LOSS, REWARD))
        if step and "step" not in found:
            found.update(step=int(step.group(1)), steps=int(step.group(2)))
        if loss and "loss" not in found:
            found["loss"] = float(loss.group(1))
        if reward and "reward" not in found:
            found["reward"] = float(reward.group(1).rstrip("."))
        if "step" in found:
            break
    return Progress(stage=stage, stages_completed=[c["stage"] for c in job["checkpoints"]], **found,
                    model_calls=usage["model_calls"], max_model_calls=budgets.max_model_calls,
                    active_minutes=round(usage["active_seconds"] / 60, 3), max_minutes=budgets.max_minutes)


class Reporter(threading.Thread):
    """Heartbeats the server every ``interval`` seconds with the local job's progress; obeys cancel and lost leases."""

    def __init__(self, client: WorkerClient, claim: Claim, store_root: Path, job_id: str, reused: list[str],
                 echo: Echo) -> None:
        super().__init__(name=f"reporter-{claim.attempt.attempt_id}", daemon=True)
        self.client, self.claim, self.root, self.job_id, self.reused, self.echo = (client, claim, store_root, job_id,
                                                                                    reused, echo)
        self.interval = max(0.5, min(5.0, claim.lease_seconds / 4))
        self.done = threading.Event()
        self.lost: str | None = None
        self.kit_mismatch: str | None = None
        self.cancelled = False
        self._sent = 0
        self._start_usage: dict[str, Any] | None = None
        self._start_seq: int | None = None

    def run(self) -> None:
        with JobStore(self.root, create=False) as store:
            while not self.done.wait(self.interval):
                self.report(store)

    def stop(self) -> None:
        """Stop and send one last report."""
        self.done.set()
        self.join()

    def report(self, store: JobStore) -> None:
        """One heartbeat."""
        job = store.get(self.job_id)
        if self._start_usage is None:
            self._start_usage = dict(job["usage"])
            self._start_seq = max((e["seq"] for e in job["events"]), default=0)
        assert self._start_seq is not None
        new = [e for e in job["events"] if e["seq"] > self._start_seq + self._sent]
        events = [ProgressEvent(seq=e["seq"] - self._start_seq, at=_unix(e["at"]), stage=e["stage"],
                                level=e["level"], message=e["message"][:2000]) for e in new]
        self._check_kit(store, job)
        report = AttemptReport(progress=progress(job, self.claim), usage=_usage(job["usage"], self._start_usage),
                               events=events, checkpoints=pins(job), stages_reused=self.reused)
        try:
            lease = self.client.heartbeat(self.claim.attempt.attempt_id, report)
        except ConflictError as exc:
            self.lost = str(exc)
            self._cancel(store, f"the lease was lost ({exc})")
            return
        except BlobkitError as exc:  # the server is unreachable for longer than the client waits: keep running
            self.echo(f"heartbeat failed: {exc}")
            return
        self._sent += len(events)
        if lease.cancel_requested:
            self._cancel(store, lease.cancel_requested)

    def _check_kit(self, store: JobStore, job: dict[str, Any]) -> None:
        qualify = next((c for c in job["checkpoints"] if c["stage"] == "qualify"), None)
        if qualify is None or self.kit_mismatch is not None:
            return
        record = stage_record("qualify", qualify["record"], self.job_id)
        assert isinstance(record, QualifyStage)
        built = record.build.kit.sha256
        if built != self.claim.recipe.kit.sha256:
            self.kit_mismatch = (f"the kit this worker built has sha256 {built}, the recipe pins "
                                 f"{self.claim.recipe.kit.sha256}: the build differs (another blobkit version?)")
            self._cancel(store, self.kit_mismatch)

    def _cancel(self, store: JobStore, reason: str) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.echo(f"cancelling at the next safe point: {reason}")
            store.request_cancel(self.job_id, reason)


def _unix(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def upload_evidence(client: WorkerClient, claim: Claim, job_dir: Path, export: bool, echo: Echo) -> list[str]:
    """Upload every evidence file present (and the export's files with ``export``); returns the names sent."""
    files = {name: job_dir / relative for relative, name in EVIDENCE.items()}
    if export and (job_dir / "export").is_dir():
        files.update({f"export-{p.name}": p for p in sorted((job_dir / "export").iterdir()) if p.is_file()})
    sent = []
    for name, path in files.items():
        if path.is_file():
            client.upload(claim.attempt.attempt_id, name, path)
            sent.append(name)
    echo(f"uploaded {len(sent)} evidence files")
    return sent


def run_attempt(client: WorkerClient, claim: Claim, job_store: Path, echo: Echo, export: bool = False) -> str:
    """Run the claimed job to its end, report it, and return its final status (``lost`` when the lease was lost)."""
    source = source_path(client, claim, job_store)
    with JobStore(job_store, stale_after_s=0.0) as store:  # the server's lease already decided who runs it
        job_id = local_job(store, claim, source)
        before = store.get(job_id)
        reused = [c["stage"] for c in before["checkpoints"]]
        echo(f"attempt {claim.attempt.number} of {claim.job_id}: local job {job_id}"
             + (f", resuming after {', '.join(reused)}" if reused else ""))
        reporter = Reporter(client, claim, store.root, job_id, reused, echo)
        with JobStore(store.root) as first:
            reporter.report(first)
        reporter.start()
        try:
            if before["status"] != "succeeded":
                with redirect_stdout(_Echo(echo)):
                    run_job(store, job_id, echo)
        finally:
            reporter.stop()
            with JobStore(store.root) as last:
                reporter.report(last)
        job = store.get(job_id)
    if reporter.lost:
        echo(f"lease lost; the job was left to the server: {reporter.lost}")
        return "lost"
    upload_evidence(client, claim, Path(job["artifacts_dir"]), export, echo)
    client.finish(claim.attempt.attempt_id, finish_report(job, reporter))
    return "failed" if reporter.kit_mismatch else str(job["status"])


def finish_report(job: dict[str, Any], reporter: Reporter) -> AttemptFinish:
    """How the local job ended, as the attempt's finish."""
    outcome = job["outcome"] or {"status": "failed", "message": "the job ended without an outcome"}
    status, message = outcome["status"], outcome["message"]
    if reporter.kit_mismatch:
        status, message = "failed", reporter.kit_mismatch
    return AttemptFinish(status=status, message=message, stage=outcome.get("stage"),
                         stopped_by=outcome.get("stopped_by"), budget_exhausted=bool(outcome.get("budget")),
                         usage=_usage(job["usage"], reporter._start_usage),
                         results=typed_results(job["results"]), replay=typed_replay(job["replay"]),
                         checks=[Check.model_validate(c) for c in job["checks"]], checkpoints=pins(job))


class _Echo:
    """A text stream whose lines go to ``echo`` (trainer chatter printed to stdout)."""

    def __init__(self, echo: Echo) -> None:
        self.echo, self.buffer = echo, ""

    def write(self, text: str) -> int:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            if line.strip():
                self.echo(line)
        return len(text)

    def flush(self) -> None:
        return None
