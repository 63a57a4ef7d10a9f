"""Tests for the tiny local model, chat rendering/parsing, generation and local SFT."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from blobkit.errors import ConfigError  # noqa: E402
from trainers.chat_format import assistant_message, parse_assistant_output, render_prompt  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.formats.hermes import HERMES  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402
from world_format.canonical import canonical_json  # noqa: E402

GET_ORDER = {
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look up one order by id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "integer", "description": "Order id"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    },
}
SYSTEM = "You are the support agent of Northwind. Answer briefly."
STATUSES = ("pending", "shipped", "delivered", "cancelled")


def order_observation(order_id: int) -> dict[str, Any]:
    """The synthetic world's answer to get_order."""
    r = random.Random(order_id)
    return {"id": order_id, "status": r.choice(STATUSES), "total": r.randint(1, 99)}


def lookup_row(order_id: int) -> dict[str, Any]:
    """An executed single-call row in the kit's sft.jsonl format."""
    obs = order_observation(order_id)
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"What is the status of order {order_id}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "get_order",
                                                                 "arguments": {"order_id": order_id}}}],
            },
            {"role": "tool", "name": "get_order", "content": canonical_json(obs)},
            {"role": "assistant", "content": f"Order {order_id} is {obs['status']}."},
        ],
        "tools": [GET_ORDER],
        "metadata": {"task_id": "t", "case_id": str(order_id)},
    }


def sft_config(**values: Any) -> TrainConfig:
    """One epoch of SFT with the given settings and train_sft's former defaults (no warm-up)."""
    return TrainConfig(**{"epochs": 1, "warmup_ratio": 0.0, **values})


def _dir_digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = [lookup_row(1000 + 7 * i) for i in range(40)]
    return build_tiny_model(row_texts(rows), tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=1, hidden_size=32, num_layers=2, num_heads=2, vocab_size=600))


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_tiny_model_reloads_with_identical_token_ids(tiny_dir: Path, tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM, Qwen2Tokenizer

    from trainers.tiny_model import build_tokenizer

    texts = row_texts([lookup_row(1000 + 7 * i) for i in range(40)])
    fresh = build_tokenizer(texts, vocab_size=600)
    assert type(tokenizer) is Qwen2Tokenizer
    sample = texts[0] + " order 98765 <tool_call>x</tool_call> naïve €"
    assert tokenizer(sample)["input_ids"] == fresh(sample)["input_ids"]
    assert tokenizer.decode(tokenizer(sample)["input_ids"]) == sample
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    for tag in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "<tools>"):
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1
    assert tokenizer.tokenize("12345") == ["12", "34", "5"]  # digit pairs from the run's first digit
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config.vocab_size >= len(tokenizer)


def test_an_order_number_reads_as_the_same_digit_pairs_in_a_message_a_tool_call_and_an_observation(
        tokenizer: Any) -> None:
    number = tokenizer.encode("50754", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in number] == ["50", "75", "4"]
    for text in ("my order 50754, please", '{"order_id": 50754}', '{"id":50754,"total":1.5}', "order #50754."):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert any(ids[i:i + 3] == number for i in range(len(ids))), text


def test_an_email_tokenizes_to_the_same_ids_in_a_message_and_in_a_tool_call() -> None:
    from trainers.tiny_model import build_tokenizer

    emails = [f"{first}{sep}{last}@example.com" for first in ("kenji", "ana", "dev") for sep in (".", "_", "")
              for last in ("brown", "ito")]
    texts = [f'Hello, {e} here. <tool_call>{{"name": "find", "arguments": {{"email": "{e}"}}}}</tool_call> '
             f"Hi, this is Kenji ({e}). Order 123 shipped." for e in emails * 8]
    tok = build_tokenizer(texts, vocab_size=400)
    for email in ("kenji.ito@example.com", "zed_quinn@example.com"):
        alone = tok(email)["input_ids"]
        for context in (f"Hello, {email} here", f'{{"email": "{email}"}}', f"this is Kenji ({email}).",
                        f"{email} wrote"):
            ids = tok(context)["input_ids"]
            assert any(ids[i:i + len(alone)] == alone for i in range(len(ids))), (context, email)


def test_two_builds_from_the_same_texts_and_seed_are_byte_identical(tmp_path: Path, tiny_dir: Path) -> None:
    import torch

    before = torch.random.get_rng_state()
    texts = row_texts([lookup_row(1000 + 7 * i) for i in range(40)])
    again = build_tiny_model(texts, tmp_path / "again", TinyModelConfig(seed=1, hidden_size=32, num_layers=2,
                                                                        num_heads=2, vocab_size=600))
    assert _dir_digest(again) == _dir_digest(tiny_dir)
    assert torch.equal(before, torch.random.get_rng_state())
    other = build_tiny_model(texts, tmp_path / "other", TinyModelConfig(seed=2, hidden_size=32, num_layers=2,
                                                                        num_heads=2, vocab_size=600))
    assert _dir_digest(other)["model.safetensors"] != _dir_digest(tiny_dir)["model.safetensors"]


