"""Training jobs: create (a kit, or a queued worker recipe), list, read with progress and results, cancel.

A kit job (``launch: manual``) is ``kit_ready`` for ever: it never claims a trained agent. A worker job is a
:class:`~.records.Recipe`; workers claim it as attempts (:mod:`.attempts`), whose last report is the job's
progress, and whose finish sets its results, replay verdict, checks and status.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from typing import Any

from blobkit.company.stages import CHECKS
from blobkit.errors import NotFoundError
from world_format.canonical import canonical_json

from . import recipes
from .attempts import expire_leases, job_attempts
from .catalog import check_base
from .environments import get_environment, trainable_environment
from .kits import ensure_kit
from .records import (
    Artifact,
    Check,
    KitRef,
    Outcome,
    SourcePin,
    TrainingJob,
    TrainingJobList,
    TrainingJobRequest,
    Usage,
)
from .store import ServiceStore

POST_TRAINED = "post_trained_agent"
"""The check that a trained agent passed held-out cases and its replay; never passed by a kit."""
JOB_COLUMNS = ("id, env_id, status, launch, created_at, updated_at, recipe, recipe_sha256, created, cancel_reason, "
               "outcome, base_model")


def jobs_url(env_id: str, job_id: str) -> str:
    """The job's path under the API."""
    return f"/api/v1/twin/environments/{env_id}/training-jobs/{job_id}"


def create_job(store: ServiceStore, workspace: str, env_id: str, request: TrainingJobRequest) -> TrainingJob:
    """Create a kit (``manual``: 201) or a queued worker job (``worker``: 202); nothing is written on an error."""
    check_base(request.base_model)
    env = trainable_environment(store, workspace, env_id)
    job_id = "tj_" + secrets.token_hex(8)
    if request.launch == "manual":
        kit = ensure_kit(store, env, recipes.kit_build(request))
        ref = KitRef(name=kit.name, download_url=jobs_url(env_id, job_id) + "/kit", sha256=kit.sha256, bytes=kit.bytes)
        created: dict[str, Any] = {**kit.record, "kit": ref.model_dump(),
                                   "commands": recipes.kit_commands(request, kit.name, job_id).model_dump()}
        recipe_text, recipe_sha, status = canonical_json(request.model_dump(mode="json")), "", "kit_ready"
    else:
        config = recipes.worker_config(request)
        kit = ensure_kit(store, env, config.build)
        config, plan = recipes.eval_plan(request, int(kit.record["eval_cases"]),
                                         int(kit.record["longest_case_turns"]))
        ref = KitRef(name=kit.name, download_url=jobs_url(env_id, job_id) + "/kit", sha256=kit.sha256, bytes=kit.bytes)
        assert env.source_sha256 is not None and env.source_form is not None and env.world is not None
        source = SourcePin(sha256=env.source_sha256, bytes=store.blobs.existing(env.source_sha256).stat().st_size,
                           form=env.source_form, world_id=env.world.id)
        recipe = recipes.make_recipe(env_id, source, request.base_model, ref, config, plan, request.max_attempts)
        created = {**kit.record, "kit": ref.model_dump()}
        recipe_text, status = canonical_json(recipe.model_dump(mode="json")), "queued"
        recipe_sha = recipes.recipe_sha256(recipe)
    now = time.time()
    with store.write() as conn:
        conn.execute("INSERT INTO training_jobs (id, workspace, env_id, created_at, updated_at, launch, status, "
                     "recipe, recipe_sha256, kit_sha256, created, max_attempts, base_model) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (job_id, workspace, env_id, now, now, request.launch, status, recipe_text, recipe_sha,
                      kit.sha256, canonical_json(created), request.max_attempts, request.base_model))
    return get_job(store, workspace, env_id, job_id)


def _row(store: ServiceStore, workspace: str, env_id: str, job_id: str) -> tuple[Any, ...]:
    get_environment(store, workspace, env_id)
    row = store.conn.execute(f"SELECT {JOB_COLUMNS} FROM training_jobs WHERE id = ? AND workspace = ? AND env_id = ?",
                             (job_id, workspace, env_id)).fetchone()
    if row is None:
        raise NotFoundError(f"no training job {job_id!r} in environment {env_id} of workspace {workspace}")
    return tuple(row)


