"""Workers and attempts: worker connections, claims under a lease, heartbeats, evidence uploads, endings.

A claim is one write transaction (``BEGIN IMMEDIATE``): of two workers racing for one queued job exactly
one gets it. Each claim is an :class:`~.records.Attempt` with a lease the worker renews by heartbeating; an
attempt whose lease ran out is ``lost`` and its job returns to the queue (or fails after its
``max_attempts``, or is cancelled when a cancel was pending). The next attempt resumes from the worker job
store's checkpoints (the company pipeline's stages: a finished stage is never redone).
"""

from __future__ import annotations

import re
import secrets
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from blobkit.errors import ConflictError, NotFoundError
from world_format.canonical import canonical_json

from .records import (
    Attempt,
    AttemptFinish,
    AttemptReport,
    Claim,
    LeaseState,
    Outcome,
    Principal,
    Progress,
    ProgressEvent,
    Recipe,
    Usage,
    WorkerConnection,
    WorkerHello,
)
from .store import ServiceStore

LEASE_S = 60.0
"""Default lease: a worker that does not heartbeat for this long loses its job (``blobkit serve --lease-seconds``)."""
ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ATTEMPT_COLUMNS = ("id, job_id, number, worker_id, claimed_at, heartbeat_at, lease_expires_at, ended_at, status, "
                   "progress, usage, checkpoints, outcome")


# --------------------------------------------------------------------------- worker connections


def create_worker(store: ServiceStore, workspace: str, name: str, server_url: str) -> WorkerConnection:
    """A worker connection of ``workspace``: a worker id, a one-time token (a worker key) and its command."""
    worker_id = "wrk_" + secrets.token_hex(6)
    with store.write() as conn:
        store.ensure_workspace(conn, workspace)
        conn.execute("INSERT INTO workers (id, workspace, name, created_at) VALUES (?, ?, ?, ?)",
                     (worker_id, workspace, name, time.time()))
    token = store.create_key(workspace, role="worker", worker_id=worker_id)
    command = f"blobkit worker --server {server_url} --token {token} --job-store ./blobkit-worker-jobs --bases tiny"
    return WorkerConnection(worker_id=worker_id, name=name, token=token, command=command)


def hello(store: ServiceStore, caller: Principal, said: WorkerHello) -> None:
    """Record the bases a worker advertises and that it was seen."""
    with store.write() as conn:
        conn.execute("UPDATE workers SET bases = ?, last_seen_at = ?, name = COALESCE(?, name) WHERE id = ? "
                     "AND workspace = ?", (canonical_json(sorted(set(said.bases))), time.time(), said.name,
                                            caller.worker_id, caller.workspace))


# --------------------------------------------------------------------------- leases


def expire_leases(conn: sqlite3.Connection, now: float) -> list[str]:
    """Mark running attempts whose lease ended ``lost``; requeue, fail or cancel their jobs. Returns the job ids."""
    lost = conn.execute("SELECT a.id, a.job_id, a.number, j.max_attempts, j.cancel_reason FROM attempts a "
                        "JOIN training_jobs j ON j.id = a.job_id WHERE a.status = 'running' "
                        "AND a.lease_expires_at < ?", (now,)).fetchall()
    for attempt_id, job_id, number, max_attempts, cancel in lost:
        message = "the worker stopped heartbeating and its lease expired"
        conn.execute("UPDATE attempts SET status = 'lost', ended_at = ?, outcome = ? WHERE id = ?",
                     (now, canonical_json(Outcome(status="lost", message=message).model_dump()), attempt_id))
        if cancel:
            status, why = "cancelled", f"{cancel}; no worker was running it (attempt {number} lost)"
        elif number >= max_attempts:
            status, why = "failed", f"attempt {number} of {max_attempts} lost: {message}"
        else:
            status, why = "queued", None
        outcome = None if why is None else canonical_json(
            {"outcome": Outcome(status=status, message=why).model_dump()})
        conn.execute("UPDATE training_jobs SET status = ?, outcome = COALESCE(?, outcome), updated_at = ? "
                     "WHERE id = ?", (status, outcome, now, job_id))
    return [row[1] for row in lost]


# --------------------------------------------------------------------------- claims


def _runnable(recipe: dict[str, Any], bases: set[str]) -> bool:
    return str(recipe.get("base_model", {}).get("id")) in bases


