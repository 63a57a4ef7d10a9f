"""The company job store fails loudly and recovers (issue 24 item 6; shared/cases/evidence2/09-job-store-corrupt-row).

A damaged JSON cell names the job and the field and leaves every other job listable; a worker is judged dead by
its heartbeat, never by a process id that may be reused, so ``jobs cancel`` and ``jobs resume`` act.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blobkit.cli.app import app
from blobkit.company import CHECKS, JobStore
from blobkit.errors import BlobkitError, StoreCorruptError

IDENTITY = {"source": {"path": "/nowhere/world.json", "sha256": "0" * 64},
            "base_model": {"id": "tiny", "source": "tiny", "revision": None}, "config": {}}


def _store(tmp_path: Path, jobs: int = 2) -> tuple[Path, list[str]]:
    root = tmp_path / "jobs"
    with JobStore(root) as store:
        ids = [store.create_job(IDENTITY, CHECKS) for _ in range(jobs)]
    return root, ids


def _sql(root: Path, statement: str, *values: object) -> None:
    with sqlite3.connect(root / "jobs.sqlite") as conn:
        conn.execute(statement, values)


def _cli(*args: str) -> tuple[int, str]:
    """(exit code, output) as ``blobkit.cli.main`` gives them: a BlobkitError is one line and its exit code."""
    result = CliRunner().invoke(app, list(args), terminal_width=200)
    if isinstance(result.exception, BlobkitError):
        return result.exception.exit_code, result.output + f"error: {result.exception}"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


DAMAGES = {
    "identity cut short": ("UPDATE jobs SET identity = substr(identity, 1, 40) WHERE id = ?", "identity"),
    "checks cut short": ("UPDATE jobs SET checks = substr(checks, 1, 25) WHERE id = ?", "checks"),
    "results not JSON": ("UPDATE jobs SET results = 'garbage' WHERE id = ?", "results"),
    "outcome cut short": ("UPDATE jobs SET outcome = '{\"status\": \"fail' WHERE id = ?", "outcome"),
    "event data cut short": ("UPDATE events SET data = '{\"x\"' WHERE job_id = ?", "event 1 data"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cell_names_the_job_and_field_and_every_other_job_stays_listable(tmp_path: Path,
                                                                                  damage: str) -> None:
    root, (torn, healthy) = _store(tmp_path)
    statement, field = DAMAGES[damage]
    _sql(root, statement, torn)
    code, listed = _cli("jobs", "list", "--job-store", str(root))
    assert code == 0 and healthy in listed and torn in listed, listed
    code, out = _cli("jobs", "list", "--job-store", str(root), "--json")
    assert code == 0 and {job["id"] for job in json.loads(out)} == {torn, healthy}
    for command in ("show", "resume"):
        code, out = _cli("jobs", command, torn, "--job-store", str(root))
        assert code == 2 and "Traceback" not in out, out
        assert f"job {torn}: its {field} is damaged" in out, out
    code, out = _cli("jobs", "show", healthy, "--job-store", str(root), "--json")
    assert code == 0 and json.loads(out)["id"] == healthy


def test_a_damaged_checkpoint_names_its_stage_and_field(tmp_path: Path) -> None:
    root, (job, _) = _store(tmp_path)
    _sql(root, "INSERT INTO checkpoints VALUES (?, 'qualify', 0, ?, ?, '{}', '{\"kit\": {\"path\"')", job, time.time(),
         time.time())
    code, listed = _cli("jobs", "list", "--job-store", str(root))
    assert code == 0 and job in listed
    for command in ("show", "resume"):
        code, out = _cli("jobs", command, job, "--job-store", str(root))
        assert code == 2 and f"job {job}: its checkpoint qualify artifacts is damaged" in out, out
    with JobStore(root) as store, pytest.raises(StoreCorruptError, match="checkpoint qualify artifacts"):
        store.checkpoints(job)


def test_a_store_that_is_not_sqlite_is_one_line(tmp_path: Path) -> None:
    root, _ = _store(tmp_path)
    for path in root.glob("jobs.sqlite*"):
        path.unlink()
    (root / "jobs.sqlite").write_bytes(b"garbage" * 100)
    code, out = _cli("jobs", "list", "--job-store", str(root))
    assert code == 2 and "not a usable job store" in out and "Traceback" not in out


def _running_with(root: Path, job: str, worker: str, heartbeat_age_s: float) -> None:
    _sql(root, "UPDATE jobs SET status = 'running', worker = ?, heartbeat_at = ? WHERE id = ?", worker,
         time.time() - heartbeat_age_s, job)


def test_a_worker_whose_pid_is_reused_but_whose_heartbeat_is_stale_is_dead_so_cancel_acts(tmp_path: Path) -> None:
    import socket

    root, (job, _) = _store(tmp_path)
    _running_with(root, job, f"{socket.gethostname()}:{os.getpid()}", 3600)  # this very process: a reused pid
    code, out = _cli("jobs", "cancel", job, "--job-store", str(root))
    assert code == 0 and "is cancelled" in out, out
    with JobStore(root) as store:
        assert store.get(job)["status"] == "cancelled"


def test_a_worker_whose_pid_is_reused_but_whose_heartbeat_is_stale_is_dead_so_resume_claims(tmp_path: Path) -> None:
    import socket

    root, (job, _) = _store(tmp_path)
    _running_with(root, job, f"{socket.gethostname()}:{os.getpid()}", 3600)
    with JobStore(root) as store:
        store.claim(job, "otherhost:1")
        assert store.get(job)["worker"]["id"] == "otherhost:1"


def test_a_live_heartbeat_keeps_the_job_its_workers_whatever_its_pid(tmp_path: Path) -> None:
    from blobkit.errors import JobError

    root, (job, _) = _store(tmp_path)
    _running_with(root, job, "thishost:999999999", 1)  # no such pid, but it heartbeat a second ago
    with JobStore(root) as store:
        with pytest.raises(JobError, match="is running in worker"):
            store.claim(job, "otherhost:1")
        assert store.request_cancel(job) == "running"  # requested: the live worker stops at its next safe point
        assert store.cancel_reason(job) == "requested with jobs cancel"


def test_the_runner_heartbeats_from_a_thread_while_a_stage_polls_nothing(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from blobkit.company import runner as runner_module
    from blobkit.company.stages import StageOutcome

    root, (job,) = _store(tmp_path, 1)
    beats: list[float] = []

    def slow_stage(ctx: object) -> StageOutcome:
        with JobStore(root) as reader:
            for _ in range(3):
                time.sleep(0.3)
                beats.append(reader.conn.execute("SELECT heartbeat_at FROM jobs WHERE id = ?", (job,)).fetchone()[0])
        raise RuntimeError("stop here")

    monkeypatch.setattr(runner_module, "HEARTBEAT_S", 0.1)
    monkeypatch.setitem(runner_module.STAGE_FUNCTIONS, "qualify", slow_stage)
    monkeypatch.setattr(runner_module, "job_config", lambda job: runner_module.CompanyConfig())
    with JobStore(root) as store:
        store.claim(job, "w:1")
        runner_module.Runner(store, job, "w:1", lambda line: None).run()
    assert beats == sorted(beats) and beats[-1] > beats[0], beats