def _checks(launch: str, status: str, outcome: dict[str, Any] | None) -> list[Check]:
    if launch == "manual":
        return [Check(name="kit_built", status="passed", detail="minted, gated, split and replayed by the server"),
                Check(name=POST_TRAINED, status="not_run",
                      detail="a kit is trained by hand: nothing here says a trained agent passed anything")]
    if outcome and outcome.get("checks"):
        checks = [Check.model_validate(c) for c in outcome["checks"]]
    else:
        checks = [Check(name=name, status="not_run") for name in CHECKS]
    replay = (outcome or {}).get("replay") or {}
    if status == "succeeded" and replay.get("outcome") == "passed":
        final = Check(name=POST_TRAINED, status="passed", detail="trained, evaluated on held-out cases, replayed")
    elif status == "succeeded":
        final = Check(name=POST_TRAINED, status="failed",
                      detail=f"the job completed but its replay {replay.get('outcome', 'did not run')}")
    else:
        final = Check(name=POST_TRAINED, status="not_run", detail=f"the job is {status}")
    return [*checks, final]


def _artifacts(store: ServiceStore, env_id: str, job_id: str) -> list[Artifact]:
    rows = store.conn.execute("SELECT name, sha256, bytes, attempt_id FROM artifacts WHERE job_id = ? ORDER BY name",
                              (job_id,)).fetchall()
    return [Artifact(name=n, sha256=s, bytes=b, attempt_id=a, download_url=f"{jobs_url(env_id, job_id)}/artifacts/{n}")
            for n, s, b, a in rows]


def _record(store: ServiceStore, row: tuple[Any, ...], full: bool) -> TrainingJob:
    job_id, env_id, status, launch, created_at, updated_at, recipe_text, sha, created_text, cancel, outcome_text, \
        base = row
    where = f"training job {job_id}"
    created = store.cell(created_text, where, "created") or {}
    outcome = store.cell(outcome_text, where, "outcome")
    recipe = store.cell(recipe_text, where, "recipe") if launch == "worker" else None
    attempts = job_attempts(store, job_id, events=full) if launch == "worker" else []
    usage = None
    if launch == "worker":
        usage = Usage(active_minutes=round(sum(a.usage.active_minutes for a in attempts), 3),
                      model_calls=sum(a.usage.model_calls for a in attempts),
                      optimizer_updates=sum(a.usage.optimizer_updates for a in attempts),
                      tokens=sum(a.usage.tokens for a in attempts))
    fields = {k: created[k] for k in ("tasks_count", "tasks_minted", "tasks_rejected", "tasks_persisted", "sft_rows",
                                      "sft_source", "train_cases", "eval_cases")}
    worker_command = ("blobkit worker --server URL --token T (create a worker connection with POST /api/v1/workers)"
                      if launch == "worker" else None)
    return TrainingJob(job_id=job_id, env_id=env_id, status=status, launch=launch, created_at=created_at,
                       updated_at=updated_at, base_model=base, **fields, kit=created["kit"],
                       commands=created.get("commands"), recipe_sha256=sha or None, recipe=recipe,
                       progress=attempts[-1].progress if attempts else None, usage=usage,
                       results=(outcome or {}).get("results"), replay=(outcome or {}).get("replay"),
                       checks=_checks(launch, status, outcome), attempts=attempts,
                       artifacts=_artifacts(store, env_id, job_id), cancel_requested=cancel,
                       outcome=(outcome or {}).get("outcome"), worker_command=worker_command)


def get_job(store: ServiceStore, workspace: str, env_id: str, job_id: str) -> TrainingJob:
    """One job of the caller's environment, with every attempt and its events."""
    with store.write() as conn:
        expire_leases(conn, time.time())
    return _record(store, _row(store, workspace, env_id, job_id), full=True)


