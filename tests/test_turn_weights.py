"""Decision-weighted SFT loss (:mod:`trainers.turn_weights`): the first trained tokens of each assistant turn weigh
``--decision-weight``; the weighted loss is the hand-computed one, the shared-prefix batch gives the padded batch's
weighted loss and gradients, and a weight of 1 is the unweighted loss."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from test_shared_prefix import _rows, tiny_dir  # noqa: E402,F401

from trainers.config import TrainConfig  # noqa: E402
from trainers.turn_weights import turn_start_weights  # noqa: E402


def test_the_first_labels_of_each_turn_take_the_weight() -> None:
    import torch

    labels = torch.tensor([[-100, 5, 6, 7, -100, -100, 8, 9, -100],
                           [4, 4, -100, 3, 3, 3, 3, 3, 3]])
    weights = turn_start_weights(labels, 5.0, tokens=2)
    trained = labels != -100
    assert weights[trained].tolist() == [5, 5, 1, 5, 5, 5, 5, 5, 5, 1, 1, 1, 1]
    assert turn_start_weights(labels, 1.0)[trained].tolist() == [1.0] * int(trained.sum())


def _weighted_loss(model_dir: Path, tmp_path: Path, *, shared: bool, weight: float) -> tuple[float, dict[str, Any],
                                                                                              dict[str, Any]]:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from trainers.sft_torch import _assistant_token_loss, rows_to_dataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True, dtype=torch.float32)
    rows = _rows()
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=len(rows), assistant_only_loss=True,
                     use_cpu=True, report_to="none", max_length=1024, activation_checkpointing=False, seed=0)
    trainer = _assistant_token_loss(SFTTrainer, shared, weight)(
        model=model, args=args, train_dataset=rows_to_dataset(rows), processing_class=tokenizer,
        peft_config=LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, batch


def test_the_weighted_loss_is_the_hand_computed_one_shared_or_not(tiny_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    plain_loss, plain_grads, batch = _weighted_loss(tiny_dir, tmp_path, shared=False, weight=4.0)
    shared_loss, shared_grads, _ = _weighted_loss(tiny_dir, tmp_path, shared=True, weight=4.0)
    unweighted, _, _ = _weighted_loss(tiny_dir, tmp_path, shared=False, weight=1.0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets, weights = batch["labels"][:, 1:], turn_start_weights(batch["labels"], 4.0)[:, 1:]
    trained = targets != -100
    losses = F.cross_entropy(logits[trained].float(), targets[trained], reduction="none")
    assert plain_loss == pytest.approx(float((losses * weights[trained]).sum() / trained.sum()), abs=1e-5)
    assert unweighted == pytest.approx(float(losses.mean()), abs=1e-5)
    assert plain_loss > unweighted * 1.1  # the weight reached the loss: not the unweighted figure
    assert shared_loss == pytest.approx(plain_loss, abs=1e-5)
    assert plain_grads and sorted(shared_grads) == sorted(plain_grads)
    for name, grad in plain_grads.items():
        assert torch.allclose(shared_grads[name], grad, rtol=0, atol=1e-5), name


def test_a_decision_weight_where_no_weighted_loss_runs_is_refused_with_what_can() -> None:
    assert TrainConfig(method="sft", target="local-torch", decision_weight=3).unsupported() is None
    refusals = [TrainConfig(method="grpo", target="local-torch", decision_weight=3).unsupported(),
                TrainConfig(method="sft", target="local-mlx", decision_weight=3).unsupported()]
    assert all(r is not None and "--decision-weight" in r for r in refusals), refusals
    with pytest.raises(ValueError):
        TrainConfig(decision_weight=0.5)
