"""The runpod target against a real local HTTP server that speaks RunPod's REST API v2 (tests/fake_runpod.py).

Every test ends with zero pods left on the fake: nothing blobkit launches may be left billing.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_runpod import FakeRunPod

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import main as cli_main
from blobkit.errors import ChecksumError, ConfigError, SpendGateError, TrainerError
from trainers.config import TrainConfig
from trainers.runpod import (
    POD_COMMAND,
    POD_PREFIX,
    JobRegistry,
    RunPodSettings,
    build_bundle,
    check_spend_gate,
    sweep,
    train_runpod,
)
from trainers.runpod_api import (
    RetryPolicy,
    RunPodAuthError,
    RunPodClient,
    RunPodNotFoundError,
    RunPodRequestError,
    RunPodUnavailableError,
    retry_after_seconds,
)
from world_format.kit import open_kit

KEY = "test-key"
STORE_TOKEN = "store-token"
FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, max_retry_after=0.05)

FAKE_TRAINER = r"""
import json, os, sys
args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]
assert os.path.isfile(os.path.join(opt("--kit"), "kit.json")), "the kit did not arrive"
assert os.path.isfile(os.path.join(opt("--init-adapter"), "adapter_config.json")), "the adapter did not arrive"
out = opt("--out")
os.makedirs(os.path.join(out, "export"), exist_ok=True)
json.dump(args, open(os.path.join(out, "argv.json"), "w"))
open(os.path.join(out, "export", "adapter_model.safetensors"), "wb").write(b"\0" * 64)
json.dump({"base": {"pass_rate": 0.25, "cases": 4}, "rl": {"pass_rate": 0.5, "cases": 4},
           "optimizer_updates": 3, "stopped_by": None}, open(os.path.join(out, "eval.json"), "w"))