def claim(store: ServiceStore, caller: Principal, bases: Iterable[str], lease_s: float) -> Claim | None:
    """Claim the oldest queued job of the caller's workspace whose base the worker can run; None when none is."""
    assert caller.worker_id is not None
    bases = set(bases)
    now = time.time()
    with store.write() as conn:
        expire_leases(conn, now)
        rows = conn.execute("SELECT id, recipe, recipe_sha256, env_id FROM training_jobs WHERE workspace = ? "
                            "AND status = 'queued' AND launch = 'worker' ORDER BY created_at, id",
                            (caller.workspace,)).fetchall()
        chosen = next(((job_id, text, sha, env) for job_id, text, sha, env in rows
                       if _runnable(store.cell(text, f"training job {job_id}", "recipe"), bases)), None)
        if chosen is None:
            return None
        job_id, text, sha, env_id = chosen
        number = int(conn.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM attempts WHERE job_id = ?",
                                  (job_id,)).fetchone()[0])
        attempt_id = "att_" + secrets.token_hex(8)
        conn.execute("INSERT INTO attempts (id, job_id, number, worker_id, claimed_at, heartbeat_at, lease_expires_at, "
                     "status) VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
                     (attempt_id, job_id, number, caller.worker_id, now, now, now + lease_s))
        conn.execute("UPDATE training_jobs SET status = 'running', updated_at = ? WHERE id = ?", (now, job_id))
        conn.execute("UPDATE workers SET last_seen_at = ? WHERE id = ?", (now, caller.worker_id))
    recipe = Recipe.model_validate(store.cell(text, f"training job {job_id}", "recipe"))
    return Claim(job_id=job_id, attempt=get_attempt(store, caller, attempt_id), recipe=recipe, recipe_sha256=sha,
                 lease_seconds=lease_s, source_url=f"/api/v1/attempts/{attempt_id}/source")


# --------------------------------------------------------------------------- reading


def _attempt(store: ServiceStore, row: tuple[Any, ...], events: bool) -> Attempt:
    (attempt_id, _job, number, worker, claimed, beat, lease, ended, status, progress, usage, checkpoints,
     outcome) = row
    where = f"attempt {attempt_id}"
    progress_value = store.cell(progress, where, "progress") or {}
    reused = progress_value.pop("stages_reused", [])
    attempt = Attempt(attempt_id=attempt_id, number=number, worker_id=worker, status=status, claimed_at=claimed,
                      heartbeat_at=beat, lease_expires_at=lease, ended_at=ended,
                      progress=Progress.model_validate(progress_value),
                      usage=Usage.model_validate(store.cell(usage, where, "usage") or {}),
                      checkpoints=store.cell(checkpoints, where, "checkpoints") or [], stages_reused=reused,
                      outcome=store.cell(outcome, where, "outcome"),
                      events=attempt_events(store, attempt_id) if events else [])
    return attempt


def job_attempts(store: ServiceStore, job_id: str, events: bool = True) -> list[Attempt]:
    """Every attempt of a job, in order."""
    rows = store.conn.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? ORDER BY number",
                              (job_id,)).fetchall()
    return [_attempt(store, tuple(row), events) for row in rows]


def attempt_events(store: ServiceStore, attempt_id: str) -> list[ProgressEvent]:
    """An attempt's progress events, in order."""
    rows = store.conn.execute("SELECT seq, at, stage, level, message FROM attempt_events WHERE attempt_id = ? "
                              "ORDER BY seq", (attempt_id,)).fetchall()
    return [ProgressEvent(seq=s, at=a, stage=st, level=lv, message=m) for s, a, st, lv, m in rows]


def _owned(store: ServiceStore, caller: Principal, attempt_id: str) -> tuple[Any, ...]:
    row = store.conn.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE id = ? AND worker_id = ?",
                             (attempt_id, caller.worker_id)).fetchone()
    if row is None:
        raise NotFoundError(f"no attempt {attempt_id!r} of this worker")
    return tuple(row)


def get_attempt(store: ServiceStore, caller: Principal, attempt_id: str) -> Attempt:
    """One attempt of the calling worker."""
    return _attempt(store, _owned(store, caller, attempt_id), True)


def attempt_source(store: ServiceStore, caller: Principal, attempt_id: str) -> tuple[str, str]:
    """(path, sha256) of the world source the attempt's recipe pins."""
    row = _owned(store, caller, attempt_id)
    text = store.conn.execute("SELECT recipe FROM training_jobs WHERE id = ?", (row[1],)).fetchone()[0]
    recipe = Recipe.model_validate(store.cell(text, f"training job {row[1]}", "recipe"))
    return str(store.blobs.existing(recipe.source.sha256)), recipe.source.sha256


# --------------------------------------------------------------------------- reports from the worker


def _revive(conn: sqlite3.Connection, attempt_id: str, now: float) -> bool:
    """A lost attempt whose job nobody claimed since (still queued, this its latest attempt) is running again: its
    worker was only unreachable (the server restarted, the network dropped) and goes on from where it is."""
    row = conn.execute("SELECT a.job_id, a.number, j.status, (SELECT MAX(number) FROM attempts b WHERE "
                       "b.job_id = a.job_id) FROM attempts a JOIN training_jobs j ON j.id = a.job_id "
                       "WHERE a.id = ? AND a.status = 'lost'", (attempt_id,)).fetchone()
    if row is None or row[2] != "queued" or row[1] != row[3]:
        return False
    conn.execute("UPDATE attempts SET status = 'running', ended_at = NULL, outcome = NULL WHERE id = ?", (attempt_id,))
    conn.execute("UPDATE training_jobs SET status = 'running', updated_at = ? WHERE id = ?", (now, row[0]))
    return True


