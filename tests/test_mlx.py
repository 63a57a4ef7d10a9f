"""local-mlx: adapter converters checked by logits, real tiny-model SFT and GRPO runs, GRPO parity with torch,
and a missing mlx."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

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
GRPO_TOLERANCE = 1e-5
"""Largest absolute difference allowed between the mlx and torch GRPO loss and LoRA gradients (measured: about
3e-8 on the loss and 2e-7 on gradients as large as 0.1), and between the LoRA weights after one AdamW step at
lr 1e-2 (measured: about 3e-6)."""
RANK = 4
GRPO_REPORT_KEYS = {"sft", "rl", "rl_minus_sft", "optimizer_updates", "steps_completed", "steps_planned",
                    "stopped_by", "model_calls", "eval_model_calls", "active_seconds", "zero_variance_group_fraction",
                    "reward_history", "kit_sha256", "group_size", "shaping", "left_out", "eval_limit"}
"""eval.json of a GRPO run warm-started from an SFT export (local-torch writes the same, see test_grpo.py)."""


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

    with torch.random.fork_rng():  # PEFT draws the A matrices from the global generator: seeded, not run-order
        torch.manual_seed(0)
        model = get_peft_model(torch_base(tiny_dir), LoraConfig(
            r=RANK, lora_alpha=3 * RANK, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"))
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


@pytest.mark.slow
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
        "--lora-rank", str(RANK), "--seed", "0", "--eval-limit", "2", "--max-new-tokens", "16", "--max-turns", "2",
        "--short-episodes"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    assert set(report) == {"base", "sft", "optimizer_updates", "stopped_by", "train_seconds", "loss_history",
                           "kit_sha256", "sft_minus_base", "sft_vs_base", "model_calls", "left_out", "eval_limit"}
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


def test_without_mlx_the_error_suggests_local_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    kit_path: Path) -> None:
    for name in ("mlx", "mlx.core", "mlx.nn", "mlx.optimizers", "mlx_lm"):
        monkeypatch.setitem(sys.modules, name, None)
    # its token cap set, as a plan resolves it: the stand-in plan record holds nothing to resolve it from
    config = TrainConfig(kit=kit_path, method="sft", target="local-mlx", out=tmp_path / "out", max_new_tokens=16)
    with open_kit(kit_path) as kit, pytest.raises(TargetUnavailableError, match="--target local-torch"):
        run_training(config, kit, [], {}, lambda line: None)


# --------------------------------------------------------------------------------------------- GRPO on local-mlx


def random_mlx_made_peft_adapter(tiny_dir: Path, out: Path) -> Path:
    """An adapter trained (here: randomised) in mlx and converted to PEFT, as local-mlx SFT exports it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from trainers.sft_mlx import lora_mlx_model, save_mlx_adapter

    model = lora_mlx_model(tiny_dir, seed=0, lora_rank=RANK)
    keys = iter(mx.random.split(mx.random.key(2), 64))
    model.update(tree_unflatten([(name, mx.random.normal(value.shape, key=next(keys)) * 0.2
                                  if name.endswith("lora_b") else value)
                                 for name, value in tree_flatten(model.trainable_parameters())]))
    return mlx_to_peft(save_mlx_adapter(model, out / "mlx", RANK), out / "peft",
                       base_model_name_or_path=str(tiny_dir))


def lora_export(tiny_dir: Path, peft_dir: Path, out: Path, kit_sha256: str) -> Path:
    """A LoRA export (manifest and all) of ``peft_dir`` on the tiny base, as an SFT run leaves it."""
    import shutil

    from transformers import AutoTokenizer

    from trainers.export import export_model

    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(peft_dir)
    base = {"source": "local", "name_or_path": str(tiny_dir.resolve()), "revision": None}
    export = export_model(peft_dir, out, kind="lora", config={}, base=base, kit_sha256=kit_sha256)
    shutil.rmtree(peft_dir)
    return export


