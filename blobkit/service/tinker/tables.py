"""The Tinker API's tables in the service store (migration ``tinker-1``) and the queries on them.

Every query binds its values and names the workspace it reads, so one workspace never sees another's
train jobs, runs or checkpoints. Policies and registered bases are written by the administrator's CLI
(``blobkit serve policy set``, ``blobkit serve bases add``); the rest by the API as the SDK calls it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from blobkit.errors import NotFoundError

from ..migrations import Migration, register
from ..store import ServiceStore, check_workspace
from .records import Checkpoint, Policy, RegisteredBase, TrainJob, Usage

MIGRATION = register(Migration("tinker-1", (
    """CREATE TABLE tinker_bases (
        name TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        added_at REAL NOT NULL
    )""",
    """CREATE TABLE tinker_policies (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        user TEXT NOT NULL DEFAULT '',
        models TEXT NOT NULL,
        max_lora_rank INTEGER NOT NULL,
        max_tokens INTEGER,
        deadline REAL,
        created_at REAL NOT NULL,
        PRIMARY KEY (workspace, user)
    )""",
    """CREATE TABLE tinker_train_jobs (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        owner TEXT NOT NULL,
        base_model TEXT,
        status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'errored', 'interrupted', 'expired')),
        created_at REAL NOT NULL,
        finished_at REAL,
        last_checkpoint TEXT,
        forward_backward_tokens INTEGER NOT NULL DEFAULT 0,
        sampled_tokens INTEGER NOT NULL DEFAULT 0,
        optimizer_steps INTEGER NOT NULL DEFAULT 0,
        wall_seconds REAL NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX tinker_train_jobs_workspace ON tinker_train_jobs (workspace, created_at)",
    """CREATE TABLE tinker_runs (
        model_id TEXT PRIMARY KEY,
        train_job_id TEXT NOT NULL REFERENCES tinker_train_jobs(id),
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        owner TEXT NOT NULL,
        base_model TEXT NOT NULL,
        lora TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE tinker_checkpoints (
        tinker_path TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        owner TEXT NOT NULL,
        train_job_id TEXT NOT NULL REFERENCES tinker_train_jobs(id),
        training_run_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('training', 'sampler')),
        purpose TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        base_model TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX tinker_checkpoints_run ON tinker_checkpoints (workspace, training_run_id, created_at)",
)))

JOB_COLUMNS = ("id, workspace, owner, base_model, status, created_at, finished_at, last_checkpoint, "
               "forward_backward_tokens, sampled_tokens, optimizer_steps, wall_seconds")
CHECKPOINT_COLUMNS = ("tinker_path, kind, training_run_id, train_job_id, workspace, owner, purpose, sha256, bytes, "
                      "base_model, created_at")


# ------------------------------------------------------------------------------------------------ bases


def add_base(store: ServiceStore, name: str, path: str, sha256: str) -> RegisteredBase:
    """Register (or re-register) the model directory ``path`` as base ``name``."""
    added = RegisteredBase(name=name, path=path, sha256=sha256, added_at=time.time())
    with store.write() as conn:
        conn.execute("INSERT OR REPLACE INTO tinker_bases (name, path, sha256, added_at) VALUES (?, ?, ?, ?)",
                     (added.name, added.path, added.sha256, added.added_at))
    return added


def get_base(store: ServiceStore, name: str) -> RegisteredBase | None:
    """The registered base called ``name``, or None."""
    row = store.conn.execute("SELECT name, path, sha256, added_at FROM tinker_bases WHERE name = ?",
                             (name,)).fetchone()
    return None if row is None else RegisteredBase(name=row[0], path=row[1], sha256=row[2], added_at=row[3])


def list_bases(store: ServiceStore) -> list[RegisteredBase]:
    """Every registered base, by name."""
    rows = store.conn.execute("SELECT name, path, sha256, added_at FROM tinker_bases ORDER BY name").fetchall()
    return [RegisteredBase(name=r[0], path=r[1], sha256=r[2], added_at=r[3]) for r in rows]


# --------------------------------------------------------------------------------------------- policies


def set_policy(store: ServiceStore, policy: Policy) -> Policy:
    """Store ``policy``, replacing the one for the same workspace and user."""
    with store.write() as conn:
        store.ensure_workspace(conn, check_workspace(policy.workspace))
        conn.execute("INSERT OR REPLACE INTO tinker_policies (workspace, user, models, max_lora_rank, max_tokens, "
                     "deadline, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (policy.workspace, policy.user or "", json.dumps(policy.models), policy.max_lora_rank,
                      policy.max_tokens, policy.deadline, policy.created_at))
    return policy


def _policy(row: Any) -> Policy:
    return Policy(workspace=row[0], user=row[1] or None, models=json.loads(row[2]), max_lora_rank=row[3],
                  max_tokens=row[4], deadline=row[5], created_at=row[6])


def policy_for(store: ServiceStore, workspace: str, key_id: str) -> Policy | None:
    """The policy that binds ``key_id`` of ``workspace``: its own, else the workspace's, else None."""
    rows = store.conn.execute("SELECT workspace, user, models, max_lora_rank, max_tokens, deadline, created_at "
                              "FROM tinker_policies WHERE workspace = ? AND user IN (?, '') ORDER BY user DESC",
                              (workspace, key_id)).fetchall()
    return _policy(rows[0]) if rows else None


