"""The job store: durable job state in SQLite, artifacts as files written atomically beside it.

Layout of a store directory::

    DIR/jobs.sqlite          job state: WAL journal, synchronous=FULL, schema version in PRAGMA user_version
    DIR/jobs/<job id>/...    the job's artifacts (kit, model exports, reports), each written atomically

One worker runs a job at a time: it claims the job inside ``BEGIN IMMEDIATE`` and records itself
as ``host:pid``; it heartbeats while it runs, and a job whose heartbeat went stale (the worker was
SIGKILLed, lost power) can be cancelled at once and claimed again by ``resume`` (:mod:`.workers`).
Any number of readers may read while the worker writes (WAL). Every statement binds its values.
A damaged JSON cell (a torn write, a hand edit) is a :class:`~blobkit.errors.StoreCorruptError` naming
the job and the field; the job list still lists every job, the damaged one marked as such.

A job record holds its identity (source sha256, base model and revision, config), its status,
ordered progress events, checkpoints (completed stages with their artifacts' sha256), usage,
measured results, the replay outcome, errors (code + message) and the checks list, where each
check is ``passed``, ``failed`` or ``not_run``.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from blobkit.cells import json_cell
from blobkit.errors import JobError, JobNotFoundError, StoreCorruptError
from world_format.canonical import atomic_write_json, canonical_json, file_sha256

from .records import JobResults
from .schema import CHECK_STATES, DB_FILE, FINAL_STATUSES, JOBS_DIR, LEVELS, USAGE_FIELDS, migrate
from .stage_records import ReplayStage, StageRecord
from .workers import HEARTBEAT_STALE_S, worker_alive

_JOB_ID = re.compile(r"^job-[0-9a-f]{12}$")


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


def _loads(text: str | None, job_id: str, field: str) -> Any:
    """A JSON cell of job ``job_id``; StoreCorruptError naming the job and ``field`` when it cannot be read."""
    return json_cell(text, f"job {job_id}", f"{field}", "the other jobs are unaffected: create a new job for this "
                     "source")


def check_job_id(job_id: str) -> str:
    """Refuse anything that is not a job id (ids name folders, so this also blocks path tricks)."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise JobNotFoundError(f"{job_id!r} is not a job id (expected job- and 12 hex digits; see jobs list)")
    return job_id


