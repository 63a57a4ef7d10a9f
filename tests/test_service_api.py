"""The training-jobs API through the ASGI app (FastAPI's TestClient over a real store): the seed's contract,
workspace isolation on every route, keys, limits, claims under leases, uploads checked by sha256."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blobkit.service import ServiceStore, create_app
from blobkit.service.attempts import claim
from blobkit.service.environments import add_cluster_plane
from blobkit.service.recipes import recipe_sha256
from blobkit.service.records import Recipe

ROOT = Path(__file__).resolve().parents[1]
RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
SMALL_WORKER_JOB = {"launch": "worker", "base_model": "tiny", "train_cases_per_task": 2, "eval_cases_per_task": 2,
                    "epochs": 1, "steps": 1}


class Service:
    """A store, an app over it and the records the tests share."""

    def __init__(self, root: Path) -> None:
        self.store = ServiceStore(root)
        self.app = create_app(self.store, lease_seconds=1.0)
        self.key = self.store.create_key("acme")
        self.other_key = self.store.create_key("globex")
        self.client = self.as_key(self.key)
        response = self.client.post("/api/v1/twin/environments", content=RETAIL.read_bytes())
        assert response.status_code == 201, response.text
        self.env = response.json()
        self.env_id = self.env["env_id"]
        self.jobs = f"/api/v1/twin/environments/{self.env_id}/training-jobs"

    def as_key(self, key: str | None) -> TestClient:
        return TestClient(self.app, headers={"X-API-Key": key} if key else {})

    def worker(self, client: TestClient | None = None) -> tuple[str, TestClient]:
        made = (client or self.client).post("/api/v1/workers", json={"name": "w"})
        assert made.status_code == 201, made.text
        return made.json()["worker_id"], self.as_key(made.json()["token"])

    def rows(self, table: str) -> int:
        return int(self.store.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    made = Service(tmp_path_factory.mktemp("service") / "store")
    yield made
    made.store.close()


@pytest.fixture(scope="module")
def kit_job(service: Service) -> dict[str, Any]:
    response = service.client.post(service.jobs, json={})
    assert response.status_code == 201, response.text
    return dict(response.json())


# --------------------------------------------------------------------------- environments


def test_a_registered_world_shows_its_identity_tools_procedures_and_trainability(service: Service) -> None:
    env = service.env
    assert env["env_id"].startswith("env_") and env["kind"] == "world" and env["world"]["id"] == "timberline-retail"
    assert {"find_customer_by_email", "get_order"} <= {tool["name"] for tool in env["tools"]}
    assert env["procedures"]["identify"] == "find_customer_by_email"
    assert env["trainability"]["trainable"] is True and env["trainability"]["held_out_entities"] >= 20
    listed = service.client.get("/api/v1/twin/environments").json()["environments"]
    assert [e["env_id"] for e in listed] == [service.env_id]


def test_a_body_over_1_mib_is_413_saying_to_train_on_the_company_machine_and_nothing_is_written(
        service: Service) -> None:
    before = service.rows("environments"), service.rows("blobs")
    response = service.client.post("/api/v1/twin/environments", content=b" " * ((1 << 20) + 1))
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and "blobkit company train --source ./world.json" in error["message"]
    assert (service.rows("environments"), service.rows("blobs")) == before


def test_an_invalid_world_is_422_and_nothing_is_written(service: Service) -> None:
    before = service.rows("environments")
    world = json.loads(RETAIL.read_text())
    world["surprise"] = 1
    response = service.client.post("/api/v1/twin/environments", content=json.dumps(world).encode())
    assert response.status_code == 422 and "surprise" in response.json()["error"]["message"]
    assert service.rows("environments") == before


def test_a_cluster_plane_is_listed_but_any_training_request_is_409_and_builds_nothing(service: Service) -> None:
    plane = add_cluster_plane(service.store, "acme", "gateway")
    assert plane.env_id.startswith("tenv_")
    listed = {e["env_id"] for e in service.client.get("/api/v1/twin/environments").json()["environments"]}
    assert plane.env_id in listed
    before = service.rows("training_jobs"), service.rows("kits")
    for body in ({}, {"launch": "worker", "base_model": "tiny"}):
        response = service.client.post(f"/api/v1/twin/environments/{plane.env_id}/training-jobs", json=body)
        assert response.status_code == 409 and response.json()["error"]["code"] == "plane_not_trainable"
    assert (service.rows("training_jobs"), service.rows("kits")) == before


def test_an_expired_lease_refuses_new_training_but_reads_downloads_and_delete_keep_working(service: Service) -> None:
    env = service.client.post("/api/v1/twin/environments?lease_hours=0.0003", content=RETAIL.read_bytes()).json()
    jobs = f"/api/v1/twin/environments/{env['env_id']}/training-jobs"
    made = service.client.post(jobs, json={"eval_cases_per_task": 1, "train_cases_per_task": 1})
    assert made.status_code == 201, made.text
    time.sleep(max(0.0, env["lease_expires_at"] - time.time()) + 0.1)
    refused = service.client.post(jobs, json={})
    assert refused.status_code == 410 and refused.json()["error"]["code"] == "lease_expired"
    job_id = made.json()["job_id"]
    assert service.client.get(jobs).status_code == 200
    assert service.client.get(f"{jobs}/{job_id}").status_code == 200
    assert service.client.get(f"{jobs}/{job_id}/kit").status_code == 200
    assert service.client.delete(f"{jobs}/{job_id}").json()["status"] == "cancelled"


# --------------------------------------------------------------------------- training jobs


def test_a_kit_request_gets_the_seeds_record_and_defaults(kit_job: dict[str, Any]) -> None:
    assert kit_job["status"] == "kit_ready" and kit_job["launch"] == "manual" and kit_job["tasks_persisted"] is False
    assert kit_job["tasks_count"] > 0 and kit_job["sft_rows"] > 0 and kit_job["sft_source"] == "reference_chain_replay"
    assert set(kit_job["commands"]) == {"dry_run", "train", "runpod"}
    train = shlex.split(kit_job["commands"]["train"])
    flags = dict(zip(train[2::2], train[3::2], strict=False))
    assert (flags["--base"], flags["--method"], flags["--target"], flags["--lora-rank"], flags["--steps"],
            flags["--seed"]) == ("Qwen/Qwen3-8B", "grpo", "local-mlx", "16", "100", "42")
    post_trained = next(c for c in kit_job["checks"] if c["name"] == "post_trained_agent")
    assert post_trained["status"] == "not_run"


def test_the_kit_downloads_with_its_sha256_and_length(service: Service, kit_job: dict[str, Any]) -> None:
    response = service.client.get(kit_job["kit"]["download_url"])
    assert response.status_code == 200
    assert response.headers["x-content-sha256"] == hashlib.sha256(response.content).hexdigest()
    assert response.headers["x-content-sha256"] == kit_job["kit"]["sha256"]
    assert int(response.headers["content-length"]) == kit_job["kit"]["bytes"] == len(response.content)


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_the_dry_run_command_runs_as_printed_on_the_downloaded_kit(service: Service, kit_job: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    (tmp_path / kit_job["kit"]["name"]).write_bytes(service.client.get(kit_job["kit"]["download_url"]).content)
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(kit_job["commands"]["dry_run"], shell=True, cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads((tmp_path / "out" / kit_job["job_id"] / "plan.json").read_text())
    assert plan["config"]["base"] == "Qwen/Qwen3-8B" and plan["config"]["steps"] == 100


def test_a_second_kit_request_reuses_the_byte_identical_kit(service: Service, kit_job: dict[str, Any]) -> None:
    again = service.client.post(service.jobs, json={}).json()
    assert again["kit"]["sha256"] == kit_job["kit"]["sha256"] and again["job_id"] != kit_job["job_id"]


def test_a_worker_request_is_202_queued_with_the_seeds_worker_defaults_and_a_pinned_recipe(service: Service) -> None:
    response = service.client.post(service.jobs, json={"launch": "worker", "base_model": "tiny",
                                                       "eval_cases_per_task": 2, "train_cases_per_task": 2})
    assert response.status_code == 202, response.text
    job = response.json()
    config = job["recipe"]["config"]
    assert job["status"] == "queued" and job["launch"] == "worker"
    assert (config["sft"]["epochs"], config["rl"]["steps"], config["rl"]["group_size"],
            config["budgets"]["max_minutes"], config["budgets"]["max_model_calls"]) == (5, 4, 2, 30, 200)
    assert job["recipe"]["kit"]["sha256"] == job["kit"]["sha256"]
    assert job["recipe_sha256"] == recipe_sha256(Recipe.model_validate(job["recipe"]))
    plan = job["recipe"]["evaluation"]
    assert plan["worst_case_model_calls"] <= 200 and 0 < plan["cases_evaluated"] <= plan["held_out_cases_in_kit"]
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def test_an_unknown_base_is_400_listing_the_accepted_ids_and_nothing_is_written(service: Service) -> None:
    before = service.rows("training_jobs"), service.rows("kits")
    response = service.client.post(service.jobs, json={"base_model": "gpt-4o"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_base" and error["field"] == "base_model" and "Qwen/Qwen3-8B" in error["accepted"]
    assert (service.rows("training_jobs"), service.rows("kits")) == before


@pytest.mark.parametrize("body, field", [({"lora_rank": "big"}, "lora_rank"), ({"launch": "cron"}, "launch"),
                                         ({"steps": 0}, "steps"), ({"bogus": 1}, "bogus"),
                                         ("not json", None)])
def test_a_malformed_body_is_one_422_naming_the_field_and_nothing_is_written(service: Service, body: Any,
                                                                             field: str | None) -> None:
    before = service.rows("training_jobs")
    response = (service.client.post(service.jobs, content=body, headers={"content-type": "application/json"})
                if isinstance(body, str) else service.client.post(service.jobs, json=body))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error.get("field") == field
    assert service.rows("training_jobs") == before


def test_models_lists_the_catalog_with_vram_and_the_bases_workers_advertise(service: Service) -> None:
    _, worker = service.worker()
    assert worker.post("/api/v1/workers/hello", json={"bases": ["tiny"], "name": "box"}).status_code == 204
    models = service.client.get("/api/v1/models").json()
    assert any(m["id"] == "Qwen/Qwen3-8B" and m["vram_lora_bf16_4k_gb"] > 0 for m in models["open_weight"])
    assert any(w["bases"] == ["tiny"] and w["name"] == "box" for w in models["workers"])


# --------------------------------------------------------------------------- keys and workspaces, every route


def _paths(service: Service, kit_job: dict[str, Any]) -> list[tuple[str, str]]:
    """Every route of the document with this workspace's real ids filled in."""
    ids = {"env_id": service.env_id, "job_id": kit_job["job_id"], "name": "eval.json", "attempt_id": "att_0",
           # the Tinker API's (tests/test_tinker_api.py checks its isolation with real ids)
           "session_id": "tj-0000000000000000", "sampler_id": "tj-0000000000000000:sample:0",
           "run_id": "tj-0000000000000000:train:0"}
    document = service.client.get("/openapi.json").json()
    return [(method.upper(), path.format(**ids)) for path, operations in document["paths"].items()
            for method in operations]


