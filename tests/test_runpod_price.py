"""The spend gate, the catalog price and the plan.json section of the runpod target, mostly through the CLI.

A refusal creates nothing on the fake RunPod (tests/fake_runpod.py) and writes nothing, not even plan.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_runpod import FakeRunPod
from runpod_support import KEY, cli, train_args

from blobkit.errors import SpendGateError
from trainers.config import TrainConfig
from trainers.runpod import check_spend_gate


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


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
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
    assert train[train.index("--config") + 1] == "config.json" and launch["config_file"].startswith("config.json")
    assert launch["train_command"] == "{python} -m blobkit.cli train --config config.json --json"
    assert (launch["pod_config"]["method"], launch["pod_config"]["target"]) == ("grpo", "local-torch")
    assert launch["pod_config"]["max_minutes"] == 148.75 and launch["pod_config"]["init_adapter"] == "init_adapter"
    assert launch["missing"] == ["--confirm-spend", "BLOBKIT_RUNPOD_STORE_URL (transfer store the pod can reach)"]
    assert fake.count("POST", "/v2/pods") == 0 and fake.live_pods() == []


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_dry_run_without_a_key_says_why_the_price_is_unknown(
        kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, _, _ = cli(monkeypatch, capsys, train_args(kit_path, out, adapter, "--dry-run"), {})
    launch = json.loads((out / "plan.json").read_text())["runpod"]
    assert code == 0 and launch["hourly_price_usd"] is None and launch["estimated_max_cost_usd"] is None
    assert "RUNPOD_API_KEY is not set" in launch["price_source"]


def test_spend_gate_passes_only_with_key_and_confirmation(kit_path: Path) -> None:
    config = TrainConfig(kit=kit_path, target="runpod", confirm_spend=True)
    check_spend_gate(config, {"RUNPOD_API_KEY": KEY})
    with pytest.raises(SpendGateError):
        check_spend_gate(config.model_copy(update={"confirm_spend": False}), {"RUNPOD_API_KEY": KEY})


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_gpus_n_prices_every_gpu_and_the_pod_trains_one_rank_per_gpu(
        fake: FakeRunPod, kit_path: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"RUNPOD_API_KEY": KEY, "BLOBKIT_RUNPOD_API_URL": fake.url}
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, tmp_path / "plan", adapter, "--gpus", "4",
                                                       "--dry-run"), environ)
    assert code == 0, err
    launch = json.loads((tmp_path / "plan" / "plan.json").read_text())["runpod"]
    assert (launch["gpu_count"], launch["hourly_price_usd"], launch["estimated_max_cost_usd"]) == (4, 2.76, 5.52)
    assert launch["pod_config"]["local_torch"]["processes"] == 4
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, tmp_path / "out", adapter, "--gpus", "4"), environ)
    assert code == 2 and "4 x NVIDIA GeForce RTX 4090 pod" in err and "$2.76/h, estimated maximum cost $5.52" in err
    code, _, err = cli(monkeypatch, capsys, train_args(kit_path, tmp_path / "odd", adapter, "--gpus", "3",
                                                       "--confirm-spend"), environ)
    assert code == 2 and "does not split over --gpus 3" in err
    assert fake.count("POST", "/v2/pods") == 0 and not (tmp_path / "out").exists()