def test_the_tiny_chat_template_lists_tools_compactly_and_renders_qwen_tool_calls(tokenizer: Any) -> None:
    assert "{% generation %}" in tokenizer.chat_template.replace("{%- generation %}", "{% generation %}")
    row = lookup_row(1042)
    text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    assert '<tool_call>\n{"name": "get_order", "arguments": {"order_id": 1042}}\n</tool_call><|im_end|>' in text
    assert "<tools>\nget_order(order_id: integer)\n</tools>" in text
    assert "<tool_response>\n" + row["messages"][3]["content"] + "\n</tool_response>" in text
    prompt = render_prompt(tokenizer, row["messages"][:2], row["tools"])
    assert prompt.endswith("<|im_start|>assistant\n") and text.startswith(prompt)


def test_parse_assistant_output_round_trips_a_rendered_tool_call(tokenizer: Any) -> None:
    row = lookup_row(1042)
    full = tokenizer.apply_chat_template(row["messages"][:3], tools=row["tools"], tokenize=False)
    prompt = render_prompt(tokenizer, row["messages"][:2], row["tools"])
    completion = full[len(prompt):]
    parsed = parse_assistant_output(completion, HERMES)
    assert parsed.parse_errors == []
    assert parsed.tool_calls == [{"name": "get_order", "arguments": {"order_id": 1042}}]
    assert parsed.content == ""
    assert assistant_message(parsed) == row["messages"][2]
    final = parse_assistant_output("Order 1042 is shipped.<|im_end|>", HERMES)
    assert final.is_final and final.content == "Order 1042 is shipped."
    assert assistant_message(final) == {"role": "assistant", "content": "Order 1042 is shipped."}


def test_malformed_tool_calls_are_reported_as_parse_errors_not_raised() -> None:
    text = (
        "Let me check.\n<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": 10\n</tool_call>"
        "\n<tool_call>\n{\"arguments\": {}}\n</tool_call>"
        "\n<tool_call>\n{\"name\": \"get_order\", \"arguments\": \"{\\\"order_id\\\": 1}\"}\n</tool_call>"
        "\n<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": 7}}\n</tool_call>"
        "\n<tool_call>\n{\"name\": \"cut"
    )
    parsed = parse_assistant_output(text, HERMES)
    assert parsed.tool_calls == [{"name": "get_order", "arguments": {"order_id": 7}}]
    assert len(parsed.parse_errors) == 4
    assert "invalid JSON" in parsed.parse_errors[0]
    assert "name" in parsed.parse_errors[1]
    assert "arguments" in parsed.parse_errors[2]
    assert "unterminated" in parsed.parse_errors[3]
    assert parsed.content == "Let me check."
    assert not parsed.is_final


def test_the_assistant_mask_covers_only_assistant_tokens(tokenizer: Any) -> None:
    row = lookup_row(2024)
    out = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    masked = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    expected = ('\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": 2024}}\n</tool_call><|im_end|>\n'
                + "\n" + row["messages"][4]["content"] + "<|im_end|>\n")
    assert masked == expected
    unmasked = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "What is the status" in unmasked and "<tool_response>" in unmasked and "get_order" in unmasked


def test_count_row_tokens_matches_the_template_and_over_long_rows_are_refused(
    tiny_dir: Path, tokenizer: Any, tmp_path: Path
) -> None:
    from trainers.sft_torch import count_row_tokens, train_sft

    row = lookup_row(1042)
    text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    n = count_row_tokens(tokenizer, row)
    assert n == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    with pytest.raises(ConfigError, match="exceed max_length"):
        train_sft(tiny_dir, [row], tmp_path / "out", sft_config(learning_rate=1e-3, batch_size=1, seed=0,
                                                                full=True, max_length=n - 1), progress=False)


def test_lora_training_writes_a_canonical_adapter(tiny_dir: Path, tmp_path: Path) -> None:
    from trainers.sft_torch import train_sft

    rows = [lookup_row(3000 + i) for i in range(8)]
    result = train_sft(tiny_dir, rows, tmp_path / "lora", sft_config(learning_rate=1e-3, batch_size=4, seed=0,
                                                                     lora_rank=4), max_steps=2, progress=False,
                       log_every=1)
    assert result.kind == "lora" and result.optimizer_steps == 2
    assert [s for s, _ in result.loss_history] == [1, 2]
    assert (tmp_path / "lora" / "adapter_model.safetensors").is_file()
    raw = (tmp_path / "lora" / "adapter_config.json").read_text()
    config = json.loads(raw)
    targets = config["target_modules"]
    assert targets == sorted(targets)
    kinds = {t.rsplit(".", 1)[-1] for t in targets} if isinstance(targets, list) else set()
    assert kinds == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert list(config) == sorted(config) and config["r"] == 4 and config["lora_alpha"] == 8
    assert (tmp_path / "lora" / "tokenizer.json").is_file()


