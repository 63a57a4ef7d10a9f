"""Training targets as plug-ins: the registry, the one place refusals are asked, the plan's target section."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any, ClassVar

import pytest

from blobkit.cli.train import resolve_config
from trainers.config import TrainConfig
from trainers.plan import plan
from trainers.plan_record import NotEstimated, PlanRecord, PlanSections, TargetPlan
from trainers.run import run_training
from trainers.targets import registry
from trainers.targets.base import Target
from world_format.kit import open_kit

ROOT = Path(__file__).resolve().parents[1]


def test_the_registered_targets_are_the_names_the_config_accepts() -> None:
    assert set(typing.get_args(registry.TargetName)) == set(registry.TARGETS)
    assert all(target.name == name for name, target in registry.TARGETS.items())


def test_no_module_compares_a_target_name_outside_its_target() -> None:
    comparison = re.compile(r"""target\s*[!=]=\s*["']|["'](local-torch|local-mlx|runpod)["']\s*[!=]=""")
    offenders = [f"{path.relative_to(ROOT)}:{number}" for folder in ("trainers", "blobkit")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if comparison.search(line)]
    assert offenders == []


def test_an_unknown_target_is_a_config_error_listing_the_registered_ones() -> None:
    from blobkit.errors import ConfigError

    with pytest.raises(ConfigError, match="local-torch, local-mlx, runpod"):
        registry.target_for("local-jax")


def test_each_targets_own_refusal_comes_before_the_shared_rule() -> None:
    mlx = TrainConfig(method="sft", target="local-mlx", full=True, merge=True).unsupported()
    assert mlx is not None and mlx.startswith("local-mlx trains LoRA adapters")
    torch = TrainConfig(method="sft", target="local-torch", full=True, merge=True).unsupported()
    assert torch is not None and torch.startswith("--merge merges")


def test_sft_refuses_an_init_adapter_it_would_not_start_from(tmp_path: Path) -> None:
    refusal = TrainConfig(method="sft", target="local-torch", init_adapter=tmp_path).unsupported()
    assert refusal is not None and refusal.startswith("--method sft trains a new adapter from --base")
    assert TrainConfig(method="sft", target="local-torch").unsupported() is None


class _Recording(Target):
    """A target that records what the planner and the runner asked it (no training)."""

    name: ClassVar[str] = "local-torch"
    calls: ClassVar[list[str]] = []

    def refusal(self, config: TrainConfig) -> str | None:
        self.calls.append("refusal")
        return None

    def plan(self, config: TrainConfig, kit: Any, base: Any, record: Any, row_tokens: Any) -> TargetPlan:
        self.calls.append("plan")
        made_up = NotEstimated(estimated=False, reason=f"made up for {record.rows} rows")
        return TargetPlan(name=self.name, needs=("nothing",), runs_here=True, sections=PlanSections(cost=made_up))

    def run(self, config: TrainConfig, kit: Any, rows: list[dict[str, Any]], plan_record: PlanRecord,
            log: Any, stop: Any) -> dict[str, Any]:
        self.calls.append("run")
        return {"ran_on": self.name, "planned": plan_record.cost}


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_plan_and_run_ask_the_registered_target_and_nothing_else(kit_path: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.TARGETS, "local-torch", _Recording())
    _Recording.calls.clear()
    config = TrainConfig(kit=kit_path, base="Qwen/Qwen2.5-0.5B-Instruct", method="sft", target="local-torch",
                         out=tmp_path / "o")
    with open_kit(kit_path) as kit:
        record = plan(config, kit, kit.rows(), kit.path("sft.jsonl"))
        result = run_training(config, kit, kit.rows(), record, lambda line: None)
    assert record.target.to_json() == {"name": "local-torch", "needs": ["nothing"], "runs_here": True,
                                       "why_not": None}
    assert result == {"ran_on": "local-torch", "planned": NotEstimated(estimated=False,
                                                                       reason=f"made up for {record.rows} rows")}
    assert json.loads((tmp_path / "o" / "plan.json").read_text())["cost"]["reason"] == f"made up for {record.rows} rows"
    assert _Recording.calls == ["refusal", "plan", "refusal", "run"]


@pytest.mark.parametrize(("target", "section"), [("local-mlx", "unified_memory"), ("runpod", "runpod")])
@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_a_dry_run_records_what_the_target_needs_and_why_it_cannot_run_here(
        target: str, section: str, kit_path: Path, adapter: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUNPOD_API_KEY", "BLOBKIT_RUNPOD_STORE_URL"):
        monkeypatch.delenv(name, raising=False)
    config = TrainConfig(kit=kit_path, method="grpo", target=target, init_adapter=adapter,  # type: ignore[arg-type]
                         out=tmp_path / "o", dry_run=True)
    with open_kit(kit_path) as kit:
        plan(config, kit, kit.rows(), kit.path("sft.jsonl"))
    saved = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert saved["target"]["name"] == target and saved["target"]["needs"] and section in saved
    if target == "runpod":
        assert saved["target"]["runs_here"] is False
        assert "RUNPOD_API_KEY" in saved["target"]["why_not"] and "--confirm-spend" in saved["target"]["why_not"]


def test_a_targets_settings_are_a_nested_section_layered_from_the_file_and_the_flags(tmp_path: Path) -> None:
    file = tmp_path / "config.json"
    file.write_text(json.dumps({"target": "runpod", "runpod": {"gpu_type": "NVIDIA A40", "max_hours": 1.5}}))
    config = resolve_config(None, file, {"runpod_gpu_count": 2, "runpod_max_hours": None})
    assert (config.runpod.gpu_type, config.runpod.gpu_count, config.runpod.max_hours) == ("NVIDIA A40", 2, 1.5)
    assert config.as_json()["runpod"] == {"gpu_type": "NVIDIA A40", "gpu_count": 2, "max_hours": 1.5}
