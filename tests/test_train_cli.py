"""Training configuration, catalog errors, dry-run validation and export manifests (no training here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import ValidationError

from blobkit.errors import ChecksumError, ConfigError, TargetUnavailableError
from trainers.catalog import CATALOG, resolve_base
from trainers.config import TrainConfig
from trainers.export import export_model, verify_export
from trainers.plan import plan
from trainers.plan_record import PlanRecord
from trainers.run import run_training
from trainers.targets.local_torch import LocalTorchSettings
from trainers.targets.runpod import RunPodTargetSettings
from world_format.canonical import canonical_bytes
from world_format.kit import open_kit


def test_defaults_follow_the_seed_product() -> None:
    config = TrainConfig(kit=Path("k"))
    assert (config.base, config.method, config.target, config.lora_rank, config.steps, config.epochs,
            config.seed) == ("Qwen/Qwen3-8B", "grpo", "local-mlx", 16, 100, 8, 42)


def test_unknown_config_fields_are_refused() -> None:
    with pytest.raises(ValueError):
        TrainConfig.model_validate({"kit": "k", "learning_rte": 1})


def test_catalog_covers_the_promised_families() -> None:
    ids = {entry.id for entry in CATALOG}
    assert {"Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-1B-Instruct"} <= ids
    assert any(i.startswith("LiquidAI/LFM2") for i in ids)


def test_a_base_outside_the_catalog_lists_the_accepted_ids() -> None:
    with pytest.raises(ConfigError, match="Qwen/Qwen3-8B"):
        resolve_base("someone/secret-model")


@pytest.mark.parametrize(("method", "target", "advice"), [("sft", "runpod", "--init-adapter")])
def test_method_target_pairs_that_do_not_exist_fail_with_advice(method: str, target: str, advice: str) -> None:
    refusal = TrainConfig(kit=Path("k"), method=method, target=target).unsupported()  # type: ignore[arg-type]
    assert refusal is not None and advice in refusal
    with pytest.raises(TargetUnavailableError, match=advice):
        run_training(TrainConfig(kit=Path("k"), method=method, target=target), cast(Any, None), [], {},  # type: ignore[arg-type]
                     lambda line: None)


def test_grpo_runs_on_local_mlx_and_only_full_weights_are_refused_there_with_advice() -> None:
    assert TrainConfig(kit=Path("k"), method="grpo", target="local-mlx").unsupported() is None
    assert TrainConfig(kit=Path("k")).unsupported() is None  # the seed product's defaults
    full = TrainConfig(kit=Path("k"), method="grpo", target="local-mlx", full=True)
    refusal = full.unsupported()
    assert refusal is not None and "--full" in refusal and "--init-adapter" in refusal
    with pytest.raises(TargetUnavailableError, match="--init-adapter"):
        run_training(full, cast(Any, None), [], {}, lambda line: None)


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_dry_run_writes_a_plan(kit_path: Path, tmp_path: Path) -> None:
    config = TrainConfig(kit=kit_path, base="Qwen/Qwen2.5-0.5B-Instruct", method="sft", target="local-torch",
                         out=tmp_path, dry_run=True)
    with open_kit(kit_path) as kit:
        rows = kit.jsonl("sft.jsonl")
        record = plan(config, kit, rows, kit.path("sft.jsonl"))
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved == record.to_json() and record.rows == len(rows) and record.vram_estimate_gb == 4
    again = PlanRecord.read(tmp_path / "plan.json")  # plan.json reads back as the record it was, byte for byte
    assert again == record and canonical_bytes(again.to_json()) + b"\n" == (tmp_path / "plan.json").read_bytes()
    assert "rollout_budget" not in saved and "unsupported" not in saved  # what does not apply is absent, not null
    (tmp_path / "plan.json").write_text(json.dumps({**saved, "surprise": 1}))
    with pytest.raises(ValidationError, match="surprise"):
        PlanRecord.read(tmp_path / "plan.json")


def _bad_rows(rows: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    row = json.loads(json.dumps(rows[0]))
    call = next(m for m in row["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    if change == "unknown tool":
        call["name"] = "teleport"
    else:
        call["arguments"] = {key: "not-a-number" for key in call["arguments"]} or {"bogus": 1}
    return [row]


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
@pytest.mark.parametrize("change", ["unknown tool", "bad arguments"])
def test_dry_run_refuses_invalid_rows(kit_path: Path, tmp_path: Path, change: str) -> None:
    config = TrainConfig(kit=kit_path, base="Qwen/Qwen2.5-0.5B-Instruct", method="sft", target="local-torch",
                         out=tmp_path / "o", dry_run=True)
    with open_kit(kit_path) as kit:
        rows = [r for r in kit.jsonl("sft.jsonl") if any(m.get("tool_calls") for m in r["messages"])]
        with pytest.raises(ConfigError):
            plan(config, kit, _bad_rows(rows, change), kit.path("sft.jsonl"))
    assert not (tmp_path / "o" / "plan.json").exists()


def test_a_tampered_export_is_refused(tmp_path: Path) -> None:
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "model.safetensors").write_bytes(b"weights")
    (trained / "config.json").write_text("{}")
    export = export_model(trained, tmp_path / "export", kind="full", config={}, base={"source": "local"},
                          kit_sha256="0" * 64)
    assert verify_export(export)["kind"] == "full"
    (export / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(ChecksumError):
        verify_export(export)
    (export / "model.safetensors").write_bytes(b"weights")
    (export / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ChecksumError):
        verify_export(export)


def test_the_demo_passes_repeats_given_with_a_base_on_and_defaults_them_only_for_the_tiny_model() -> None:
    from blobkit.cli.train import resolve_config
    from blobkit.demo import training_flags

    def resolved(flags: list[str]) -> TrainConfig:
        preset = flags[flags.index("--preset") + 1]
        given = {flags[i][2:].replace("-", "_"): flags[i + 1] for i in range(0, len(flags), 2)
                 if flags[i] != "--preset"}
        return resolve_config(preset, None, given)

    tiny = resolved(training_flags(None, None, None, None))
    assert tiny.full and tiny.grounding_repeats == 3 and tiny.answer_quote_repeats == 2
    base = resolved(training_flags("Qwen/Qwen2.5-0.5B-Instruct", None, None, None))
    assert not base.full and base.grounding_repeats == 0 and base.answer_quote_repeats == 0
    given = resolved(training_flags("Qwen/Qwen2.5-0.5B-Instruct", "2", "1", "0"))
    assert given.epochs == 2 and given.grounding_repeats == 1
    assert given.answer_quote_repeats == 0


def test_train_help_shows_every_config_field_with_the_configs_own_default() -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    shown = " ".join(CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "2000"}).output.split())
    fields = [(name, info) for name, info in TrainConfig.model_fields.items() if name not in ("runpod", "local_torch")]
    # a target's nested settings: flags of their own
    fields += [*RunPodTargetSettings.model_fields.items(), *LocalTorchSettings.model_fields.items()]
    for name, info in fields:
        flag = {"kit": "--world", "learning_rate": "--lr"}.get(name, "--" + name.replace("_", "-"))
        assert flag in shown, name
        default = "none" if info.default is None else str(info.default)
        assert f"[default: ({default})]" in shown, (name, default)


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_the_seed_products_plain_dry_run_plans_grpo_on_local_mlx_with_its_memory_and_rollout_budget(
        kit_path: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["train", "--world", str(kit_path), "--out", str(out), "--dry-run"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "plan.json").read_text())
    assert (saved["config"]["method"], saved["config"]["target"], saved["config"]["base"]) == (
        "grpo", "local-mlx", "Qwen/Qwen3-8B")
    assert "unsupported" not in saved and "cannot run as configured" not in result.output
    # 100 steps x (8 // 2) prompts x 2 attempts x 6 turns
    # the turn cap derived from the kit: its longest case (2 calls and the answer) plus 2
    assert saved["episode_limit"]["derived"] and saved["config"]["max_turns"] == 3 + 2
    assert saved["rollout_budget"]["max_model_calls"] == 100 * 4 * 2 * 5 == 4000
    memory = saved["unified_memory"]
    assert memory["estimate_gb"] == 44 and memory["mac_memory_gb"] == 63 and "catalog" in memory["how"]
    assert "4000 model calls" in result.output and "63 GB" in result.output


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_a_full_weight_grpo_dry_run_on_local_mlx_writes_the_plan_and_says_what_to_do(kit_path: Path,
                                                                                    tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["train", "--world", str(kit_path), "--out", str(out), "--dry-run", "--full"])
    assert result.exit_code == 0, result.output
    assert "--init-adapter" in json.loads((out / "plan.json").read_text())["unsupported"]
    assert "cannot run as configured" in result.output
    refused = CliRunner().invoke(app, ["train", "--world", str(kit_path), "--out", str(tmp_path / "p"), "--full"])
    assert refused.exit_code != 0 and not (tmp_path / "p").exists()


def test_the_unified_memory_of_a_local_base_is_counted_from_its_files_and_architecture(tmp_path: Path) -> None:
    from trainers.memory import unified_memory_estimate

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "dtype": "bfloat16"}))
    (model / "model.safetensors").write_bytes(b"\0" * 3_000_000)
    config = TrainConfig(kit=Path("k"), base=str(model), max_length=1000, lora_rank=8)
    record = unified_memory_estimate(resolve_base(str(model)), config)
    parts = record.parts_gb
    assert parts is not None
    assert parts["weights"] == 0.003
    assert parts["kv_cache"] == round(2 * 2 * 2 * 16 * 1000 * 2 / 1e9, 3)
    assert parts["logits"] == round(1000 * 1000 * 12 / 1e9, 3)
    assert abs(record.estimate_gb - sum(parts.values())) < 0.01
    assert record.mac_memory_gb == 8 and "max_length 1000" in record.how
    sft = unified_memory_estimate(resolve_base(str(model)), config.model_copy(update={"method": "sft"}))
    assert sft.parts_gb is not None
    assert sft.parts_gb["kv_cache"] == 0 and sft.parts_gb["activations"] > parts["activations"]


def test_a_config_file_is_layered_between_the_preset_and_the_flags(tmp_path: Path) -> None:
    from blobkit.cli.train import resolve_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"epochs": 2, "batch_size": 16, "kit": "k"}))
    config = resolve_config("tiny", path, {"batch_size": 32, "seed": None})
    assert (config.full, config.epochs, config.batch_size, config.seed) == (True, 2, 32, 42)
    path.write_text(json.dumps({"epochz": 2}))
    with pytest.raises(ConfigError, match="epochz"):
        resolve_config(None, path, {})