def test_a_missing_or_wrong_key_is_401_on_every_route(service: Service, kit_job: dict[str, Any]) -> None:
    for key in (None, "tml-" + "0" * 64, "not-a-key"):
        client = service.as_key(key)
        for method, path in _paths(service, kit_job):
            response = client.request(method, path, json={})
            assert response.status_code == 401, (key, method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"


def test_another_workspaces_ids_are_not_found_on_every_route(service: Service, kit_job: dict[str, Any]) -> None:
    other = service.as_key(service.other_key)
    before = service.rows("training_jobs"), service.rows("environments")
    for method, path in _paths(service, kit_job):
        if path in ("/api/v1/models", "/api/v1/twin/environments", "/api/v1/workers", "/api/v1/training-jobs") \
                or path.startswith(("/api/v1/workers/", "/api/v1/attempts/")):
            continue  # no id of another workspace in the path: checked below
        if path.startswith("/tinker/api/v1/") and not any(
                part in path for part in ("/samplers/", "/sessions/", "/training_runs/", "/train_jobs/")):
            continue  # the Tinker API's routes without an id: tests/test_tinker_api.py checks them per workspace
        response = other.request(method, path, json={})
        assert response.status_code == 404, (method, path, response.text)
    assert other.get("/api/v1/twin/environments").json()["environments"] == []
    assert other.get("/api/v1/training-jobs").json()["jobs"] == []
    assert (service.rows("training_jobs"), service.rows("environments")) == before


def test_a_worker_of_another_workspace_claims_nothing_and_sees_no_attempt(service: Service) -> None:
    job = service.client.post(service.jobs, json=SMALL_WORKER_JOB).json()
    _, theirs = service.worker(service.as_key(service.other_key))
    assert theirs.post("/api/v1/workers/claim", json={"bases": ["tiny"]}).status_code == 204
    _, ours = service.worker()
    claimed = ours.post("/api/v1/workers/claim", json={"bases": ["tiny"]}).json()
    attempt = claimed["attempt"]["attempt_id"]
    for method, path in (("GET", f"/api/v1/attempts/{attempt}"), ("GET", f"/api/v1/attempts/{attempt}/source"),
                         ("POST", f"/api/v1/attempts/{attempt}/heartbeat")):
        assert theirs.request(method, path, json={"progress": {}, "usage": {}}).status_code == 404, path
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def test_a_user_key_on_a_worker_route_is_403(service: Service) -> None:
    response = service.client.post("/api/v1/workers/claim", json={"bases": ["tiny"]})
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"


# --------------------------------------------------------------------------- claims, leases, uploads


def test_two_workers_racing_for_one_job_one_claims_it_and_the_other_gets_nothing(service: Service) -> None:
    job = service.client.post(service.jobs, json=SMALL_WORKER_JOB).json()
    callers = [service.store.resolve_key(service.store.create_key("acme", "worker", wid))
               for wid in (service.worker()[0], service.worker()[0])]
    results: list[Any] = []
    barrier = threading.Barrier(len(callers))

    def race(caller: Any) -> None:
        barrier.wait()
        results.append(claim(service.store, caller, ["tiny"], 60.0))

    threads = [threading.Thread(target=race, args=(caller,)) for caller in callers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [r for r in results if r is not None]
    assert len(won) == 1 and won[0].job_id == job["job_id"] and results.count(None) == 1
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def _claimed(service: Service) -> tuple[dict[str, Any], TestClient, dict[str, Any]]:
    job = service.client.post(service.jobs, json=SMALL_WORKER_JOB).json()
    _, worker = service.worker()
    claimed = worker.post("/api/v1/workers/claim", json={"bases": ["tiny"]})
    assert claimed.status_code == 200, claimed.text
    return job, worker, claimed.json()


def test_a_tampered_upload_is_a_clear_error_and_nothing_is_stored(service: Service) -> None:
    job, worker, claimed = _claimed(service)
    attempt = claimed["attempt"]["attempt_id"]
    blobs = {p for p in service.store.blobs.root.rglob("*") if p.is_file()}
    data = b'{"pass_rate": 1.0}'
    response = worker.put(f"/api/v1/attempts/{attempt}/artifacts/eval.json", content=data,
                          headers={"X-Content-SHA256": hashlib.sha256(b"something else").hexdigest()})
    assert response.status_code == 400 and response.json()["error"]["code"] == "checksum_mismatch"
    assert {p for p in service.store.blobs.root.rglob("*") if p.is_file()} == blobs
    assert service.client.get(f"{service.jobs}/{job['job_id']}").json()["artifacts"] == []
    good = worker.put(f"/api/v1/attempts/{attempt}/artifacts/eval.json", content=data,
                      headers={"X-Content-SHA256": hashlib.sha256(data).hexdigest()})
    assert good.status_code == 201
    fetched = service.client.get(good.json()["download_url"])
    assert fetched.content == data and fetched.headers["x-content-sha256"] == hashlib.sha256(data).hexdigest()
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def test_a_worker_that_stops_heartbeating_loses_its_lease_and_the_job_returns_to_the_queue(service: Service) -> None:
    job, worker, claimed = _claimed(service)
    attempt = claimed["attempt"]["attempt_id"]
    time.sleep(1.3)  # the app's lease is 1 s
    record = service.client.get(f"{service.jobs}/{job['job_id']}").json()
    assert record["status"] == "queued" and record["attempts"][0]["status"] == "lost"
    _, second = service.worker()
    again = second.post("/api/v1/workers/claim", json={"bases": ["tiny"]}).json()
    assert again["job_id"] == job["job_id"] and again["attempt"]["number"] == 2
    late = worker.post(f"/api/v1/attempts/{attempt}/heartbeat", json={"progress": {}, "usage": {}})
    assert late.status_code == 409  # the first worker's lease is gone for good: another worker has the job
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def test_a_lost_attempt_nobody_replaced_is_revived_by_its_next_heartbeat(service: Service) -> None:
    job, worker, claimed = _claimed(service)
    time.sleep(1.3)
    assert service.client.get(f"{service.jobs}/{job['job_id']}").json()["status"] == "queued"
    beat = worker.post(f"/api/v1/attempts/{claimed['attempt']['attempt_id']}/heartbeat",
                       json={"progress": {"stage": "sft"}, "usage": {}})
    assert beat.status_code == 200
    assert service.client.get(f"{service.jobs}/{job['job_id']}").json()["status"] == "running"
    service.client.delete(f"{service.jobs}/{job['job_id']}")


def test_delete_cancels_a_queued_job_at_once_and_asks_a_running_worker_to_stop(service: Service) -> None:
    queued = service.client.post(service.jobs, json=SMALL_WORKER_JOB).json()
    assert service.client.delete(f"{service.jobs}/{queued['job_id']}").json()["status"] == "cancelled"
    job, worker, claimed = _claimed(service)
    record = service.client.delete(f"{service.jobs}/{job['job_id']}").json()
    assert record["status"] == "running" and record["cancel_requested"]
    beat = worker.post(f"/api/v1/attempts/{claimed['attempt']['attempt_id']}/heartbeat",
                       json={"progress": {}, "usage": {}}).json()
    assert beat["cancel_requested"] == record["cancel_requested"]


def test_a_packaged_world_uploads_as_tar_zst_with_the_same_world(service: Service, tmp_path: Path) -> None:
    from blobkit.service.sources import pack_source
    from world_format.loader import load_world
    from world_format.pack import write_package

    package = tmp_path / "package"
    write_package(load_world(RETAIL), package)
    data, form = pack_source(package, tmp_path)
    assert form == "package" and data[:4] == b"\x28\xb5\x2f\xfd"
    response = service.client.post("/api/v1/twin/environments", content=data,
                                   headers={"content-type": "application/zstd"})
    assert response.status_code == 201, response.text
    env = response.json()
    assert env["source_form"] == "package" and env["world"]["id"] == service.env["world"]["id"]
    assert env["world"]["sha256"] == service.env["world"]["sha256"]


def test_env_add_registers_a_world_from_disk_and_a_cluster_plane(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blobkit.cli.app import app

    runner, store = CliRunner(), str(tmp_path / "store")
    world = runner.invoke(app, ["serve", "env", "add", "--store", store, "--workspace", "acme", "--source",
                                str(RETAIL), "--json"])
    assert world.exit_code == 0, world.output
    assert json.loads(world.output)["trainability"]["trainable"] is True
    plane = runner.invoke(app, ["serve", "env", "add", "--store", store, "--workspace", "acme", "--cluster-plane",
                                "gateway"])
    assert plane.exit_code == 0 and plane.output.startswith("tenv_"), plane.output
    with ServiceStore(Path(store)) as opened:
        kinds = [row[0] for row in opened.conn.execute("SELECT kind FROM environments ORDER BY created_at")]
    assert kinds == ["world", "cluster_plane"]
