"""GRPO rollouts and greedy evaluation through vLLM (the vllm extra, CUDA only); the CPU path refuses it clearly."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from blobkit.errors import TargetUnavailableError  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.plan import plan  # noqa: E402
from trainers.vllm_turns import engine_lora_rank, import_vllm  # noqa: E402
from world_format.kit import open_kit  # noqa: E402


def _gpu_and_vllm() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


needs_gpu_vllm = pytest.mark.skipif(not _gpu_and_vllm(), reason="vLLM runs on a CUDA GPU with the vllm extra")


@pytest.mark.skipif(_gpu_and_vllm(), reason="checks the refusal on a machine without vLLM or a GPU")
def test_without_vllm_or_a_gpu_the_vllm_path_says_what_to_do() -> None:
    with pytest.raises(TargetUnavailableError, match="--generator transformers"):
        import_vllm()


def test_the_vllm_generator_is_grpo_in_one_process_only() -> None:
    sft = TrainConfig(method="sft", target="local-torch", local_torch={"generator": "vllm"}).unsupported()
    ranks = TrainConfig(method="grpo", target="local-torch", local_torch={"generator": "vllm", "processes": 2})
    assert sft is not None and "--method grpo" in sft
    assert "--processes" in (ranks.unsupported() or "")
    assert TrainConfig(method="grpo", target="local-torch", local_torch={"generator": "vllm"}).unsupported() is None


def test_vllm_is_given_a_lora_rank_it_accepts() -> None:
    assert [engine_lora_rank(r) for r in (1, 4, 8, 9, 16, 100, 600)] == [8, 8, 8, 16, 16, 128, 512]


@pytest.mark.skipif(_gpu_and_vllm(), reason="checks the plan on a machine without vLLM or a GPU")
@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_a_vllm_dry_run_here_records_what_it_lacks(kit_path: Path, tmp_path: Path) -> None:
    config = TrainConfig(kit=kit_path, method="grpo", target="local-torch", out=tmp_path, dry_run=True,
                         local_torch={"generator": "vllm"})
    with open_kit(kit_path) as kit:
        plan(config, kit, kit.rows(), kit.path("sft.jsonl"))
    target = json.loads((tmp_path / "plan.json").read_text())["target"]
    assert target["runs_here"] is False and "for --generator vllm" in target["why_not"]


@needs_gpu_vllm
@pytest.mark.slow
def test_greedy_evaluation_through_vllm_writes_the_same_tokens_as_transformers(
        kit_path: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.evaluation import evaluate_cases, model_policy
    from trainers.formats import apply_tool_format
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts
    from trainers.vllm_turns import VLLMTurns

    with open_kit(kit_path) as kit:
        tiny = build_tiny_model(row_texts(kit.rows()), tmp_path / "tiny", TinyModelConfig(seed=3))
        cases = kit.cases("eval")[:4]
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        apply_tool_format(tokenizer, "auto", where=str(tiny))
        model = AutoModelForCausalLM.from_pretrained(tiny, use_safetensors=True).eval()
        ours = model_policy(model, tokenizer, 24, slots=4)
        theirs = VLLMTurns(str(tiny), tokenizer, max_new_tokens=24, temperature=0.0, seed=0, slots=4,
                           max_lora_rank=8)
        results = []
        for policy in (ours, theirs):
            runtime = kit.world().runtime()
            try:
                results.append(evaluate_cases(policy, runtime, cases, 2).results)
            finally:
                runtime.close()
    assert [r.messages for r in results[0]] == [r.messages for r in results[1]]