json.dump({"written_by": "pod"}, open(os.path.join(out, "plan.json"), "w"))
print("fake GRPO finished")
"""
SLOW_TRAINER = "import time; time.sleep(30)"
FAILING_TRAINER = "import sys; print('CUDA out of memory'); sys.exit(1)"


@pytest.fixture(scope="module")
def kit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import write_world
    from worlds import small_world

    root = tmp_path_factory.mktemp("runpodkit")
    record = build_kit(write_world(root / "src", small_world()), root / "out",
                       BuildConfig(train_cases_per_task=4, eval_cases_per_task=2))
    return Path(record["kit"]["path"])


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    path = tmp_path / "sft" / "export"
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"r": 16}', encoding="utf-8")
    (path / "adapter_model.safetensors").write_bytes(b"\1" * 128)
    return path


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeRunPod]:
    with FakeRunPod(tmp_path / "pods", api_key=KEY, store_token=STORE_TOKEN, train_script=FAKE_TRAINER) as server:
        yield server


def settings_for(fake: FakeRunPod, tmp_path: Path, **overrides: Any) -> RunPodSettings:
    values: dict[str, Any] = {"api_url": fake.url, "store_url": fake.store_url, "store_token": STORE_TOKEN,
                              "install": False, "poll_seconds": 0.02, "boot_timeout_seconds": 2.0,
                              "network_grace_seconds": 3.0, "state_dir": tmp_path / "state", "retry": FAST_RETRY}
    return RunPodSettings(**{**values, **overrides})


def run(fake: FakeRunPod, tmp_path: Path, kit_path: Path, adapter: Path, *, settings: RunPodSettings | None = None,
        stop: Callable[[], str | None] | None = None, log: list[str] | None = None,
        **config: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"kit": kit_path, "method": "grpo", "target": "runpod", "out": tmp_path / "out",
                              "init_adapter": adapter, "confirm_spend": True, "steps": 5}
    train_config = TrainConfig(**{**values, **config})
    lines = log if log is not None else []
    with open_kit(kit_path) as kit:
        return train_runpod(train_config, kit, [], {"base": {"source": "hub", "name_or_path": train_config.base}},
                            lines.append, stop, settings=settings or settings_for(fake, tmp_path),
                            environ={"RUNPOD_API_KEY": KEY})


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        env: dict[str, str]) -> tuple[int, str, str]:
    """Run the real `blobkit` entry point in-process; return (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith(("RUNPOD_", "BLOBKIT_RUNPOD_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["blobkit", *args])
    try:
        cli_main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def train_args(kit_path: Path, out: Path, adapter: Path | None, *extra: str) -> list[str]:
    args = ["train", "--kit", str(kit_path), "--base", "Qwen/Qwen3-8B", "--method", "grpo", "--target", "runpod",
            "--out", str(out), "--steps", "5", *extra]
    return args + (["--init-adapter", str(adapter)] if adapter is not None else [])


def every_file_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- the client


def test_client_honours_retry_after_on_429(fake: FakeRunPod) -> None:
    fake.fail_next("429", 2, path="/v2/catalog/gpus", retry_after="1")
    slept: list[float] = []
    with RunPodClient(KEY, fake.url, sleep=slept.append) as client:
        gpus = client.gpu_types()
    assert slept == [1.0, 1.0]
    assert any(gpu["id"] == "NVIDIA GeForce RTX 4090" for gpu in gpus)
    assert fake.live_pods() == []


def test_client_backs_off_on_5xx_and_then_gives_up(fake: FakeRunPod) -> None:
    fake.fail_next("503", 10, path="/v2/pods")
    slept: list[float] = []
    policy = RetryPolicy(attempts=4, base_delay=0.5, max_delay=30)
    with RunPodClient(KEY, fake.url, retry=policy, sleep=slept.append) as client, \
            pytest.raises(RunPodUnavailableError, match="gave up after 4 attempts"):
        client.list_pods()
    assert slept == [0.5, 1.0, 2.0]
    assert fake.live_pods() == []


def test_client_never_repeats_a_create_whose_outcome_is_unknown(fake: FakeRunPod) -> None:
    fake.fail_next("503", 1, method="POST", path="/v2/pods")
    with RunPodClient(KEY, fake.url, retry=FAST_RETRY) as client, \
            pytest.raises(RunPodUnavailableError, match="may or may not"):
        client.create_pod({"name": "blobkit-x", "image": "img", "gpu": {"id": "NVIDIA GeForce RTX 4090"}})
    assert fake.count("POST", "/v2/pods") == 1
    assert fake.live_pods() == []


def test_client_errors_are_typed_picklable_and_never_show_the_key(fake: FakeRunPod) -> None:
    with RunPodClient("wrong-secret", fake.url, retry=FAST_RETRY) as client, \
            pytest.raises(RunPodAuthError) as auth:
        client.list_pods()
    assert "wrong-secret" not in str(auth.value) and "wrong-secret" not in repr(client)
    with RunPodClient(KEY, fake.url, retry=FAST_RETRY) as client:
        with pytest.raises(RunPodNotFoundError):
            client.get_pod("nope")
        with pytest.raises(RunPodRequestError, match="missing image") as invalid:
            client.create_pod({"name": "blobkit-x", "gpu": {"id": "NVIDIA GeForce RTX 4090"}})
        assert client.terminate_pod("nope") is False
    copy = pickle.loads(pickle.dumps(invalid.value))
    assert (type(copy), str(copy), copy.status) == (RunPodRequestError, str(invalid.value), 422)
    assert isinstance(copy, TrainerError) and isinstance(copy, ValueError)
    assert fake.live_pods() == []


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_seconds("12", now=0) == 12.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:01:00 GMT", now=30.0) == 30.0
    assert retry_after_seconds("soon", now=0) is None and retry_after_seconds(None, now=0) is None


# --------------------------------------------------------------------------- spend gate and plan through the CLI


def test_cli_refuses_without_an_api_key_and_creates_nothing(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, tmp_path / "out", adapter, "--confirm-spend"),
                       {"BLOBKIT_RUNPOD_API_URL": fake.url, "BLOBKIT_RUNPOD_STORE_URL": fake.store_url})
    assert code == 2
    assert "RUNPOD_API_KEY is not set" in err and "Nothing was created" in err
    assert "1 x NVIDIA GeForce RTX 4090 pod" in err and "at most 2 h" in err
    assert fake.requests == [] and fake.live_pods() == []


def test_cli_refuses_without_confirm_spend_and_states_the_cost(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, tmp_path / "out", adapter, "--gpu-count", "2"),
                       {"RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url})
    assert code == 2
    assert "--confirm-spend was not given" in err
    assert "$1.38/h, estimated maximum cost $2.76" in err and "RunPod GPU catalog" in err
    assert not (tmp_path / "out").exists()  # a refusal writes nothing, not even plan.json
    assert {method for method, _, _ in fake.requests} == {"GET"}
    assert fake.count("POST", "/v2/pods") == 0 and fake.live_pods() == []


def test_cli_refuses_sft_on_runpod_with_advice(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = train_args(kit_path, tmp_path / "out", None, "--confirm-spend")
    args[args.index("grpo")] = "sft"
    code, _, err = cli(monkeypatch, capsys, args, {"RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url,
                                                   "BLOBKIT_RUNPOD_STORE_URL": fake.store_url})
    assert code == 2 and "--init-adapter" in err and "SFT locally" in err
    assert fake.requests == [] and fake.live_pods() == []


def test_dry_run_writes_the_launch_plan(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, out, adapter, "--dry-run", "--max-hours", "3"),
                       {"RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url, "BLOBKIT_RUNPOD_DISK_GB": "60"})
    assert code == 0, err
    launch = json.loads((out / "plan.json").read_text())["runpod"]
    assert (launch["gpu_type"], launch["gpu_count"], launch["cloud"], launch["disk_gb"], launch["max_hours"]) == \
        ("NVIDIA GeForce RTX 4090", 1, "SECURE", 60, 3.0)
    assert launch["image"].startswith("runpod/pytorch:") and "BLOBKIT_POD_PROGRAM" in launch["start_command"]
    assert (launch["hourly_price_usd"], launch["estimated_max_cost_usd"]) == (0.69, 2.07)
    assert launch["price_source"].startswith(f"RunPod GPU catalog (GET {fake.url}/v2/catalog/gpus)")
    train = next(argv for argv in launch["pod_steps"] if "blobkit.cli" in argv)
    assert train[train.index("--method") + 1] == "grpo" and train[train.index("--target") + 1] == "local-torch"
    assert launch["missing"] == ["--confirm-spend", "BLOBKIT_RUNPOD_STORE_URL (transfer store the pod can reach)"]
    assert fake.count("POST", "/v2/pods") == 0 and fake.live_pods() == []


def test_dry_run_without_a_key_says_why_the_price_is_unknown(
        kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, _, _ = cli(monkeypatch, capsys, train_args(kit_path, out, adapter, "--dry-run"), {})
    launch = json.loads((out / "plan.json").read_text())["runpod"]
    assert code == 0 and launch["hourly_price_usd"] is None and launch["estimated_max_cost_usd"] is None
    assert "RUNPOD_API_KEY is not set" in launch["price_source"]


def test_the_runpod_commands_have_help_with_an_example() -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    result = CliRunner().invoke(app, ["runpod", "sweep", "--help"], terminal_width=200)
    assert result.exit_code == 0 and "Example:" in result.output


def test_spend_gate_passes_only_with_key_and_confirmation(kit_path: Path) -> None:
    config = TrainConfig(kit=kit_path, target="runpod", confirm_spend=True)
    check_spend_gate(config, {"RUNPOD_API_KEY": KEY})
    with pytest.raises(SpendGateError):
        check_spend_gate(config.model_copy(update={"confirm_spend": False}), {"RUNPOD_API_KEY": KEY})


# --------------------------------------------------------------------------- full lifecycle


def test_cli_runs_grpo_on_a_pod_and_brings_verified_results_back(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, stdout, err = cli(monkeypatch, capsys, train_args(kit_path, out, adapter, "--confirm-spend"), {
        "RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url, "BLOBKIT_RUNPOD_STORE_URL": fake.store_url,
        "BLOBKIT_RUNPOD_STORE_TOKEN": STORE_TOKEN, "BLOBKIT_RUNPOD_INSTALL": "0",
        "BLOBKIT_RUNPOD_POLL_SECONDS": "0.02", "BLOBKIT_RUNPOD_STATE_DIR": str(tmp_path / "state")})
    assert code == 0, err
    assert "base 0.250 -> rl 0.500 on 4 held-out cases" in stdout
    pod_args = json.loads((out / "argv.json").read_text())
    assert pod_args[pod_args.index("--init-adapter") + 1] == "init_adapter"
    assert "--confirm-spend" not in pod_args and pod_args[pod_args.index("--target") + 1] == "local-torch"
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
    assert report["rl"]["pass_rate"] == 0.5
    assert fake.count("POST", "/v2/pods") == 3 and len(fake.created_bodies) == 1
    assert fake.live_pods() == []


@pytest.mark.parametrize("kind", ["503", "drop", "drop_after"])
def test_a_create_with_an_unknown_outcome_never_makes_two_pods(
        kind: str, fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.fail_next(kind, 1, method="POST", path="/v2/pods")
    log: list[str] = []
    report = run(fake, tmp_path, kit_path, adapter, log=log)
    assert report["optimizer_updates"] == 3
    assert any("unknown outcome" in line for line in log)
    assert len(fake.created_bodies) == 1 and len(fake.pods) == 1
    assert fake.live_pods() == []


def test_server_errors_and_dropped_connections_while_polling_are_survived(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.fail_next("503", 2, method="GET", path="/v2/pods/*")
    fake.fail_next("drop", 8, method="GET", path="/v2/pods/*")
    log: list[str] = []
    report = run(fake, tmp_path, kit_path, adapter, log=log)
    assert report["rl"]["pass_rate"] == 0.5
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
        run(fake, tmp_path, kit_path, adapter, max_hours=0.4 / 3600)
    assert [pod.deleted_by for pod in fake.pods.values()] == ["user"]
    assert fake.live_pods() == []


def test_the_pod_stops_itself_at_max_hours_and_says_so(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.train_script = SLOW_TRAINER
    settings = settings_for(fake, tmp_path, pod_margin_seconds=4.0)
    with pytest.raises(TrainerError, match="watchdog stopped it at --max-hours"):
        run(fake, tmp_path, kit_path, adapter, settings=settings, max_hours=5 / 3600)
    pod = next(iter(fake.pods.values()))
    assert pod.log_path is not None and "--max-hours reached" in pod.log_path.read_text()
    assert fake.live_pods() == []


def test_the_pod_terminates_itself_through_the_api_even_when_the_host_cannot_tell(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    fake.train_script = SLOW_TRAINER
    fake.fail_next("503", 1, method="PUT", path="/store/*/done.json")
    settings = settings_for(fake, tmp_path, pod_margin_seconds=4.0)
    with pytest.raises(TrainerError, match="ended \\(GONE\\) without leaving results"):
        run(fake, tmp_path, kit_path, adapter, settings=settings, max_hours=5 / 3600)
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
        run(fake, tmp_path, kit_path, adapter, gpu_type="NVIDIA Imaginary 9000")
    with pytest.raises(ConfigError, match="not offered on RunPod's COMMUNITY cloud"):
        run(fake, tmp_path, kit_path, adapter, settings=settings_for(fake, tmp_path, cloud="COMMUNITY"),
            gpu_type="NVIDIA H100 80GB HBM3")
    assert fake.count("POST", "/v2/pods") == 0 and fake.store == {} and fake.live_pods() == []


def test_the_bundle_is_reproducible_and_ships_the_source_without_caches(
        kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    import tarfile

    config = TrainConfig(kit=kit_path, target="runpod", init_adapter=adapter, data=tmp_path / "rows.jsonl")
    settings = RunPodSettings(install=True, state_dir=tmp_path / "state")
    with open_kit(kit_path) as kit:
        first, second = (build_bundle(config, kit, [{"messages": []}], {"base": {"source": "hub"}}, settings,
                                      tmp_path / name / "bundle.tar.gz") for name in ("a", "b"))
    assert first.sha256 == second.sha256 and first.bytes == second.bytes
    with tarfile.open(first.path) as tar:
        names = tar.getnames()
    assert {"bundle/kit/kit.json", "bundle/init_adapter/adapter_config.json", "bundle/data/rows.jsonl",
            "bundle/src/pyproject.toml", "bundle/src/trainers/runpod.py"} <= set(names)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_start_command_survives_a_shell(tmp_path: Path) -> None:
    import shutil
    import subprocess

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    shell = shutil.which("sh")
    assert shell is not None
    result = subprocess.run([shell, "-c", POD_COMMAND], env={"PATH": str(tmp_path / "bin"),
                            "BLOBKIT_POD_PROGRAM": "print('pod program ran')"}, capture_output=True, text=True,
                            timeout=30, check=True)
    assert result.stdout.strip() == "pod program ran"


# --------------------------------------------------------------------------- sweep


def test_sweep_lists_unowned_blobkit_pods_and_terminates_only_when_confirmed(fake: FakeRunPod, tmp_path: Path) -> None:
    orphan = fake.add_pod(f"{POD_PREFIX}orphan")
    owned = fake.add_pod(f"{POD_PREFIX}running-job")
    foreign = fake.add_pod("someone-elses-notebook")
    registry = JobRegistry(tmp_path / "state")
    registry.claim(owned["name"], pod_id=owned["id"])
    with RunPodClient(KEY, fake.url, retry=FAST_RETRY) as client:
        listed = sweep(client, confirm=False, registry=registry)
        assert [(p["id"], p["terminated"]) for p in listed] == [(orphan["id"], False)]
        assert len(fake.live_pods()) == 3
        swept = sweep(client, confirm=True, registry=registry)
        assert [(p["id"], p["terminated"]) for p in swept] == [(orphan["id"], True)]
        assert {p["id"] for p in fake.live_pods()} == {owned["id"], foreign["id"]}
        registry.release(owned["name"])
        assert [p["id"] for p in sweep(client, confirm=True, registry=registry)] == [owned["id"]]
        client.terminate_pod(foreign["id"])
    assert fake.live_pods() == []


def test_cli_sweep_needs_yes_to_terminate(fake: FakeRunPod, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    orphan = fake.add_pod(f"{POD_PREFIX}left-behind", status="EXITED")
    env = {"RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url,
           "BLOBKIT_RUNPOD_STATE_DIR": str(tmp_path / "state")}
    code, stdout, _ = cli(monkeypatch, capsys, ["runpod", "sweep"], env)
    assert code == 0 and orphan["id"] in stdout and "--yes" in stdout
    assert len(fake.live_pods()) == 1
    code, stdout, _ = cli(monkeypatch, capsys, ["runpod", "sweep", "--yes", "--json"], env)
    assert code == 0 and json.loads(stdout)[0]["terminated"] is True
    code, _, err = cli(monkeypatch, capsys, ["runpod", "sweep"], {"BLOBKIT_RUNPOD_API_URL": fake.url})
    assert code == 2 and "RUNPOD_API_KEY is not set" in err
    assert fake.live_pods() == []
