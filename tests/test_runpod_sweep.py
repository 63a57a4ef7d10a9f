"""Leftover pods: the sweep and the `blobkit runpod` commands (trainers/runpod/leftovers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_runpod import FakeRunPod
from runpod_support import FAST_RETRY, KEY, cli

from trainers.runpod import POD_PREFIX, JobRegistry, sweep
from trainers.runpod.api import RunPodClient


def test_the_runpod_commands_have_help_with_an_example() -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    result = CliRunner().invoke(app, ["runpod", "sweep", "--help"], terminal_width=200)
    assert result.exit_code == 0 and "Example:" in result.output


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
