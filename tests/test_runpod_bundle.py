"""The job bundle the host ships to the pod (trainers/runpod/bundle.py) and the config it carries (commands.py)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from trainers.config import TrainConfig
from trainers.plan_record import BaseRecord
from trainers.runpod import RunPodSettings, build_bundle, pod_config, pod_steps
from world_format.kit import open_kit

HUB = BaseRecord(source="hub", name_or_path="Qwen/Qwen3-8B", revision=None)
"""A hub base as plan.json records it."""


def test_the_bundle_is_reproducible_and_ships_the_source_without_caches(
        kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    config = TrainConfig(kit=kit_path, target="runpod", init_adapter=adapter, data=tmp_path / "rows.jsonl")
    settings = RunPodSettings(install=True, state_dir=tmp_path / "state")
    with open_kit(kit_path) as kit:
        first, second = (build_bundle(config, kit, [{"messages": []}], HUB, settings,
                                      tmp_path / name / "bundle.tar.gz") for name in ("a", "b"))
    assert first.sha256 == second.sha256 and first.bytes == second.bytes
    with tarfile.open(first.path) as tar:
        names = tar.getnames()
    assert {"bundle/kit/kit.json", "bundle/init_adapter/adapter_config.json", "bundle/data/rows.jsonl",
            "bundle/src/pyproject.toml", "bundle/src/trainers/runpod/pod_program.py"} <= set(names)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_bundle_carries_the_run_config_with_pod_paths_as_config_json(
        kit_path: Path, adapter: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}", encoding="utf-8")
    config = TrainConfig(kit=kit_path, base=str(base), method="grpo", target="runpod", out=tmp_path / "out",
                         init_adapter=adapter, data=tmp_path / "rows.jsonl", steps=7, learning_rate=1e-5,
                         group_size=4, temperature=0.7, eval_limit=3, max_model_calls=50, confirm_spend=True,
                         dry_run=True, runpod={"max_hours": 1.0})
    settings = RunPodSettings(install=False, state_dir=tmp_path / "state")
    local = BaseRecord(source="local", name_or_path=str(base), revision="local")
    with open_kit(kit_path) as kit:
        bundle = build_bundle(config, kit, [{"messages": []}], local, settings, tmp_path / "bundle.tar.gz")
    with tarfile.open(bundle.path) as tar:
        member = tar.extractfile("bundle/config.json")
        assert member is not None
        shipped = TrainConfig.model_validate(json.loads(member.read()))
        assert "bundle/base/config.json" in tar.getnames()
    # one hour less the watchdog's margin (5%: 180 s), of which training gets 85%
    expected = config.model_copy(update={
        "kit": Path("kit"), "init_adapter": Path("init_adapter"), "base": "base", "data": Path("data/rows.jsonl"),
        "out": Path("out"), "method": "grpo", "target": "local-torch", "dry_run": False, "confirm_spend": False,
        "max_minutes": 48.45})
    assert shipped == expected == pod_config(config, local, settings)
    hub = pod_config(config.model_copy(update={"base": "Qwen/Qwen3-8B", "data": None}), HUB,
                     settings)
    assert (hub.base, hub.data) == ("Qwen/Qwen3-8B", None)


def test_the_pod_trains_with_the_shipped_config_and_no_rebuilt_training_flags(tmp_path: Path) -> None:
    from blobkit.cli.train import resolve_config

    steps = pod_steps(RunPodSettings(install=True, state_dir=tmp_path / "state"))
    assert [step["name"] for step in steps] == ["install", "train", "pack"]
    assert steps[1]["argv"] == ["{python}", "-m", "blobkit.cli", "train", "--config", "config.json", "--json"]
    flags = {"--" + name.replace("_", "-") for name in TrainConfig.model_fields} | {"--lr", "--world"}
    assert not [part for step in steps for part in step["argv"] if part in flags]
    shipped = pod_config(TrainConfig(kit=tmp_path, target="runpod", init_adapter=tmp_path, steps=3),
                         HUB, RunPodSettings(state_dir=tmp_path / "state"))
    (tmp_path / "config.json").write_text(json.dumps(shipped.as_json()), encoding="utf-8")
    assert resolve_config(None, tmp_path / "config.json", {}) == shipped, "the pod's CLI trains with it unchanged"
