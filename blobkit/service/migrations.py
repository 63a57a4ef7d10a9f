"""The service store's schema as an ordered list of named migrations, each applied once.

A migration is a name and its SQL statements. :data:`MIGRATIONS` is applied in order; each applied
name is recorded in ``schema_migrations`` (and their count in ``PRAGMA user_version``), so a store
opened by this blobkit applies only what it has not yet. A store that records a migration this
blobkit does not know was written by a newer one and is refused. Routers that need tables of their
own (the Tinker-compatible API, the Train panel) append one :class:`Migration` with
:func:`register` in their module; names must be unique and never change once released.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from blobkit.errors import JobError


@dataclass(frozen=True)
class Migration:
    """One step of the schema: a unique name and the statements that make it."""

    name: str
    """Stable identifier, recorded in ``schema_migrations`` (for example ``core-1``, ``tinker-1``)."""
    statements: tuple[str, ...]
    """SQL run in one write transaction, in order."""


JOB_STATUSES = ("kit_ready", "queued", "running", "succeeded", "failed", "cancelled")
ATTEMPT_STATUSES = ("running", "succeeded", "failed", "cancelled", "lost")

CORE = Migration("core-1", (
    """CREATE TABLE workspaces (
        name TEXT PRIMARY KEY,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        role TEXT NOT NULL CHECK (role IN ('user', 'worker')),
        worker_id TEXT,
        salt BLOB NOT NULL,
        digest BLOB NOT NULL,
        created_at REAL NOT NULL,
        revoked_at REAL
    )""",
    """CREATE TABLE blobs (
        sha256 TEXT PRIMARY KEY,
        bytes INTEGER NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE environments (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        created_at REAL NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('world', 'cluster_plane')),
        name TEXT NOT NULL,
        source_form TEXT,
        source_sha256 TEXT REFERENCES blobs(sha256),
        info TEXT NOT NULL,
        lease_expires_at REAL
    )""",
    "CREATE INDEX environments_workspace ON environments (workspace, created_at)",
    f"""CREATE TABLE training_jobs (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        env_id TEXT NOT NULL REFERENCES environments(id),
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        launch TEXT NOT NULL CHECK (launch IN ('manual', 'worker')),
        status TEXT NOT NULL CHECK (status IN ({", ".join(repr(s) for s in JOB_STATUSES)})),
        recipe TEXT NOT NULL,
        recipe_sha256 TEXT NOT NULL,
        kit_sha256 TEXT NOT NULL REFERENCES blobs(sha256),
        created TEXT NOT NULL,
        cancel_reason TEXT,
        outcome TEXT
    )""",
    "CREATE INDEX training_jobs_env ON training_jobs (workspace, env_id, created_at)",
    "CREATE INDEX training_jobs_queue ON training_jobs (status, created_at)",
    """CREATE TABLE workers (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        name TEXT NOT NULL,
        created_at REAL NOT NULL,
        bases TEXT NOT NULL DEFAULT '[]',
        last_seen_at REAL
    )""",
    f"""CREATE TABLE attempts (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL REFERENCES training_jobs(id),
        number INTEGER NOT NULL,
        worker_id TEXT NOT NULL REFERENCES workers(id),
        claimed_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        lease_expires_at REAL NOT NULL,
        ended_at REAL,
        status TEXT NOT NULL CHECK (status IN ({", ".join(repr(s) for s in ATTEMPT_STATUSES)})),
        progress TEXT NOT NULL DEFAULT '{{}}',
        usage TEXT NOT NULL DEFAULT '{{}}',
        checkpoints TEXT NOT NULL DEFAULT '[]',
        results TEXT,
        outcome TEXT,
        UNIQUE (job_id, number)
    )""",
    "CREATE INDEX attempts_job ON attempts (job_id, number)",
    """CREATE TABLE attempt_events (
        attempt_id TEXT NOT NULL REFERENCES attempts(id),
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        stage TEXT NOT NULL,
        level TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT,
        PRIMARY KEY (attempt_id, seq)
    )""",
    """CREATE TABLE artifacts (
        job_id TEXT NOT NULL REFERENCES training_jobs(id),
        name TEXT NOT NULL,
        attempt_id TEXT NOT NULL REFERENCES attempts(id),
        sha256 TEXT NOT NULL REFERENCES blobs(sha256),
        bytes INTEGER NOT NULL,
        uploaded_at REAL NOT NULL,
        PRIMARY KEY (job_id, name)
    )""",
))

KITS = Migration("core-2-kits", (
    """CREATE TABLE kits (
        key TEXT PRIMARY KEY,
        sha256 TEXT NOT NULL REFERENCES blobs(sha256),
        bytes INTEGER NOT NULL,
        name TEXT NOT NULL,
        record TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "ALTER TABLE training_jobs ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 3",
    "ALTER TABLE training_jobs ADD COLUMN base_model TEXT NOT NULL DEFAULT ''",
))
"""Kits built once per (source, build config): the build is byte-reproducible, so the same inputs give the same
archive and a second request reuses it."""

MIGRATIONS: list[Migration] = [CORE, KITS]
"""Every migration, in the order a new store applies them. Append with :func:`register`."""


def register(migration: Migration) -> Migration:
    """Append ``migration`` to :data:`MIGRATIONS` (once; its name must be new). Returns it."""
    if any(existing.name == migration.name for existing in MIGRATIONS):
        if migration in MIGRATIONS:
            return migration
        raise ValueError(f"a different migration named {migration.name!r} is already registered")
    MIGRATIONS.append(migration)
    return migration


def migrate(conn: sqlite3.Connection, root: Path) -> list[str]:
    """Apply every migration not yet applied (inside the caller's write transaction); return their names.

    Raises :class:`~blobkit.errors.JobError` for a store that has migrations this blobkit does not know.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    applied = {name for (name,) in conn.execute("SELECT name FROM schema_migrations")}
    unknown = sorted(applied - {migration.name for migration in MIGRATIONS})
    if unknown:
        raise JobError(f"{root}: the service store has migrations {unknown} that this blobkit does not know; "
                       "it was written by a newer blobkit: upgrade blobkit")
    done = []
    for migration in MIGRATIONS:
        if migration.name in applied:
            continue
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", (migration.name, time.time()))
        done.append(migration.name)
    conn.execute(f"PRAGMA user_version = {len(applied) + len(done)}")
    return done