def list_policies(store: ServiceStore, workspace: str | None = None) -> list[Policy]:
    """Every policy (of ``workspace`` when given)."""
    query = "SELECT workspace, user, models, max_lora_rank, max_tokens, deadline, created_at FROM tinker_policies"
    rows = (store.conn.execute(query + " WHERE workspace = ? ORDER BY user", (workspace,)) if workspace else
            store.conn.execute(query + " ORDER BY workspace, user")).fetchall()
    return [_policy(row) for row in rows]


def tokens_used(store: ServiceStore, policy: Policy) -> int:
    """Tokens the train jobs a policy binds have used since it was set."""
    query = ("SELECT COALESCE(SUM(forward_backward_tokens + sampled_tokens), 0) FROM tinker_train_jobs "
             "WHERE workspace = ? AND created_at >= ?")
    arguments: tuple[Any, ...] = (policy.workspace, policy.created_at)
    if policy.user:
        query, arguments = query + " AND owner = ?", (*arguments, policy.user)
    return int(store.conn.execute(query, arguments).fetchone()[0])


# ------------------------------------------------------------------------------------------- train jobs


def create_job(store: ServiceStore, job_id: str, workspace: str, owner: str) -> None:
    """A new running train job (one per SDK session)."""
    with store.write() as conn:
        conn.execute("INSERT INTO tinker_train_jobs (id, workspace, owner, status, created_at) "
                     "VALUES (?, ?, ?, 'running', ?)", (job_id, workspace, owner, time.time()))


def _job(row: Any) -> TrainJob:
    return TrainJob(train_job_id=row[0], workspace=row[1], owner=row[2], base_model=row[3], status=row[4],
                    created_at=row[5], finished_at=row[6], last_checkpoint=row[7],
                    usage=Usage(forward_backward_tokens=row[8], sampled_tokens=row[9], optimizer_steps=row[10],
                                wall_seconds=round(row[11], 3)))


def get_job(store: ServiceStore, workspace: str, job_id: str) -> TrainJob:
    """The train job ``job_id`` of ``workspace``; NotFoundError otherwise (another workspace's reads as missing)."""
    row = store.conn.execute(f"SELECT {JOB_COLUMNS} FROM tinker_train_jobs WHERE id = ? AND workspace = ?",
                             (job_id, workspace)).fetchone()
    if row is None:
        raise NotFoundError(f"no train job {job_id!r} in workspace {workspace!r}")
    return _job(row)


def list_jobs(store: ServiceStore, workspace: str) -> list[TrainJob]:
    """The workspace's train jobs, newest first."""
    rows = store.conn.execute(f"SELECT {JOB_COLUMNS} FROM tinker_train_jobs WHERE workspace = ? "
                              "ORDER BY created_at DESC, id", (workspace,)).fetchall()
    return [_job(row) for row in rows]


def finish_job(store: ServiceStore, job_id: str, status: str) -> None:
    """End a running train job with ``status`` (a job already ended keeps its first status)."""
    with store.write() as conn:
        conn.execute("UPDATE tinker_train_jobs SET status = ?, finished_at = ? WHERE id = ? AND status = 'running'",
                     (status, time.time(), job_id))


def add_usage(store: ServiceStore, job_id: str, *, forward_backward_tokens: int = 0, sampled_tokens: int = 0,
              optimizer_steps: int = 0, wall_seconds: float = 0.0) -> None:
    """Add to a train job's usage."""
    with store.write() as conn:
        conn.execute("UPDATE tinker_train_jobs SET forward_backward_tokens = forward_backward_tokens + ?, "
                     "sampled_tokens = sampled_tokens + ?, optimizer_steps = optimizer_steps + ?, "
                     "wall_seconds = wall_seconds + ? WHERE id = ?",
                     (forward_backward_tokens, sampled_tokens, optimizer_steps, wall_seconds, job_id))


