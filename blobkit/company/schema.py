"""The job store's SQLite schema: its tables, their allowed values, and its migrations (create at version 2;
version 1 to 2 adds ``jobs.budgets``, the budgets a resume raised).

The schema version lives in ``PRAGMA user_version``; a store written by a newer blobkit is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from blobkit.errors import JobError

SCHEMA_VERSION = 2
DB_FILE = "jobs.sqlite"
JOBS_DIR = "jobs"
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINAL_STATUSES = ("succeeded", "failed", "cancelled")
LEVELS = ("info", "warning", "error")
CHECK_STATES = ("passed", "failed", "not_run")
USAGE_FIELDS = ("model_calls", "tokens", "optimizer_updates")

SCHEMA = (
    f"""CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        status TEXT NOT NULL CHECK (status IN ({", ".join(repr(s) for s in STATUSES)})),
        identity TEXT NOT NULL,
        worker TEXT,
        heartbeat_at REAL,
        cancel_reason TEXT,
        cancel_requested_at REAL,
        active_seconds REAL NOT NULL DEFAULT 0,
        model_calls INTEGER NOT NULL DEFAULT 0,
        model_calls_exact INTEGER NOT NULL DEFAULT 1,
        tokens INTEGER NOT NULL DEFAULT 0,
        optimizer_updates INTEGER NOT NULL DEFAULT 0,
        results TEXT NOT NULL DEFAULT '{{}}',
        replay TEXT,
        checks TEXT NOT NULL,
        outcome TEXT,
        budgets TEXT
    )""",
    f"""CREATE TABLE events (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        stage TEXT NOT NULL,
        level TEXT NOT NULL CHECK (level IN ({", ".join(repr(s) for s in LEVELS)})),
        message TEXT NOT NULL,
        data TEXT,
        PRIMARY KEY (job_id, seq)
    )""",
    """CREATE TABLE checkpoints (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        stage TEXT NOT NULL,
        position INTEGER NOT NULL,
        started_at REAL NOT NULL,
        completed_at REAL NOT NULL,
        record TEXT NOT NULL,
        artifacts TEXT NOT NULL,
        PRIMARY KEY (job_id, stage)
    )""",
    """CREATE TABLE errors (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        stage TEXT NOT NULL,
        code TEXT NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (job_id, seq)
    )""",
)


def migrate(conn: sqlite3.Connection, root: Path) -> None:
    """Create the tables of a new store; refuse a store from a newer blobkit. Runs inside a write transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise JobError(f"{root}: job store schema {version} is newer than this blobkit ({SCHEMA_VERSION}); "
                       "upgrade blobkit")
    if version == 0:
        for statement in SCHEMA:
            conn.execute(statement)
    elif version == 1:  # version 2 adds the budgets a resume raised (NULL: the job's config's own)
        conn.execute("ALTER TABLE jobs ADD COLUMN budgets TEXT")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
