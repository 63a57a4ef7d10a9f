"""The scaling benchmark's worlds are valid and deterministic, and a tiny run reports every figure."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT

from blobkit.builder import BuildConfig, build_kit
from world_format.kit import open_kit
from world_format.loader import load_world

SIZE = 500


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/build_scaling.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("build_scaling", ROOT / "benchmarks" / "build_scaling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_a_scaled_world_is_a_valid_package_whose_own_tasks_still_hold(bench: ModuleType, tmp_path: Path) -> None:
    directory, rows = bench.write_scaled_world(SIZE, tmp_path / "world")
    assert all(rows[table] == SIZE for table in bench.ANCHOR_TABLES)
    loaded = load_world(directory)
    assert loaded.form == "package"
    assert {table: digest.rows for table, digest in loaded.seed_digests.items()} == rows
    record = build_kit(directory, tmp_path / "kit", BuildConfig(train_cases_per_task=3, eval_cases_per_task=1))
    with open_kit(Path(record["kit"]["path"])) as kit:
        authored = [r["rejected_because"] for r in kit.jsonl("rejected.jsonl") if r["source"] == "authored"]
    assert authored == [] and record["tasks_authored"] == len(loaded.world.tasks)


def test_scaled_worlds_are_deterministic(bench: ModuleType, tmp_path: Path) -> None:
    first, _ = bench.write_scaled_world(SIZE, tmp_path / "a")
    second, _ = bench.write_scaled_world(SIZE, tmp_path / "b")
    for name in ("world.json", "seed.sqlite", "manifest.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_a_tiny_benchmark_run_prints_every_figure(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--sizes", str(SIZE), "--repeats", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    (result,) = report["sizes"]
    assert result["size"] == SIZE and result["build_s"] > 0 and result["replay_ms"] > 0
    assert result["naive_replay_ms"] > 0 and result["episodes"] > 0
    assert set(result["stages_s"]) == {"load", "mint", "gate", "split", "replay", "write"}
    assert {"build_ratio", "execute_ratio", "naive_ratio", "floor_ratio", "cpu_bound_ratio"} <= set(report)
    assert result["floor_s"] > 0 and result["floor_cpu_s"] > 0 and result["cores"] >= 1
    bound = result["build_cpu_s"] / result["cores"] / result["floor_s"]  # of the rounded figures
    assert result["cpu_bound_ratio"] == pytest.approx(bound, rel=0.1)