class JobStore:
    """One connection to a job store directory. Use one instance per thread."""

    def __init__(self, root: Path, *, create: bool = True, stale_after_s: float = HEARTBEAT_STALE_S) -> None:
        self.root = Path(root).resolve()
        self.stale_after_s = stale_after_s
        """A running job's worker whose heartbeat is older than this is gone (cancel acts at once, resume claims)."""
        db = self.root / DB_FILE
        if not db.is_file():
            if not create:
                raise JobError(f"{self.root}: no job store here ({DB_FILE} is missing); create one with "
                               "blobkit company train --job-store DIR")
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(db, timeout=30.0, isolation_level=None)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = FULL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise JobError(f"{db}: not a usable job store: {exc}") from None

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken with BEGIN IMMEDIATE (one writer at a time, no upgrade deadlocks)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot across tables."""
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            self.conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as conn:
            migrate(conn, self.root)

    def _row(self, conn: sqlite3.Connection, job_id: str) -> sqlite3.Row:
        conn.row_factory = sqlite3.Row
        try:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (check_job_id(job_id),)).fetchone()
        finally:
            conn.row_factory = None
        if row is None:
            raise JobNotFoundError(f"{self.root}: no job {job_id} (see blobkit jobs list --job-store {self.root})")
        return row

    @staticmethod
    def _next_seq(conn: sqlite3.Connection, table: str, job_id: str) -> int:
        assert table in ("events", "errors")
        return int(conn.execute(f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {table} WHERE job_id = ?",
                                (job_id,)).fetchone()[0])

    def _event(self, conn: sqlite3.Connection, job_id: str, stage: str, level: str, message: str,
               data: Any = None) -> None:
        if level not in LEVELS:
            raise ValueError(f"event level must be one of {LEVELS}, got {level!r}")
        now = time.time()
        conn.execute("INSERT INTO events (job_id, seq, at, stage, level, message, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (job_id, self._next_seq(conn, "events", job_id), now, stage, level, message,
                      None if data is None else canonical_json(data)))
        conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (now, job_id))

    # ------------------------------------------------------------------ creating and claiming

    def create_job(self, identity: dict[str, Any], checks: Sequence[str]) -> str:
        """Add a queued job; every check starts as ``not_run``. Returns the new job id."""
        job_id = "job-" + secrets.token_hex(6)
        now = time.time()
        initial = [{"name": name, "status": "not_run", "detail": None} for name in checks]
        with self._write() as conn:
            conn.execute("INSERT INTO jobs (id, created_at, updated_at, status, identity, checks) "
                         "VALUES (?, ?, ?, 'queued', ?, ?)",
                         (job_id, now, now, canonical_json(identity), canonical_json(initial)))
            self._event(conn, job_id, "queue", "info", "job queued")
        self.job_dir(job_id).mkdir(parents=True, exist_ok=True)
        return job_id

    def claim(self, job_id: str, worker: str) -> None:
        """Make ``worker`` the job's worker and mark it running.

        Allowed from ``queued``, ``failed`` and ``cancelled`` (a resume), and from ``running`` when
        the recorded worker is gone (killed). A pending cancel request is cleared.
        """
        with self._write() as conn:
            row = self._row(conn, job_id)
            status, previous = row["status"], row["worker"]
            if status == "succeeded":
                raise JobError(f"job {job_id} already succeeded; nothing to resume")
            if status == "running" and worker_alive(previous, row["heartbeat_at"], self.stale_after_s):
                age = time.time() - row["heartbeat_at"]
                raise JobError(f"job {job_id} is running in worker {previous} (last heartbeat {age:.0f} s ago; a "
                               f"worker is judged gone after {self.stale_after_s:g} s without one); cancel it first "
                               f"(blobkit jobs cancel {job_id} --job-store {self.root})")
            conn.execute("UPDATE jobs SET status = 'running', worker = ?, heartbeat_at = ?, cancel_reason = NULL, "
                         "cancel_requested_at = NULL, outcome = NULL WHERE id = ?", (worker, time.time(), job_id))
            if status == "running":
                message = f"worker {previous} is gone; {worker} resumes the job"
            elif status == "queued":
                message = f"worker {worker} starts the job"
            else:
                message = f"worker {worker} resumes the {status} job"
            self._event(conn, job_id, "worker", "info", message, {"previous_status": status, "worker": worker})

    def raise_budgets(self, job_id: str, max_minutes: float | None = None,
                      max_model_calls: int | None = None) -> dict[str, Any]:
        """Raise a stopped job's budgets (each given one must be above its current limit and what the job has
        used); return the job's budgets record. The raise is kept in the job (``budgets.raised``) and as an event.

        JobError when the job is running or succeeded, or a value does not raise its budget.
        """
        with self._write() as conn:
            row = self._row(conn, job_id)
            if row["status"] in ("running", "succeeded"):
                raise JobError(f"job {job_id} is {row['status']}; only a stopped job's budgets can be raised")
            current = self._budgets(row, job_id)
            used = {"max_minutes": row["active_seconds"] / 60, "max_model_calls": row["model_calls"]}
            changes = {}
            for name, value in (("max_minutes", max_minutes), ("max_model_calls", max_model_calls)):
                if value is None:
                    continue
                if value <= current[name] or value <= used[name]:
                    raise JobError(f"--{name.replace('_', '-')} {value:g} does not raise job {job_id}'s budget: its "
                                   f"limit is {current[name]:g} and it has used {used[name]:.4g}; give more")
                changes[name] = [current[name], value]
            if not changes:
                return current
            raised = {**current, **{name: new for name, (_, new) in changes.items()},
                      "raised": [*current["raised"], {"at": _iso(time.time()), **changes}]}
            conn.execute("UPDATE jobs SET budgets = ? WHERE id = ?", (canonical_json(raised), job_id))
            words = ", ".join(f"{name} {old:g} -> {new:g}" for name, (old, new) in changes.items())
            self._event(conn, job_id, "job", "info", f"budgets raised: {words}", changes)
        return raised

    @staticmethod
    def _budgets(row: sqlite3.Row, job_id: str) -> dict[str, Any]:
        """The job's budgets: those a resume raised, else its config's, with the list of raises."""
        if row["budgets"] is not None:
            return dict(_loads(row["budgets"], job_id, "budgets"))
        configured = _loads(row["identity"], job_id, "identity").get("config", {}).get("budgets", {})
        return {"max_minutes": configured.get("max_minutes"), "max_model_calls": configured.get("max_model_calls"),
                "raised": []}

    def heartbeat(self, job_id: str, worker: str, active_seconds: float) -> bool:
        """Record liveness and active time; False when another worker has taken the job over."""
        with self._write() as conn:
            owner = conn.execute("SELECT worker FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if owner is None or owner[0] != worker:
                return False
            conn.execute("UPDATE jobs SET heartbeat_at = ?, active_seconds = ? WHERE id = ?",
                         (time.time(), active_seconds, job_id))
        return True

    def touch(self, job_id: str, worker: str) -> bool:
        """Record liveness only (the runner's heartbeat thread); False when another worker has the job."""
        with self._write() as conn:
            updated = conn.execute("UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND worker = ? "
                                   "AND status = 'running'", (time.time(), job_id, worker)).rowcount
        return bool(updated)

    # ------------------------------------------------------------------ cancellation

    def request_cancel(self, job_id: str, reason: str = "requested with jobs cancel") -> str:
        """Ask a job to stop; returns its status afterwards.

        A queued job, or a running one whose worker is gone, is cancelled at once; a live worker
        sees the request at its next safe point and marks the job ``cancelled`` itself.
        """
        with self._write() as conn:
            row = self._row(conn, job_id)
            status = row["status"]
            if status in FINAL_STATUSES:
                return str(status)
            now = time.time()
            conn.execute("UPDATE jobs SET cancel_reason = ?, cancel_requested_at = ? WHERE id = ?",
                         (reason, now, job_id))
            self._event(conn, job_id, "cancel", "warning", f"cancel requested: {reason}")
            if status == "queued" or not worker_alive(row["worker"], row["heartbeat_at"], self.stale_after_s):
                outcome = {"status": "cancelled", "stage": None, "stopped_by": f"cancelled: {reason}",
                           "budget": None, "message": f"cancelled while {status} (no live worker): {reason}"}
                conn.execute("UPDATE jobs SET status = 'cancelled', outcome = ? WHERE id = ?",
                             (canonical_json(outcome), job_id))
                return "cancelled"
        return "running"

    def cancel_reason(self, job_id: str) -> str | None:
        """The pending cancel request's reason, if any."""
        row = self.conn.execute("SELECT cancel_reason FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else row[0]

    # ------------------------------------------------------------------ progress, checkpoints, results

    def add_event(self, job_id: str, stage: str, level: str, message: str, data: Any = None) -> None:
        """Append one progress event (ordered by a per-job sequence number)."""
        with self._write() as conn:
            self._event(conn, job_id, stage, level, message, data)

    def add_error(self, job_id: str, stage: str, code: str, message: str) -> None:
        """Record an error (code + message) and an error event."""
        with self._write() as conn:
            conn.execute("INSERT INTO errors (job_id, seq, at, stage, code, message) VALUES (?, ?, ?, ?, ?, ?)",
                         (job_id, self._next_seq(conn, "errors", job_id), time.time(), stage, code, message))
            self._event(conn, job_id, stage, "error", f"{code}: {message}")

    def add_usage(self, job_id: str, *, exact: bool = True, **deltas: int) -> None:
        """Add to the usage counters (model_calls, tokens, optimizer_updates)."""
        unknown = set(deltas) - set(USAGE_FIELDS)
        if unknown:
            raise ValueError(f"unknown usage counters {sorted(unknown)}; known: {USAGE_FIELDS}")
        with self._write() as conn:
            for name, value in deltas.items():
                conn.execute(f"UPDATE jobs SET {name} = {name} + ? WHERE id = ?", (int(value), job_id))
            if not exact:
                conn.execute("UPDATE jobs SET model_calls_exact = 0 WHERE id = ?", (job_id,))

    def checkpoint(self, job_id: str, stage: str, position: int, started_at: float, record: StageRecord,
                   artifacts: dict[str, Path]) -> None:
        """Mark a stage complete with its record and artifacts (pinned by sha256).

        Directory artifacts are pinned through their manifest file (kit.json, manifest.json), which
        itself lists the sha256 of every file.
        """
        entries = {name: self.artifact_entry(path) for name, path in sorted(artifacts.items())}
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO checkpoints (job_id, stage, position, started_at, completed_at, "
                         "record, artifacts) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (job_id, stage, position, started_at, time.time(), canonical_json(record.to_json()),
                          canonical_json(entries)))
            self._event(conn, job_id, stage, "info", f"stage {stage} completed", {"artifacts": entries})

    def checkpoints(self, job_id: str) -> dict[str, dict[str, Any]]:
        """Completed stages by name: record, artifacts and timestamps."""
        rows = self.conn.execute("SELECT stage, started_at, completed_at, record, artifacts FROM checkpoints "
                                 "WHERE job_id = ? ORDER BY position", (check_job_id(job_id),)).fetchall()
        return {stage: {"stage": stage, "started_at": _iso(started), "completed_at": _iso(completed),
                        "record": _loads(record, job_id, f"checkpoint {stage} record"),
                        "artifacts": _loads(artifacts, job_id, f"checkpoint {stage} artifacts")}
                for stage, started, completed, record, artifacts in rows}

    def stale_artifacts(self, job_id: str, stage: str) -> list[str]:
        """Artifacts of a checkpoint that are missing or no longer match their sha256."""
        problems = []
        for name, entry in self.checkpoints(job_id)[stage]["artifacts"].items():
            path = self.root / entry["path"]
            if not path.is_file() or file_sha256(path) != entry["sha256"]:
                problems.append(f"{name} ({entry['path']})")
        return problems

    def set_results(self, job_id: str, results: JobResults) -> None:
        """Replace the measured results."""
        with self._write() as conn:
            conn.execute("UPDATE jobs SET results = ? WHERE id = ?", (canonical_json(results.to_json()), job_id))

    def set_replay(self, job_id: str, replay: ReplayStage) -> None:
        """Record the replay outcome."""
        with self._write() as conn:
            conn.execute("UPDATE jobs SET replay = ? WHERE id = ?", (canonical_json(replay.to_json()), job_id))

    def set_check(self, job_id: str, name: str, status: str, detail: str | None = None) -> None:
        """Set one check to passed, failed or not_run, with a one-line detail."""
        if status not in CHECK_STATES:
            raise ValueError(f"check status must be one of {CHECK_STATES}, got {status!r}")
        with self._write() as conn:
            checks = _loads(self._row(conn, job_id)["checks"], job_id, "checks")
            entry = next((check for check in checks if check["name"] == name), None)
            if entry is None:
                raise ValueError(f"job {job_id} has no check {name!r}")
            entry.update(status=status, detail=detail)
            conn.execute("UPDATE jobs SET checks = ? WHERE id = ?", (canonical_json(checks), job_id))

    def finish(self, job_id: str, worker: str, outcome: dict[str, Any], active_seconds: float) -> None:
        """End the worker's run: set the final status (from ``outcome['status']``) and release the job."""
        status = outcome["status"]
        if status not in FINAL_STATUSES:
            raise ValueError(f"a finished job must be one of {FINAL_STATUSES}, got {status!r}")
        with self._write() as conn:
            conn.execute("UPDATE jobs SET status = ?, outcome = ?, active_seconds = ?, heartbeat_at = ? "
                         "WHERE id = ? AND worker = ?",
                         (status, canonical_json(outcome), active_seconds, time.time(), job_id, worker))
            self._event(conn, job_id, "job", "info" if status == "succeeded" else "warning",
                        f"job {status}: {outcome['message']}", outcome)

    # ------------------------------------------------------------------ reading

    def status(self, job_id: str) -> str:
        """The job's status."""
        with self._read() as conn:
            return str(self._row(conn, job_id)["status"])

    def job_dir(self, job_id: str) -> Path:
        """Where the job's artifacts live."""
        return self.root / JOBS_DIR / check_job_id(job_id)

    def artifact_entry(self, path: Path) -> dict[str, Any]:
        """Path (relative to the store), sha256 and size of one artifact file."""
        path = Path(path)
        if not path.is_file():
            raise JobError(f"{path}: artifact is missing or not a file")
        return {"path": path.resolve().relative_to(self.root.resolve()).as_posix(), "sha256": file_sha256(path),
                "bytes": path.stat().st_size}

    def write_json_artifact(self, job_id: str, name: str, value: Any) -> Path:
        """Write ``DIR/jobs/<id>/<name>`` atomically as canonical JSON; return its path."""
        path = self.job_dir(job_id) / name
        atomic_write_json(path, value)
        return path

    def get(self, job_id: str) -> dict[str, Any]:
        """The whole job record (one consistent snapshot)."""
        with self._read() as conn:
            row = self._row(conn, job_id)
            events = conn.execute("SELECT seq, at, stage, level, message, data FROM events WHERE job_id = ? "
                                  "ORDER BY seq", (job_id,)).fetchall()
            errors = conn.execute("SELECT seq, at, stage, code, message FROM errors WHERE job_id = ? ORDER BY seq",
                                  (job_id,)).fetchall()
            checkpoints = self.checkpoints(job_id)
        return {
            "id": row["id"], "status": row["status"], "created_at": _iso(row["created_at"]),
            "updated_at": _iso(row["updated_at"]), "identity": _loads(row["identity"], job_id, "identity"),
            "worker": {"id": row["worker"], "heartbeat_at": _iso(row["heartbeat_at"])},
            "cancel_requested": None if row["cancel_reason"] is None else {
                "reason": row["cancel_reason"], "at": _iso(row["cancel_requested_at"])},
            "outcome": _loads(row["outcome"], job_id, "outcome"),
            "events": [{"seq": seq, "at": _iso(at), "stage": stage, "level": level, "message": message,
                        "data": _loads(data, job_id, f"event {seq} data")}
                       for seq, at, stage, level, message, data in events],
            "checkpoints": list(checkpoints.values()),
            "usage": {"active_seconds": round(row["active_seconds"], 3), "model_calls": row["model_calls"],
                      "model_calls_exact": bool(row["model_calls_exact"]), "tokens": row["tokens"],
                      "optimizer_updates": row["optimizer_updates"]},
            "results": _loads(row["results"], job_id, "results"), "replay": _loads(row["replay"], job_id, "replay"),
            "errors": [{"seq": seq, "at": _iso(at), "stage": stage, "code": code, "message": message}
                       for seq, at, stage, code, message in errors],
            "checks": _loads(row["checks"], job_id, "checks"),
            "budgets": self._budgets(row, job_id),
            "artifacts_dir": str(self.job_dir(row["id"])),
        }

    def find_labelled(self, label: str) -> str | None:
        """The newest job whose identity carries ``label`` (a worker's service job and recipe), if any."""
        row = self.conn.execute("SELECT id FROM jobs WHERE json_valid(identity) AND "
                                "json_extract(identity, '$.label') = ? ORDER BY created_at DESC LIMIT 1",
                                (label,)).fetchone()
        return None if row is None else str(row[0])

    def list_jobs(self) -> list[dict[str, Any]]:
        """A short summary of every job, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT j.id, j.status, j.created_at, j.updated_at, j.identity, "
                "(SELECT stage FROM checkpoints c WHERE c.job_id = j.id ORDER BY position DESC LIMIT 1) "
                "FROM jobs j ORDER BY j.created_at, j.id").fetchall()
        summaries = []
        for job_id, status, created, updated, identity_text, last_stage in rows:
            summary: dict[str, Any] = {"id": job_id, "status": status, "created_at": _iso(created),
                                       "updated_at": _iso(updated), "last_completed_stage": last_stage,
                                       "source": None, "base_model": None, "damaged": None}
            try:
                identity = _loads(identity_text, job_id, "identity")
                summary.update(source=identity.get("source", {}).get("path"),
                               base_model=identity.get("base_model", {}).get("id"))
            except (StoreCorruptError, AttributeError) as exc:  # listed anyway, marked damaged
                summary["damaged"] = str(exc) if isinstance(exc, StoreCorruptError) else f"job {job_id}: identity"
            summaries.append(summary)
        return summaries