# ------------------------------------------------------------------------------------------------- runs


def add_run(store: ServiceStore, model_id: str, job_id: str, workspace: str, owner: str, base_model: str,
            lora: dict[str, Any]) -> None:
    """Record a training run (a model of a session) and set its job's base model if it has none yet."""
    with store.write() as conn:
        conn.execute("INSERT OR REPLACE INTO tinker_runs (model_id, train_job_id, workspace, owner, base_model, lora, "
                     "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (model_id, job_id, workspace, owner, base_model, json.dumps(lora, sort_keys=True), time.time()))
        conn.execute("UPDATE tinker_train_jobs SET base_model = COALESCE(base_model, ?) WHERE id = ?",
                     (base_model, job_id))


def get_run(store: ServiceStore, workspace: str, model_id: str) -> dict[str, Any]:
    """A training run of ``workspace`` as a row dict; NotFoundError otherwise."""
    row = store.conn.execute("SELECT model_id, train_job_id, owner, base_model, lora, created_at FROM tinker_runs "
                             "WHERE model_id = ? AND workspace = ?", (model_id, workspace)).fetchone()
    if row is None:
        raise NotFoundError(f"no training run {model_id!r} in workspace {workspace!r}")
    return {"model_id": row[0], "train_job_id": row[1], "owner": row[2], "base_model": row[3],
            "lora": json.loads(row[4]), "created_at": row[5]}


def list_runs(store: ServiceStore, workspace: str) -> list[dict[str, Any]]:
    """Every training run of ``workspace``, newest first (as :func:`get_run` rows)."""
    ids = [r[0] for r in store.conn.execute("SELECT model_id FROM tinker_runs WHERE workspace = ? "
                                            "ORDER BY created_at DESC, model_id", (workspace,))]
    return [get_run(store, workspace, model_id) for model_id in ids]


# ------------------------------------------------------------------------------------------ checkpoints


def add_checkpoint(store: ServiceStore, checkpoint: Checkpoint, *, overwrite: bool) -> None:
    """Record ``checkpoint``; ConflictError-free: with ``overwrite`` a same-path record is replaced."""
    from blobkit.errors import ConflictError

    with store.write() as conn:
        if not overwrite and conn.execute("SELECT 1 FROM tinker_checkpoints WHERE tinker_path = ?",
                                          (checkpoint.tinker_path,)).fetchone():
            raise ConflictError(f"a checkpoint {checkpoint.tinker_path} already exists; save under another name")
        conn.execute(f"INSERT OR REPLACE INTO tinker_checkpoints ({CHECKPOINT_COLUMNS}) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (checkpoint.tinker_path, checkpoint.kind, checkpoint.training_run_id, checkpoint.train_job_id,
                      checkpoint.workspace, checkpoint.owner, checkpoint.purpose, checkpoint.sha256, checkpoint.bytes,
                      checkpoint.base_model, checkpoint.created_at))
        conn.execute("UPDATE tinker_train_jobs SET last_checkpoint = ? WHERE id = ?",
                     (checkpoint.tinker_path, checkpoint.train_job_id))


def _checkpoint(row: Any) -> Checkpoint:
    return Checkpoint(tinker_path=row[0], kind=row[1], training_run_id=row[2], train_job_id=row[3], workspace=row[4],
                      owner=row[5], purpose=row[6], sha256=row[7], bytes=row[8], base_model=row[9],
                      created_at=row[10])


def get_checkpoint(store: ServiceStore, workspace: str, tinker_path: str) -> Checkpoint:
    """The checkpoint at ``tinker_path`` in ``workspace``; NotFoundError otherwise (another workspace's reads as
    missing)."""
    row = store.conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM tinker_checkpoints WHERE tinker_path = ? "
                             "AND workspace = ?", (tinker_path, workspace)).fetchone()
    if row is None:
        raise NotFoundError(f"no checkpoint {tinker_path} in workspace {workspace!r}")
    return _checkpoint(row)


def list_checkpoints(store: ServiceStore, workspace: str, training_run_id: str | None = None) -> list[Checkpoint]:
    """The workspace's checkpoints (of one training run when given), newest first."""
    query = f"SELECT {CHECKPOINT_COLUMNS} FROM tinker_checkpoints WHERE workspace = ?"
    arguments: tuple[Any, ...] = (workspace,)
    if training_run_id is not None:
        query, arguments = query + " AND training_run_id = ?", (workspace, training_run_id)
    rows = store.conn.execute(query + " ORDER BY created_at DESC, tinker_path", arguments).fetchall()
    return [_checkpoint(row) for row in rows]
