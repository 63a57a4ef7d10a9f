"""The runpod target end to end against a real local HTTP server speaking RunPod's REST API v2 (tests/fake_runpod.py).

Every test ends with zero pods left on the fake: nothing blobkit launches may be left billing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_runpod import FakeRunPod
from runpod_support import (
    FAILING_TRAINER,
    KEY,
    SLOW_TRAINER,
    STORE_TOKEN,
    cli,
    every_file_text,
    run,
    settings_for,
    train_args,
)

from blobkit.errors import ChecksumError, ConfigError, TrainerError


def test_cli_runs_grpo_on_a_pod_and_brings_verified_results_back(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, stdout, err = cli(monkeypatch, capsys, train_args(kit_path, out, adapter, "--confirm-spend"), {
        "RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url, "BLOBKIT_RUNPOD_STORE_URL": fake.store_url,
        "BLOBKIT_RUNPOD_STORE_TOKEN": STORE_TOKEN, "BLOBKIT_RUNPOD_INSTALL": "0",
        "BLOBKIT_RUNPOD_POLL_SECONDS": "0.02", "BLOBKIT_RUNPOD_STATE_DIR": str(tmp_path / "state")})
    assert code == 0, err
    assert "base 0.250 (1/4 cases" in stdout and "-> rl 0.500 (2/4 cases" in stdout and "95 % CI" in stdout
    assert json.loads((out / "argv.json").read_text()) == ["train", "--config", "config.json", "--json"]
    pod_config = json.loads((out / "config_seen.json").read_text())
    assert pod_config["init_adapter"] == "init_adapter"
    assert pod_config["confirm_spend"] is False and pod_config["target"] == "local-torch"
    assert (out / "export" / "adapter_model.safetensors").stat().st_size == 64
    assert json.loads((out / "runpod" / "pod_plan.json").read_text()) == {"written_by": "pod"}
    assert "runpod" in json.loads((out / "plan.json").read_text())
    record = json.loads((out / "runpod" / "run.json").read_text())
    assert record["bundle_sha256"] != record["results_sha256"]
    assert fake.pods[record["pod_id"]].deleted_by in ("user", f"pod:{record['pod_id']}")
    assert KEY not in every_file_text(out) and KEY not in json.dumps(fake.created_bodies)
    assert not list((tmp_path / "state").glob("*.json")), "the job's lease is released"
    assert fake.live_pods() == []


def test_a_rate_limited_create_is_retried_and_makes_one_pod(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.fail_next("429", 2, method="POST", path="/v2/pods", retry_after="0")
    report = run(fake, tmp_path, kit_path, adapter)
    assert report.rl.pass_rate == 0.5 and report.runpod is not None and report.runpod.pod_id
    assert fake.count("POST", "/v2/pods") == 3 and len(fake.created_bodies) == 1
    assert fake.live_pods() == []


@pytest.mark.parametrize("kind", ["503", "drop", "drop_after"])
def test_a_create_with_an_unknown_outcome_never_makes_two_pods(
        kind: str, fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.fail_next(kind, 1, method="POST", path="/v2/pods")
    log: list[str] = []
    report = run(fake, tmp_path, kit_path, adapter, log=log)
    assert report.optimizer_updates == 3
    assert any("unknown outcome" in line for line in log)
    assert len(fake.created_bodies) == 1 and len(fake.pods) == 1
    assert fake.live_pods() == []


def test_server_errors_and_dropped_connections_while_polling_are_survived(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.fail_next("503", 2, method="GET", path="/v2/pods/*")
    fake.fail_next("drop", 8, method="GET", path="/v2/pods/*")
    log: list[str] = []
    report = run(fake, tmp_path, kit_path, adapter, log=log)
    assert report.rl.pass_rate == 0.5 and report.runpod is not None and report.runpod.pod_id
    assert any("status poll failed" in line for line in log), "the outage outlasted one request's retries"
    assert fake.live_pods() == []


def test_a_pod_stuck_in_provisioning_is_terminated_at_the_boot_timeout(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.behaviour = "stuck"
    with pytest.raises(TrainerError, match="did not reach RUNNING within 0.3 s"):
        run(fake, tmp_path, kit_path, adapter, settings=settings_for(fake, tmp_path, boot_timeout_seconds=0.3))
    assert [pod.deleted_by for pod in fake.pods.values()] == ["user"]
    assert fake.live_pods() == []


def test_a_pod_that_goes_to_error_is_terminated_with_its_log(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.behaviour = "error"
    with pytest.raises(TrainerError, match="went to ERROR.*no kernel image"):
        run(fake, tmp_path, kit_path, adapter)
    assert "CUDA error" in (tmp_path / "out" / "runpod" / "pod.log").read_text()
    assert fake.live_pods() == []


def test_the_host_terminates_the_pod_at_max_hours(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.behaviour = "hang"
    with pytest.raises(TrainerError, match="--max-hours"):
        run(fake, tmp_path, kit_path, adapter, runpod={"max_hours": 0.4 / 3600})
    assert [pod.deleted_by for pod in fake.pods.values()] == ["user"]
    assert fake.live_pods() == []


def test_the_pod_stops_itself_at_max_hours_and_says_so(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.train_script = SLOW_TRAINER
    settings = settings_for(fake, tmp_path, pod_margin_seconds=4.0)
    with pytest.raises(TrainerError, match="watchdog stopped it at --max-hours"):
        run(fake, tmp_path, kit_path, adapter, settings=settings, runpod={"max_hours": 5 / 3600})
    pod = next(iter(fake.pods.values()))
    assert pod.log_path is not None and "--max-hours reached" in pod.log_path.read_text()
    assert fake.live_pods() == []


def test_the_pod_terminates_itself_through_the_api_even_when_the_host_cannot_tell(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.train_script = SLOW_TRAINER
    fake.fail_next("503", 1, method="PUT", path="/store/*/done.json")
    settings = settings_for(fake, tmp_path, pod_margin_seconds=4.0)
    with pytest.raises(TrainerError, match="ended \\(GONE\\) without leaving results"):
        run(fake, tmp_path, kit_path, adapter, settings=settings, runpod={"max_hours": 5 / 3600})
    pod = next(iter(fake.pods.values()))
    assert pod.deleted_by == f"pod:{pod.data['id']}", "terminated with the pod-scoped key, by the pod itself"
    assert fake.live_pods() == []


def test_cancellation_terminates_the_pod(fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.behaviour = "hang"
    calls: list[int] = []

    def stop() -> str | None:
        calls.append(1)
        return "cancelled by the user" if len(calls) > 4 else None

    with pytest.raises(TrainerError, match="stopped \\(cancelled by the user\\)"):
        run(fake, tmp_path, kit_path, adapter, stop=stop)
    assert fake.live_pods() == []


def test_ctrl_c_terminates_the_pod(fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.behaviour = "hang"
    calls: list[int] = []

    def interrupt() -> str | None:
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return None

    with pytest.raises(KeyboardInterrupt):
        run(fake, tmp_path, kit_path, adapter, stop=interrupt)
    assert [pod.deleted_by for pod in fake.pods.values()] == ["user"]
    assert fake.live_pods() == []


def test_a_failed_training_step_is_reported_with_its_log(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.train_script = FAILING_TRAINER
    with pytest.raises(TrainerError, match="step train exited with code 1.*CUDA out of memory"):
        run(fake, tmp_path, kit_path, adapter)
    assert fake.live_pods() == []


def test_corrupted_results_are_refused(fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    original = fake._route_store

    def corrupting(method: str, path: str, who: str, body: bytes) -> Any:
        return original(method, path, who, body + b"!" if path.endswith("results.tar.zst") else body)

    fake._route_store = corrupting  # type: ignore[method-assign]
    with pytest.raises(ChecksumError, match="does not match"):
        run(fake, tmp_path, kit_path, adapter)
    assert not (tmp_path / "out" / "eval.json").exists()
    assert fake.live_pods() == []


def test_a_corrupted_bundle_is_refused_by_the_pod(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    original = fake._route_store

    def corrupting(method: str, path: str, who: str, body: bytes) -> Any:
        return original(method, path, who, body[:-1] + b"?" if path.endswith("bundle.tar.gz") else body)

    fake._route_store = corrupting  # type: ignore[method-assign]
    with pytest.raises(ChecksumError, match="the pod checked a bundle"):
        run(fake, tmp_path, kit_path, adapter)
    assert fake.live_pods() == []


def test_local_problems_are_caught_before_anything_is_created(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BLOBKIT_RUNPOD_STORE_URL"):
        run(fake, tmp_path, kit_path, adapter, settings=settings_for(fake, tmp_path, store_url=None))
    with pytest.raises(ConfigError, match="--init-adapter"):
        run(fake, tmp_path, kit_path, adapter, init_adapter=None)
    with pytest.raises(ConfigError, match="not in RunPod's GPU catalog"):
        run(fake, tmp_path, kit_path, adapter, runpod={"gpu_type": "NVIDIA Imaginary 9000"})
    with pytest.raises(ConfigError, match="not offered on RunPod's COMMUNITY cloud"):
        run(fake, tmp_path, kit_path, adapter, settings=settings_for(fake, tmp_path, cloud="COMMUNITY"),
            runpod={"gpu_type": "NVIDIA H100 80GB HBM3"})
    assert fake.count("POST", "/v2/pods") == 0 and fake.store == {} and fake.live_pods() == []