def torch_grads(model: Any) -> dict[str, Any]:
    """LoRA gradients of a PEFT model under mlx-lm's names and layout ((in, r) for A, (r, out) for B)."""
    out = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            key = name.removeprefix("base_model.model.").replace(".default.weight", "")
            out[key.replace("lora_A", "lora_a").replace("lora_B", "lora_b")] = parameter.grad.numpy().T
    return out


@needs_mlx
@pytest.mark.parametrize("made_by", ["local-torch", "local-mlx"])
def test_one_grpo_update_in_mlx_matches_torch_on_the_same_trajectories(
    made_by: str, kit_path: Path, tiny_dir: Path, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    import numpy as np
    import torch
    from mlx.utils import tree_flatten

    from trainers.episode_decode import ModelTurns
    from trainers.grpo import PolicySource, rl_cases, rollout
    from trainers.grpo_mlx import MLXGRPOBackend, MLXSampler, load_mlx_policy, policy_loss_and_grads
    from trainers.grpo_torch import TorchGRPOBackend, load_torch_policy, policy_loss

    adapter = (random_peft_adapter(tiny_dir, tmp_path / "peft") if made_by == "local-torch"
               else random_mlx_made_peft_adapter(tiny_dir, tmp_path))
    source = PolicySource({"source": "local", "name_or_path": str(tiny_dir), "revision": None}, adapter,
                          str(tiny_dir))
    config = TrainConfig(lora_rank=RANK, learning_rate=1e-2, seed=1)
    torch_model, tokenizer = load_torch_policy(source, config)
    mlx_model, _ = load_mlx_policy(source, config)
    with open_kit(kit_path) as kit:
        cases = rl_cases(kit, rows)
        runtime = kit.world().runtime()
        try:  # two groups; in each, one attempt sampled by torch and one by mlx
            torch_sampler = ModelTurns(torch_model, tokenizer, 16, 1.0, torch.Generator().manual_seed(1))
            mlx_sampler = MLXSampler(mlx_model, tokenizer, 16, 1.0, seed=1)
            trajectories = [rollout(sampler, runtime, case, 2) for case in cases[:2]
                            for sampler in (torch_sampler, mlx_sampler)]
        finally:
            runtime.close()
    weights = [0.5, -0.5, -0.25, 0.25]
    assert all(t.turns and t.turns[0].new_ids for t in trajectories)

    torch_model.zero_grad()
    torch_loss, torch_tokens, _ = policy_loss(torch_model, trajectories, weights)
    mlx_loss, grads, mlx_tokens = policy_loss_and_grads(mlx_model, trajectories, weights)
    assert torch_tokens == mlx_tokens > 0
    assert abs(float(torch_loss) - mlx_loss) < GRPO_TOLERANCE and abs(mlx_loss) > 1e-4
    expected, got = torch_grads(torch_model), dict(tree_flatten(grads))
    assert sorted(expected) == sorted(got) and len(got) == 2 * 7 * 2
    assert max(float(np.abs(expected[k]).max()) for k in expected) > 1e-2
    assert max(max_diff(expected[k], got[k]) for k in expected) < GRPO_TOLERANCE

    # and the whole update (clip at 1.0, one bias-corrected AdamW step) moves the weights alike
    torch_backend, mlx_backend = TorchGRPOBackend(config, source), MLXGRPOBackend(config, source)
    torch_backend.update(trajectories, weights)
    mlx_backend.update(trajectories, weights)
    before, after = (dict(tree_flatten(m.trainable_parameters())) for m in (mlx_model, mlx_backend.model))
    assert all(max_diff(after[key], before[key]) > 1e-3 for key in after)
    for name, parameter in torch_backend.model.named_parameters():
        if parameter.requires_grad:
            key = name.removeprefix("base_model.model.").replace(".default.weight", "")
            key = key.replace("lora_A", "lora_a").replace("lora_B", "lora_b")
            assert max_diff(np.array(after[key]), parameter.detach().numpy().T) < 10 * GRPO_TOLERANCE, key


@needs_mlx
def test_mlx_decoding_returns_the_token_ids_torch_decodes_greedily(tiny_dir: Path, sample_ids: list[int],
                                                                   tmp_path: Path) -> None:
    import mlx.core as mx

    from trainers.formats.hermes import HERMES
    from trainers.generation import decode, stop_ids
    from trainers.grpo import PolicySource
    from trainers.grpo_mlx import load_mlx_policy, mlx_decode
    from trainers.grpo_torch import load_torch_policy

    source = PolicySource({"source": "local", "name_or_path": str(tiny_dir), "revision": None},
                          random_peft_adapter(tiny_dir, tmp_path / "peft"), str(tiny_dir))
    config = TrainConfig(lora_rank=RANK)
    torch_model, tokenizer = load_torch_policy(source, config)
    prompt = sample_ids[:40]
    expected = decode(torch_model, prompt, stop_ids(tokenizer, HERMES), max_new_tokens=24)
    got, _ = mlx_decode(load_mlx_policy(source, config)[0], prompt, stop_ids(tokenizer, HERMES), max_new_tokens=24,
                        temperature=0.0, key=mx.random.key(0))
    assert got == expected and len(got.new_ids) > 0


@needs_mlx
def test_a_tiny_local_mlx_grpo_run_through_the_cli_updates_stops_at_the_call_budget_and_keeps_its_records(
    kit_path: Path, tiny_dir: Path, rows: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from blobkit.cli import app
    from trainers import grpo
    from trainers.export import verify_export

    real_rollouts = grpo.rollouts

    def coin_rollouts(policy: Any, runtime: Any, cases: Any, max_turns: int, reward: Any = "verdict") -> Any:
        """The real episodes, each rewarded by the parity of its first sampled token: a stand-in verdict that a
        random tiny model gets right half the time, so groups vary and updates happen."""
        items = real_rollouts(policy, runtime, cases, max_turns, reward)
        for item in items:
            item.reward = float(item.turns[0].new_ids[0] % 2)
        return items

    monkeypatch.setattr(grpo, "rollouts", coin_rollouts)
    with open_kit(kit_path) as kit:
        sha = kit.sha256
    start = lora_export(tiny_dir, random_peft_adapter(tiny_dir, tmp_path / "peft"), tmp_path / "sft" / "export", sha)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    # one prompt x 4 attempts x 2 turns: a step may make 8 model calls, so it only starts if they fit in 20
    result = CliRunner().invoke(app, [
        "train", "--world", str(kit_path), "--data", str(data), "--base", str(tiny_dir), "--init-adapter", str(start),
        "--out", str(out), "--steps", "6", "--batch-size", "4", "--group-size", "4", "--max-turns", "2",
        "--short-episodes", "--max-new-tokens", "8", "--eval-limit", "2", "--max-model-calls", "20", "--lr", "1e-2",
        "--seed", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    assert set(report) == GRPO_REPORT_KEYS
    assert report["stopped_by"] == "max_model_calls" and 1 <= report["steps_completed"] < 6
    assert report["model_calls"] <= 20 < report["model_calls"] + 8
    assert report["optimizer_updates"] >= 1 and report["rl_minus_sft"]["cases"] == 2
    steps = [json.loads(line) for line in (out / "rl_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, report["steps_completed"] + 1))
    assert sum(s["model_calls"] for s in steps) == report["model_calls"]
    assert sum(s["optimizer_update"] for s in steps) == report["optimizer_updates"]
    manifest = verify_export(out / "export")
    assert manifest["kind"] == "lora" and manifest["base"]["name_or_path"] == str(tiny_dir.resolve())
    before, after = (load_file(d / "adapter_model.safetensors") for d in (start, out / "export"))
    assert sorted(before) == sorted(after) and any(not before[k].equal(after[k]) for k in before)
    assert (out / "training.png").is_file() and (out / "eval_cases_rl.json").is_file()
    assert (out / "mlx-adapter" / "adapters.safetensors").is_file() and (out / "plan.json").is_file()
