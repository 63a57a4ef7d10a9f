"""The service end to end with real processes on 127.0.0.1: ``blobkit serve`` on a free port, ``blobkit worker``
subprocesses training the tiny model on the retail example through the API; a SIGKILLed worker and a server
restart mid-job. Slow: minutes on two CPU cores (tiny model, 1 epoch, 1 GRPO step, 2+2 cases per task)."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from service_support import BLOBKIT, Server, create_key, env, start_server

ROOT = Path(__file__).resolve().parents[1]
RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
JOB = {"launch": "worker", "base_model": "tiny", "epochs": 1, "steps": 1, "train_cases_per_task": 2,
       "eval_cases_per_task": 2}
WAIT_S = 1200.0

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _setup(server: Server) -> tuple[str, str, str, str]:
    """(key, jobs path, job id, worker token): a world, a queued tiny worker job and a worker connection."""
    key = create_key(server.store, "acme")
    with server.client(key, timeout=600) as client:
        env_id = client.post("/api/v1/twin/environments", content=RETAIL.read_bytes()).json()["env_id"]
        jobs = f"/api/v1/twin/environments/{env_id}/training-jobs"
        created = client.post(jobs, json=JOB)
        assert created.status_code == 202, created.text
        token = client.post("/api/v1/workers", json={"name": "e2e"}).json()["token"]
    return key, jobs, created.json()["job_id"], token


def _worker(url: str, token: str, job_store: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*BLOBKIT, "worker", "--server", url, "--token", token, "--job-store", str(job_store),
                             "--bases", "tiny", "--poll", "0.5"], stdout=open(log, "a"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, text=True, env=env())


def _wait(read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            record = read()
        except Exception:  # noqa: BLE001 - the server may be restarting
            time.sleep(0.5)
            continue
        if done(record):
            return record
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _reader(server_url: Callable[[], str], key: str, path: str) -> Callable[[], dict[str, Any]]:
    import httpx

    return lambda: httpx.get(server_url() + path, headers={"X-API-Key": key}, timeout=30).json()


def test_serve_and_a_worker_train_the_tiny_model_on_retail_end_to_end(tmp_path: Path) -> None:
    server = start_server(tmp_path / "store", tmp_path / "serve.log", 0, "--lease-seconds", "30")
    try:
        key, jobs, job_id, token = _setup(server)
        worker = _worker(server.url, token, tmp_path / "worker-jobs", tmp_path / "worker.log")
        assert worker.wait(WAIT_S) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        with server.client(key) as client:
            job = client.get(f"{jobs}/{job_id}").json()
            eval_json = next(a for a in job["artifacts"] if a["name"] == "eval.json")
            fetched = client.get(eval_json["download_url"])
        shown = subprocess.run([*BLOBKIT, "jobs", "show", job_id, "--server", server.url, "--token", key, "--json"],
                               capture_output=True, text=True, env=env())
    finally:
        server.stop()
    assert job["status"] == "succeeded", job["outcome"]
    results = job["results"]
    for name in ("base", "sft", "rl"):
        assert results[name]["cases"] == job["recipe"]["evaluation"]["cases_evaluated"] > 0
        assert results[name]["entities"] > 0 and len(results[name]["interval_95"]) == 2
    assert results["rl_minus_sft"]["cases"] == results["rl"]["cases"]
    assert 0 < results["held_out"]["coverage"] <= 1
    assert job["replay"]["outcome"] in ("passed", "failed")
    post = next(c for c in job["checks"] if c["name"] == "post_trained_agent")
    assert post["status"] == ("passed" if job["replay"]["outcome"] == "passed" else "failed")
    assert job["usage"]["optimizer_updates"] > 0 and job["usage"]["model_calls"] <= 200
    assert job["attempts"][0]["status"] == "succeeded" and job["attempts"][0]["events"]
    assert hashlib.sha256(fetched.content).hexdigest() == eval_json["sha256"] == fetched.headers["x-content-sha256"]
    assert shown.returncode == 0 and json.loads(shown.stdout)["job_id"] == job_id


def test_a_sigkilled_worker_is_resumed_by_a_second_worker_and_a_server_restart_does_not_lose_the_job(
        tmp_path: Path) -> None:
    port, store, lease = _free_port(), tmp_path / "store", "6"
    servers = [start_server(store, tmp_path / "serve.log", port, "--lease-seconds", lease)]
    url = servers[0].url
    try:
        key, jobs, job_id, token = _setup(servers[0])
        read = _reader(lambda: url, key, f"{jobs}/{job_id}")
        first = _worker(url, token, tmp_path / "worker-jobs", tmp_path / "worker1.log")
        _wait(read, lambda job: bool(job.get("progress")) and job["progress"]["stage"] == "sft"
              and "kit" in job["progress"]["stages_completed"], "the first worker to reach SFT")
        first.send_signal(signal.SIGKILL)
        first.wait()
        lost = _wait(read, lambda job: job["attempts"][0]["status"] == "lost", "the lease to expire")
        assert lost["status"] == "queued"
        second = _worker(url, token, tmp_path / "worker-jobs", tmp_path / "worker2.log")
        _wait(read, lambda job: len(job["attempts"]) == 2 and job["progress"]["stage"] in ("rl", "evaluate"),
              "the second worker to reach RL")
        servers[0].stop()  # restart the server mid-job, on the same port and store
        time.sleep(2)
        servers.append(start_server(store, tmp_path / "serve.log", port, "--lease-seconds", lease))
        assert second.wait(WAIT_S) == 0, (tmp_path / "worker2.log").read_text()[-3000:]
        job = read()
    finally:
        for server in servers:
            server.stop()
    assert job["status"] == "succeeded", job["outcome"]
    one, two = job["attempts"]
    assert one["status"] == "lost" and two["status"] == "succeeded" and two["number"] == 2
    assert two["stages_reused"][:2] == ["qualify", "kit"]
    messages = [event["message"] for event in two["events"]]
    for stage in ("qualify", "kit"):
        assert f"stage {stage} started" not in messages
        assert any(m.startswith(f"stage {stage} skipped: completed at") for m in messages)
    assert "stage sft started" in messages and any("is gone" in m for m in messages)
    assert [c["stage"] for c in two["checkpoints"]] == ["qualify", "kit", "sft", "rl", "evaluate", "export", "replay"]


def test_delete_stops_a_supervised_worker_at_its_next_safe_point_and_it_takes_the_next_job(tmp_path: Path) -> None:
    server = start_server(tmp_path / "store", tmp_path / "serve.log", 0, "--lease-seconds", "20")
    try:
        key, jobs, first_job, token = _setup(server)
        with server.client(key, timeout=600) as client:
            second_job = client.post(jobs, json=JOB).json()["job_id"]
        worker = subprocess.Popen([*BLOBKIT, "worker", "--server", server.url, "--token", token, "--job-store",
                                   str(tmp_path / "worker-jobs"), "--bases", "tiny", "--poll", "0.5", "--supervise"],
                                  stdout=open(tmp_path / "worker.log", "a"),  # noqa: SIM115
                                  stderr=subprocess.STDOUT, text=True, env=env())
        read = _reader(lambda: server.url, key, f"{jobs}/{first_job}")
        _wait(read, lambda job: bool(job.get("progress")) and job["progress"]["stage"] == "sft", "SFT")
        with server.client(key) as client:
            asked = client.delete(f"{jobs}/{first_job}").json()
        assert asked["status"] == "running" and asked["cancel_requested"]
        cancelled = _wait(read, lambda job: job["status"] == "cancelled", "the worker to stop")
        nxt = _wait(_reader(lambda: server.url, key, f"{jobs}/{second_job}"), lambda job: job["status"] == "running",
                    "the supervised worker to take the next job")
        with server.client(key) as client:
            client.delete(f"{jobs}/{second_job}")
        _wait(_reader(lambda: server.url, key, f"{jobs}/{second_job}"), lambda job: job["status"] == "cancelled",
              "the second job to stop")
        assert worker.poll() is None  # supervising: still waiting for work
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        server.stop()
    attempt = cancelled["attempts"][0]
    assert attempt["status"] == "cancelled" and "cancel" in attempt["outcome"]["message"]
    assert [c["stage"] for c in attempt["checkpoints"]][:2] == ["qualify", "kit"]  # what was measured is kept
    assert nxt["attempts"][0]["worker_id"] == attempt["worker_id"]
