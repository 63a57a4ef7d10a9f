"""local-mlx: adapter converters checked by logits, a real tiny-model training run, and a missing mlx."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from blobkit.errors import ConfigError, TargetUnavailableError  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.mlx_adapter import mlx_to_peft, peft_to_mlx  # noqa: E402
from trainers.run import run_training  # noqa: E402
from world_format.kit import open_kit  # noqa: E402

needs_mlx = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None, reason="mlx / mlx-lm not installed")
TOLERANCE = 1e-4
RANK = 4


@pytest.fixture(scope="module")
def rows(kit_path: Path) -> list[dict[str, Any]]:
    with open_kit(kit_path) as kit:
        return kit.jsonl("sft.jsonl")


@pytest.fixture(scope="module")
def tiny_dir(rows: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

    return build_tiny_model(row_texts(rows), tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


@pytest.fixture(scope="module")
def sample_ids(tiny_dir: Path, rows: list[dict[str, Any]]) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    row = next(r for r in rows if any(m.get("tool_calls") for m in r["messages"]))
    return list(tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True,
                                              return_dict=True)["input_ids"])


def torch_logits(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def torch_base(tiny_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True).eval()


def mlx_logits_with_adapter(tiny_dir: Path, adapter: Path, ids: list[int]) -> Any:
    """Logits of the base loaded by ``mlx_lm.load`` with the adapter applied by mlx-lm itself."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm import load

    from trainers.sft_mlx import mlx_config_overrides

    config = json.loads((tiny_dir / "config.json").read_text())
    model, _ = load(str(tiny_dir), model_config=mlx_config_overrides(config), adapter_path=str(adapter))
    return np.array(model(mx.array([ids]))[0])