def list_jobs(store: ServiceStore, workspace: str, env_id: str) -> TrainingJobList:
    """The environment's kits and worker jobs, oldest first (attempts without their events)."""
    get_environment(store, workspace, env_id)
    with store.write() as conn:
        expire_leases(conn, time.time())
    rows = store.conn.execute(f"SELECT {JOB_COLUMNS} FROM training_jobs WHERE workspace = ? AND env_id = ? "
                              "ORDER BY created_at, id", (workspace, env_id)).fetchall()
    return TrainingJobList(jobs=[_record(store, tuple(row), full=False) for row in rows])


def cancel_job(store: ServiceStore, workspace: str, env_id: str, job_id: str,
               reason: str = "cancelled with DELETE") -> TrainingJob:
    """Cancel: at once when no worker runs it (kit, queued, lost lease); else the worker stops at its next safe
    point and marks it cancelled. Everything measured so far is kept. A finished job is left as it is."""
    _row(store, workspace, env_id, job_id)
    now = time.time()
    with store.write() as conn:
        expire_leases(conn, now)
        status = conn.execute("SELECT status FROM training_jobs WHERE id = ?", (job_id,)).fetchone()[0]
        if status in ("kit_ready", "queued"):
            outcome = {"outcome": Outcome(status="cancelled", message=f"{reason} while {status}").model_dump()}
            conn.execute("UPDATE training_jobs SET status = 'cancelled', cancel_reason = ?, outcome = ?, "
                         "updated_at = ? WHERE id = ?", (reason, canonical_json(outcome), now, job_id))
        elif status == "running":
            conn.execute("UPDATE training_jobs SET cancel_reason = ?, updated_at = ? WHERE id = ?",
                         (reason, now, job_id))
    return get_job(store, workspace, env_id, job_id)


def kit_blob(store: ServiceStore, workspace: str, env_id: str, job_id: str) -> tuple[str, KitRef]:
    """(path, record) of a job's kit archive."""
    row = _row(store, workspace, env_id, job_id)
    created = store.cell(row[8], f"training job {job_id}", "created") or {}
    kit = KitRef.model_validate(created["kit"])
    return str(store.blobs.existing(kit.sha256)), kit


def artifact_blob(store: ServiceStore, workspace: str, env_id: str, job_id: str, name: str) -> tuple[str, str]:
    """(path, sha256) of one uploaded artifact of the job."""
    _row(store, workspace, env_id, job_id)
    row = store.conn.execute("SELECT sha256 FROM artifacts WHERE job_id = ? AND name = ?", (job_id, name)).fetchone()
    if row is None:
        raise NotFoundError(f"job {job_id} has no artifact {name!r} (GET the job to list its artifacts)")
    return str(store.blobs.existing(row[0])), row[0]


def job_for_worker(conn: sqlite3.Connection, job_id: str) -> tuple[str, str]:
    """(workspace, env_id) of a job (used by the attempt routes, which check the worker's workspace)."""
    row = conn.execute("SELECT workspace, env_id FROM training_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no training job {job_id!r}")
    return row[0], row[1]


def env_of(store: ServiceStore, workspace: str, job_id: str) -> str:
    """The environment of a job of ``workspace``; NotFoundError otherwise."""
    row = store.conn.execute("SELECT env_id FROM training_jobs WHERE id = ? AND workspace = ?",
                             (job_id, workspace)).fetchone()
    if row is None:
        raise NotFoundError(f"no training job {job_id!r} in workspace {workspace}")
    return str(row[0])


def list_workspace_jobs(store: ServiceStore, workspace: str) -> TrainingJobList:
    """Every job of the workspace, over all its environments, oldest first."""
    envs = [row[0] for row in store.conn.execute("SELECT id FROM environments WHERE workspace = ? "
                                                 "ORDER BY created_at, id", (workspace,))]
    listed = [job for env_id in envs for job in list_jobs(store, workspace, env_id).jobs]
    return TrainingJobList(jobs=sorted(listed, key=lambda job: (job.created_at, job.job_id)))
