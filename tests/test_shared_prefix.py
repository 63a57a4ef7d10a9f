"""Shared-prefix SFT (issue 29 lever 2): the batch's shared prefix runs once, with the padded batch's loss and
gradients to 1e-5, on the tiny model, full-weight and LoRA."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from test_trainers_tiny import lookup_row  # noqa: E402

from trainers.config import TrainConfig  # noqa: E402
from trainers.shared_prefix import labelled_nll, shared_prefix_length  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = [lookup_row(3000 + 11 * i) for i in range(40)]
    return build_tiny_model(row_texts(rows), tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=2, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


def _rows() -> list[dict[str, Any]]:
    rows = [lookup_row(4000 + 37 * i) for i in range(5)]
    rows[1]["messages"][1]["content"] = "Hello there, could you please tell me the status of order 4037 today?"
    return rows


def _loss_and_gradients(tiny_dir: Path, rows: list[dict[str, Any]], tmp_path: Path, *, lora: bool,
                        shared: bool) -> tuple[float, dict[str, Any], dict[str, Any]]:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from trainers.sft_torch import _assistant_token_loss, rows_to_dataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True, dtype=torch.float32)
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=len(rows), assistant_only_loss=True,
                     use_cpu=True, report_to="none", max_length=1024, activation_checkpointing=False, seed=0)
    peft_config = LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM") if lora else None
    trainer = _assistant_token_loss(SFTTrainer, shared)(model=model, args=args, train_dataset=rows_to_dataset(rows),
                                                        processing_class=tokenizer, peft_config=peft_config)
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, batch


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_shared_prefix_batch_has_the_padded_batchs_loss_and_gradients(tiny_dir: Path, tmp_path: Path,
                                                                          lora: bool) -> None:
    import torch

    rows = _rows()
    padded_loss, padded_grads, batch = _loss_and_gradients(tiny_dir, rows, tmp_path, lora=lora, shared=False)
    shared_loss, shared_grads, _ = _loss_and_gradients(tiny_dir, rows, tmp_path, lora=lora, shared=True)
    prefix = shared_prefix_length(batch["input_ids"], batch["attention_mask"])
    assert prefix > 10 and (batch["attention_mask"] == 0).any()  # a real shared prefix, and padding
    assert padded_grads and sorted(shared_grads) == sorted(padded_grads)
    assert shared_loss == pytest.approx(padded_loss, abs=1e-5)
    for name, grad in padded_grads.items():
        assert torch.allclose(shared_grads[name], grad, rtol=0, atol=1e-5), name


def test_a_trained_token_right_after_the_prefix_is_scored_for_every_row(tiny_dir: Path) -> None:
    """Rows that share everything up to the first trained token: the prefix's last position predicts each row's own
    first token, and the loss still equals the unshared one."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainers.shared_prefix import shared_prefix_nll

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (3, 12), generator=generator)
    ids[:, :6] = ids[0, :6]
    mask = torch.ones_like(ids)
    mask[2, 10:] = 0
    labels = ids.clone()
    labels[:, :3] = -100  # positions 3.. trained: inside the prefix, at its edge (6) and after it
    labels[mask == 0] = -100
    shared, prefix = shared_prefix_nll(model, ids, mask, labels)
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    plain = labelled_nll(model.get_output_embeddings(), hidden[targets != -100], targets[targets != -100])
    assert prefix == 6 and shared.count == plain.count == int((labels[:, 1:] != -100).sum())
    # the mean loss to 1e-5, as training sees it (a float32 sum of ~160 nats differs in its 7th digit by order)
    assert float(shared.total) / shared.count == pytest.approx(float(plain.total) / plain.count, abs=1e-5)


def test_no_shared_prefix_leaves_one_id_per_row_and_one_row_shares_nothing() -> None:
    import torch

    ids = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert shared_prefix_length(ids, torch.ones_like(ids)) == 2
    assert shared_prefix_length(ids[:1], None) == 0
    assert shared_prefix_length(torch.tensor([[1, 2], [2, 2]]), None) == 0


def test_chunked_cross_entropy_equals_the_whole_one_with_gradients() -> None:
    import torch

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(37, 8, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    whole = labelled_nll(head, hidden, targets, chunk=1000)
    (grad_whole,) = torch.autograd.grad(whole.total, hidden)
    chunked = labelled_nll(head, hidden, targets, chunk=5)
    (grad_chunked,) = torch.autograd.grad(chunked.total, hidden)
    assert float(chunked.total) == pytest.approx(float(whole.total), rel=1e-6) and chunked.correct == whole.correct
    assert torch.allclose(grad_chunked, grad_whole, atol=1e-6)


def test_shared_prefix_with_packing_is_refused_with_what_can_run() -> None:
    refusal = TrainConfig(method="sft", target="local-torch", shared_prefix=True, packing=True).unsupported()
    assert refusal is not None and "--packing" in refusal
    assert TrainConfig(method="sft", target="local-torch", shared_prefix=True).unsupported() is None