def random_peft_adapter(tiny_dir: Path, out: Path) -> Path:
    """A saved all-linear PEFT LoRA whose B matrices are random (PEFT initialises them to zero)."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(torch_base(tiny_dir), LoraConfig(r=RANK, lora_alpha=3 * RANK, target_modules="all-linear",
                                                            lora_dropout=0.0, task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    model.save_pretrained(out)
    return out


def max_diff(left: Any, right: Any) -> float:
    import numpy as np

    return float(np.abs(np.asarray(left) - np.asarray(right)).max())


@needs_mlx
def test_a_peft_adapter_converted_to_mlx_gives_the_same_logits(tiny_dir: Path, sample_ids: list[int],
                                                                tmp_path: Path) -> None:
    from peft import PeftModel

    peft_dir = random_peft_adapter(tiny_dir, tmp_path / "peft")
    expected = torch_logits(PeftModel.from_pretrained(torch_base(tiny_dir), peft_dir).eval(), sample_ids)
    assert max_diff(expected, torch_logits(torch_base(tiny_dir), sample_ids)) > 0.1
    mlx_dir = peft_to_mlx(peft_dir, tmp_path / "mlx")
    assert json.loads((mlx_dir / "adapter_config.json").read_text())["lora_parameters"]["scale"] == 3.0
    assert max_diff(mlx_logits_with_adapter(tiny_dir, mlx_dir, sample_ids), expected) < TOLERANCE


@needs_mlx
def test_an_mlx_adapter_converted_to_peft_gives_the_same_logits(tiny_dir: Path, sample_ids: list[int],
                                                                tmp_path: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from peft import PeftModel

    from trainers.lora import MLX_SCALE as LORA_SCALE
    from trainers.sft_mlx import lora_mlx_model, save_mlx_adapter

    model = lora_mlx_model(tiny_dir, seed=0, lora_rank=RANK)
    keys = iter(mx.random.split(mx.random.key(1), 64))
    randomized = [(name, mx.random.normal(value.shape, key=next(keys)) * 0.2 if name.endswith("lora_b") else value)
                  for name, value in tree_flatten(model.trainable_parameters())]
    model.update(tree_unflatten(randomized))
    mlx_dir = save_mlx_adapter(model, tmp_path / "mlx", RANK)
    expected = mlx_logits_with_adapter(tiny_dir, mlx_dir, sample_ids)
    assert max_diff(expected, torch_logits(torch_base(tiny_dir), sample_ids)) > 0.1
    peft_dir = mlx_to_peft(mlx_dir, tmp_path / "peft", base_model_name_or_path=str(tiny_dir))
    config = json.loads((peft_dir / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (RANK, LORA_SCALE * RANK)
    assert {t.rsplit(".", 1)[-1] for t in config["target_modules"]} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    reloaded = PeftModel.from_pretrained(torch_base(tiny_dir), peft_dir).eval()
    assert max_diff(torch_logits(reloaded, sample_ids), expected) < TOLERANCE


def test_peft_to_mlx_and_back_restores_every_tensor_and_the_config(tiny_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    original = random_peft_adapter(tiny_dir, tmp_path / "peft")
    back = mlx_to_peft(peft_to_mlx(original, tmp_path / "mlx"), tmp_path / "back",
                       base_model_name_or_path=str(tiny_dir))
    before, after = load_file(original / "adapter_model.safetensors"), load_file(back / "adapter_model.safetensors")
    assert sorted(before) == sorted(after)
    assert all(before[k].equal(after[k]) for k in before)
    config, again = (json.loads((d / "adapter_config.json").read_text()) for d in (original, back))
    assert (again["r"], again["lora_alpha"], again["target_modules"]) == (
        config["r"], config["lora_alpha"], sorted(config["target_modules"]))


def test_a_dora_adapter_is_refused_with_a_reason(tiny_dir: Path, tmp_path: Path) -> None:
    peft_dir = random_peft_adapter(tiny_dir, tmp_path / "peft")
    config = json.loads((peft_dir / "adapter_config.json").read_text())
    (peft_dir / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(ConfigError, match="DoRA"):
        peft_to_mlx(peft_dir, tmp_path / "mlx")


@needs_mlx
def test_training_stops_at_a_step_boundary_and_is_seeded(tiny_dir: Path, rows: list[dict[str, Any]],
                                                         tmp_path: Path) -> None:
    from trainers.sft_mlx import train_lora_mlx

    def run(out: Path) -> Any:
        config = TrainConfig(epochs=2, learning_rate=1e-2, batch_size=2, seed=5, lora_rank=RANK, max_length=1024)
        return train_lora_mlx(tiny_dir, rows[:4], out, config, stop=lambda: "budget")

    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert (first.optimizer_steps, first.stopped_by, first.loss_history[-1][0]) == (1, "budget", 1)
    assert (first.adapter_dir / "adapters.safetensors").read_bytes() == (
        second.adapter_dir / "adapters.safetensors").read_bytes()


@needs_mlx
def test_a_tiny_local_mlx_run_through_the_cli_exports_a_trained_peft_adapter(
    kit_path: Path, tiny_dir: Path, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from blobkit.cli import app
    from trainers.export import verify_export

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows[:8]))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "--kit", str(kit_path), "--data", str(data), "--base", str(tiny_dir), "--method", "sft",
        "--target", "local-mlx", "--out", str(out), "--epochs", "1", "--batch-size", "4", "--lr", "1e-2",
        "--lora-rank", str(RANK), "--seed", "0", "--eval-limit", "2", "--max-new-tokens", "16", "--max-turns", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    assert set(report) == {"base", "sft", "optimizer_updates", "stopped_by", "train_seconds", "loss_history",
                           "kit_sha256", "sft_minus_base", "model_calls"}
    assert (report["optimizer_updates"], report["stopped_by"], report["base"]["cases"], report["sft"]["cases"]) == (
        2, None, 2, 2)
    assert [step for step, _ in report["loss_history"]] == [1, 2]
    manifest = verify_export(out / "export")
    assert manifest["kind"] == "lora" and manifest["base"]["name_or_path"] == str(tiny_dir.resolve())
    weights = load_file(out / "export" / "adapter_model.safetensors")
    lora_b = [tensor for name, tensor in weights.items() if "lora_B" in name]
    assert len(lora_b) == 2 * 7 and all(bool(tensor.abs().sum() > 0) for tensor in lora_b)
    assert (out / "training.png").is_file() and (out / "eval_cases_sft.json").is_file()
    assert (out / "mlx-adapter" / "adapters.safetensors").is_file()


def test_without_mlx_the_error_suggests_local_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("mlx", "mlx.core", "mlx.nn", "mlx.optimizers", "mlx_lm"):
        monkeypatch.setitem(sys.modules, name, None)
    config = TrainConfig(kit=tmp_path, method="sft", target="local-mlx", out=tmp_path / "out")
    with pytest.raises(TargetUnavailableError, match="--target local-torch"):
        run_training(config, cast(Any, None), [], {}, lambda line: None)
