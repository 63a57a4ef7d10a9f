"""The one run skeleton: budgets stop every method at a step boundary, merged exports, replay verdicts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("torch")
pytest.importorskip("trl")

from typer.testing import CliRunner  # noqa: E402

from blobkit.cli import app  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.eval_record import TrainingReport  # noqa: E402
from trainers.export import load_export, verify_export  # noqa: E402
from trainers.plan import plan  # noqa: E402
from trainers.run import run_training  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402
from world_format.kit import open_kit  # noqa: E402


@pytest.fixture(scope="module")
def tiny(kit_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    with open_kit(kit_path) as kit:
        texts = row_texts(kit.rows())
    return build_tiny_model(texts, tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


def _run(kit_path: Path, out: Path, **values: Any) -> TrainingReport:
    config = TrainConfig(kit=kit_path, out=out, target="local-torch", eval_limit=2, max_turns=2, short_episodes=True,
                         max_new_tokens=16,
                         batch_size=2, **values)
    with open_kit(kit_path) as kit:
        rows = kit.rows()
        return run_training(config, kit, rows, plan(config, kit, rows, kit.path("sft.jsonl")), lambda line: None)


def test_max_minutes_stops_local_torch_sft_at_the_first_step_boundary_and_still_exports(
        kit_path: Path, tiny: Path, tmp_path: Path) -> None:
    report = _run(kit_path, tmp_path / "run", base=str(tiny), method="sft", full=True, epochs=3,
                  max_minutes=1e-9)
    assert report.stopped_by == "max_minutes" and report.optimizer_updates == 1
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["stopped_by"] == "max_minutes"
    assert verify_export(tmp_path / "run" / "export")["kind"] == "full"


def test_a_replay_that_its_verifier_fails_exits_1_and_says_so_in_json(kit_path: Path, tiny: Path,
                                                                     tmp_path: Path) -> None:
    _run(kit_path, tmp_path / "run", base=str(tiny), method="sft", full=True, max_minutes=1e-9)
    result = CliRunner().invoke(app, ["replay", "--model", str(tmp_path / "run" / "export"), "--kit", str(kit_path),
                                      "--json"])
    replayed = json.loads(result.stdout)
    assert replayed["passed"] is False and result.exit_code == 1


def test_a_merged_export_is_a_full_model_that_computes_what_the_adapter_does(kit_path: Path, tiny: Path,
                                                                             tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    report = _run(kit_path, tmp_path / "run", base=str(tiny), method="sft", lora_rank=4, learning_rate=5e-2,
                  warmup_ratio=0.0, max_minutes=1e-9, merge=True)
    assert report.optimizer_updates == 1
    adapter, tokenizer, _ = load_export(tmp_path / "run" / "export")
    merged, _, manifest = load_export(tmp_path / "run" / "export-merged")
    base = AutoModelForCausalLM.from_pretrained(tiny, use_safetensors=True).eval()
    assert manifest["kind"] == "full" and manifest["base"]["name_or_path"] == str(tiny.resolve())
    ids = torch.tensor([tokenizer("What is the status of order 107?")["input_ids"]])
    with torch.no_grad():
        trained, folded, untrained = (model(input_ids=ids).logits for model in (adapter, merged, base))
    assert not torch.allclose(trained, untrained, atol=1e-4)  # the adapter learned something to merge
    assert torch.allclose(trained, folded, atol=1e-4)


def test_merge_is_refused_for_a_full_weight_run() -> None:
    refusal = TrainConfig(full=True, merge=True, target="local-torch", method="sft").unsupported()
    assert refusal is not None and "--merge" in refusal