def _running(conn: sqlite3.Connection, attempt_id: str, now: float | None = None) -> tuple[str, str | None]:
    """(job id, pending cancel reason) of a running attempt; ConflictError when its lease was lost or it ended.

    With ``now`` (a heartbeat), a lost attempt nobody replaced is revived first (:func:`_revive`).
    """
    if now is not None:
        _revive(conn, attempt_id, now)
    row = conn.execute("SELECT a.status, a.job_id, j.cancel_reason FROM attempts a JOIN training_jobs j "
                       "ON j.id = a.job_id WHERE a.id = ?", (attempt_id,)).fetchone()
    if row is None or row[0] != "running":
        raise ConflictError(f"attempt {attempt_id} is {row[0] if row else 'unknown'}: its lease was lost or it "
                            "ended; stop working on it (the job may have been claimed again)")
    return row[1], row[2]


def heartbeat(store: ServiceStore, caller: Principal, attempt_id: str, report: AttemptReport,
              lease_s: float) -> LeaseState:
    """Renew the lease and record progress, usage, checkpoints and new events; says whether to cancel."""
    _owned(store, caller, attempt_id)
    now = time.time()
    with store.write() as conn:
        expire_leases(conn, now)
        job_id, cancel = _running(conn, attempt_id, now)
        progress = {**report.progress.model_dump(mode="json"), "stages_reused": report.stages_reused}
        conn.execute("UPDATE attempts SET heartbeat_at = ?, lease_expires_at = ?, progress = ?, usage = ?, "
                     "checkpoints = ? WHERE id = ?",
                     (now, now + lease_s, canonical_json(progress), canonical_json(report.usage.model_dump()),
                      canonical_json([c.model_dump() for c in report.checkpoints]), attempt_id))
        for event in report.events:
            conn.execute("INSERT OR IGNORE INTO attempt_events (attempt_id, seq, at, stage, level, message) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                         (attempt_id, event.seq, event.at, event.stage, event.level, event.message))
        conn.execute("UPDATE training_jobs SET updated_at = ? WHERE id = ?", (now, job_id))
        conn.execute("UPDATE workers SET last_seen_at = ? WHERE id = ?", (now, caller.worker_id))
    return LeaseState(lease_expires_at=now + lease_s, cancel_requested=cancel)


def add_artifact(store: ServiceStore, caller: Principal, attempt_id: str, name: str, sha256: str, size: int) -> str:
    """Record an uploaded (already stored and checked) blob as the job's artifact ``name``; returns the job id."""
    _owned(store, caller, attempt_id)
    with store.write() as conn:
        job_id, _ = _running(conn, attempt_id)
        conn.execute("INSERT OR IGNORE INTO blobs (sha256, bytes, created_at) VALUES (?, ?, ?)",
                     (sha256, size, time.time()))
        conn.execute("INSERT OR REPLACE INTO artifacts (job_id, name, attempt_id, sha256, bytes, uploaded_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (job_id, name, attempt_id, sha256, size, time.time()))
    return job_id


def check_artifact_name(name: str) -> str:
    """An artifact name: letters, digits, ``.``, ``_``, ``-`` (no path)."""
    if not ARTIFACT_NAME.match(name) or ".." in name:
        raise NotFoundError(f"{name!r} is not an artifact name (letters, digits, '.', '_' and '-')")
    return name


def finish(store: ServiceStore, caller: Principal, attempt_id: str, report: AttemptFinish) -> None:
    """End an attempt. Succeeded and cancelled end the job; a failure requeues it unless a budget ran out or the
    attempts are used up. The results, replay and checks measured so far are kept either way."""
    _owned(store, caller, attempt_id)
    now = time.time()
    with store.write() as conn:
        job_id, cancel = _running(conn, attempt_id)
        number, max_attempts = conn.execute("SELECT a.number, j.max_attempts FROM attempts a JOIN training_jobs j "
                                            "ON j.id = a.job_id WHERE a.id = ?", (attempt_id,)).fetchone()
        outcome = Outcome(status=report.status, message=report.message, stage=report.stage,
                          stopped_by=report.stopped_by)
        conn.execute("UPDATE attempts SET status = ?, ended_at = ?, outcome = ?, usage = ?, checkpoints = ? "
                     "WHERE id = ?", (report.status, now, canonical_json(outcome.model_dump()),
                                      canonical_json(report.usage.model_dump()),
                                      canonical_json([c.model_dump() for c in report.checkpoints]), attempt_id))
        retry = report.status == "failed" and not report.budget_exhausted and not cancel and number < max_attempts
        status = "queued" if retry else report.status
        record = {"outcome": outcome.model_dump(), "results": report.results.model_dump(mode="json"),
                  "replay": None if report.replay is None else report.replay.model_dump(mode="json"),
                  "checks": [c.model_dump() for c in report.checks]}
        conn.execute("UPDATE training_jobs SET status = ?, outcome = ?, updated_at = ? WHERE id = ?",
                     (status, canonical_json(record), now, job_id))
