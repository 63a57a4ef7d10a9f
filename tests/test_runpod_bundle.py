"""The job bundle the host ships to the pod (trainers/runpod/bundle.py)."""

from __future__ import annotations

from pathlib import Path

from trainers.config import TrainConfig
from trainers.runpod import RunPodSettings, build_bundle
from world_format.kit import open_kit


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
            "bundle/src/pyproject.toml", "bundle/src/trainers/runpod/pod_program.py"} <= set(names)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
