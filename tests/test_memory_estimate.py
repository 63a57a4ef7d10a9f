"""plan.json's memory estimate for local-torch SFT (issue 29 lever 3): counted from the rows, the vocabulary and
the batch; a dry run refuses a plan that will not fit and names what would."""

from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path
from typing import Any

import pytest

from trainers.config import TrainConfig
from trainers.errors import ConfigError
from trainers.memory_estimate import Arch, MemoryEstimate, estimate_bytes, micro_batch, sft_memory_estimate

SMOLLM2 = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
           "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152}
"""SmolLM2-135M-Instruct's sizes (its converted config.json)."""
SMOLLM2_PARAMETERS = 134_515_008


@pytest.fixture
def smollm2_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    return tmp_path


def test_the_retail_desk_incident_is_estimated_near_what_it_used(smollm2_dir: Path) -> None:
    """352 rows of ~1,900 tokens, LoRA r16, batch 4 on SmolLM2 was killed at 24.4 GB on its first step (issue 29,
    where plan.json said 2 GB): the estimate counts the same step within a quarter."""
    counts = [1850 + (i * 37) % 120 for i in range(352)]
    config = TrainConfig(method="sft", target="local-torch", batch_size=4, memory_limit_gb=20.4)
    estimate = sft_memory_estimate(smollm2_dir, SMOLLM2_PARAMETERS, counts, config, 1361, "cpu")
    assert 24.4 * 0.75 < estimate.estimate_gb < 24.4 * 1.25
    assert not estimate.fits and estimate.fitting  # 85 % of a 24 GB machine: refused, with what fits
    assert estimate.parts_gb["activations"] > estimate.parts_gb["logits"] > estimate.parts_gb["weights"]


def test_checkpointing_fewer_rows_per_pass_and_a_shared_prefix_each_lower_the_estimate(smollm2_dir: Path) -> None:
    arch, counts = Arch.read(smollm2_dir), [1900] * 8

    def total(**settings: Any) -> float:
        values = {"batch": 4, "full": False, "rank": 16, "checkpointing": False, "prefix": 0, **settings}
        return sum(estimate_bytes(arch, SMOLLM2_PARAMETERS, counts, **values).values())

    plain = total()
    assert total(checkpointing=True) < plain / 3 and total(batch=2) < plain * 0.6 and total(prefix=1361) < plain * 0.55
    assert total(full=True) > plain  # a gradient and two moments for every weight


def test_rows_per_pass_divide_the_batch_and_respect_the_token_bound() -> None:
    assert micro_batch(8, 1900, None) == 8
    assert micro_batch(8, 1900, 4000) == 2
    assert micro_batch(6, 1000, 4500) == 3  # 4 would fit the tokens but does not divide 6
    assert micro_batch(4, 5000, 2000) == 1


def _long_rows(rows: list[dict[str, Any]], words: int) -> list[dict[str, Any]]:
    """The rows with a long customer message: the same calls and answers, many more tokens."""
    out = json.loads(json.dumps(rows))
    for row in out:
        row["messages"][1]["content"] += " Please note." * words
    return out


def test_a_dry_run_refuses_a_kit_of_long_rows_that_will_not_fit_and_what_it_names_does_fit(
        retail_kit: Any, tinker_tiny: Path, tmp_path: Path) -> None:
    from trainers.plan import plan

    rows = _long_rows(retail_kit.rows()[:12], 300)
    base = {"kit": retail_kit.path("sft.jsonl").parent, "base": str(tinker_tiny), "method": "sft",
            "target": "local-torch", "out": tmp_path, "dry_run": True, "batch_size": 4, "max_length": 8192}
    roomy = plan(TrainConfig(**base, memory_limit_gb=1000), retail_kit, rows, retail_kit.path("sft.jsonl"))
    memory = roomy.memory
    assert isinstance(memory, MemoryEstimate)
    assert memory.fits and memory.longest_row_tokens > 1000 and memory.micro_batch == 4
    (tmp_path / "plan.json").unlink()
    tight = memory.estimate_gb * 0.6
    with pytest.raises(ConfigError, match="these would fit") as refused:
        plan(TrainConfig(**base, memory_limit_gb=tight), retail_kit, rows, retail_kit.path("sft.jsonl"))
    assert not (tmp_path / "plan.json").exists()  # a refused plan writes nothing
    message = str(refused.value)
    assert "--gradient-checkpointing" in message or "--max-batch-tokens" in message
    if "--max-batch-tokens" in message:
        bound = int(message.split("--max-batch-tokens ")[1].split()[0])
        fitted = plan(TrainConfig(**base, memory_limit_gb=tight, max_batch_tokens=bound), retail_kit, rows,
                      retail_kit.path("sft.jsonl"))
        assert isinstance(fitted.memory, MemoryEstimate)
        assert fitted.memory.fits and fitted.memory.gradient_accumulation > 1
    with pytest.raises(ConfigError, match="nothing fits"):
        plan(TrainConfig(**base, memory_limit_gb=0.001), retail_kit, rows, retail_kit.path("sft.jsonl"))