@pytest.mark.slow
def test_the_same_seed_gives_byte_identical_adapters_and_another_seed_does_not(tiny_dir: Path,
                                                                                tmp_path: Path) -> None:
    from trainers.sft_torch import train_sft

    rows = [lookup_row(4000 + 3 * i) for i in range(8)]

    def adapter(name: str, seed: int) -> bytes:
        train_sft(tiny_dir, rows, tmp_path / name, sft_config(learning_rate=1e-3, batch_size=4, seed=seed,
                                                              lora_rank=4), max_steps=2, progress=False)
        return (tmp_path / name / "adapter_model.safetensors").read_bytes()

    first, second, other = adapter("a", 7), adapter("b", 7), adapter("c", 8)
    assert first == second and first != other


@pytest.mark.slow
def test_full_weight_training_learns_tool_calls_for_unseen_ids(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.generation import generate_turn
    from trainers.sft_torch import train_sft

    ids = list(range(1000, 10000))
    random.Random(0).shuffle(ids)
    train_ids, test_ids = ids[:400], ids[400:410]
    rows = [lookup_row(i) for i in train_ids]
    base = build_tiny_model(row_texts(rows), tmp_path / "base", TinyModelConfig(seed=0, hidden_size=64,
                                                                                vocab_size=1024))
    result = train_sft(base, rows, tmp_path / "sft", sft_config(learning_rate=5e-3, batch_size=8, seed=0, full=True,
                                                                max_length=512), max_steps=1000, progress=False,
                       log_every=50)
    assert result.kind == "full" and result.optimizer_steps == 1000
    first, last = result.loss_history[0][1], result.loss_history[-1][1]
    assert last < 0.1 * first
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "sft")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft", use_safetensors=True, dtype=torch.float32)
    correct = 0
    for order_id in test_ids:
        messages = lookup_row(order_id)["messages"][:2]
        parsed = parse_assistant_output(generate_turn(model, tokenizer, messages, [GET_ORDER], fmt=HERMES), HERMES)
        correct += parsed.tool_calls == [{"name": "get_order", "arguments": {"order_id": order_id}}]
    assert correct >= 8


def test_training_progress_shows_the_loss_in_the_bar_instead_of_printing_a_dict_per_log_step(
        tiny_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from trainers.sft_torch import train_sft

    rows = [lookup_row(5000 + i) for i in range(8)]
    result = train_sft(tiny_dir, rows, tmp_path / "out", sft_config(learning_rate=1e-3, batch_size=4, seed=0,
                                                                    lora_rank=4), max_steps=2, progress=True,
                       log_every=1)
    shown = capfd.readouterr()
    text = shown.out + shown.err
    assert [s for s, _ in result.loss_history] == [1, 2]
    assert "{'loss'" not in text and "'grad_norm'" not in text
    assert "2/2" in text and "loss=" in text


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_cpu_assistant_token_loss_equals_trls_loss_and_gradients_on_one_batch(
        tiny_dir: Path, tokenizer: Any, tmp_path: Path, lora: bool) -> None:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    from trainers.sft_torch import _assistant_token_loss, rows_to_dataset

    rows = [lookup_row(2000 + 37 * i) for i in range(5)]
    rows[1]["messages"][1]["content"] = "Hello there, could you please tell me the status of order 2037 today?"

    def loss_and_gradients(trainer_class: type) -> tuple[float, dict[str, Any]]:
        model = AutoModelForCausalLM.from_pretrained(tiny_dir, use_safetensors=True, dtype=torch.float32)
        args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=len(rows), assistant_only_loss=True,
                         use_cpu=True, report_to="none", max_length=1024, activation_checkpointing=False, seed=0)
        peft_config = LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM") if lora else None
        trainer = trainer_class(model=model, args=args, train_dataset=rows_to_dataset(rows),
                                processing_class=tokenizer, peft_config=peft_config)
        batch = next(iter(trainer.get_train_dataloader()))
        assert (batch["attention_mask"] == 0).any(), "the batch should hold padding"
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        return float(loss.detach()), grads

    trl_loss, trl_grads = loss_and_gradients(SFTTrainer)
    our_loss, our_grads = loss_and_gradients(_assistant_token_loss(SFTTrainer))
    assert trl_grads and sorted(our_grads) == sorted(trl_grads)
    assert our_loss == pytest.approx(trl_loss, rel=1e-5)
    for name, grad in trl_grads.items():
        assert torch.allclose(our_grads[name], grad, rtol=1e-4, atol=1e-6), name
