"""GRPO: rollouts against the real example world, reward = VCode verdict, the update rule, budgets."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")


from scripted_policy import Scripted, hermes_texts  # noqa: E402

from blobkit.errors import TrainerError  # noqa: E402
from trainers.budget import Budget  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.episode_decode import ModelTurns  # noqa: E402
from trainers.eval_record import GRPOReport  # noqa: E402
from trainers.formats import FORMATS  # noqa: E402
from trainers.generation import Decoded  # noqa: E402
from trainers.grpo import (  # noqa: E402
    SerialPolicy,
    advantages,
    assert_same_tools,
    draw_groups,
    episode_reward,
    rl_cases,
    rl_rows,
    rollout,
    step_model_calls,
    tied_groups,
)
from trainers.grpo_torch import StartPolicy, k3, policy_loss, token_logprobs  # noqa: E402
from trainers.plan import plan  # noqa: E402
from trainers.ranks import World  # noqa: E402
from trainers.run import run_training  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402
from world_format.canonical import canonical_json  # noqa: E402
from world_format.kit import Kit, KitCase  # noqa: E402
from world_format.runtime import full_state_hash  # noqa: E402

needs_mlx = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None, reason="mlx / mlx-lm not installed")


@pytest.fixture(scope="module")
def tiny(retail_kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = retail_kit.jsonl("sft.jsonl")
    return build_tiny_model(row_texts(rows), tmp_path_factory.mktemp("tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=700))


def _write_row(kit: Kit) -> tuple[dict[str, Any], KitCase]:
    """An SFT row whose chain cancels an order, and its RL case."""
    rows = kit.jsonl("sft.jsonl")
    cases = {c.case_id: c for c in rl_cases(kit, rows)}
    for row in rows:
        names = [c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []]
        if "cancel_order" in names:
            return row, cases[row["metadata"]["case_id"]]
    raise AssertionError("the retail kit has no cancel_order row")


def test_a_rollout_executes_real_writes_on_an_isolated_copy_of_the_seed(retail_kit: Kit) -> None:
    row, case = _write_row(retail_kit)
    runtime = retail_kit.world().runtime()
    try:
        seed_hash = full_state_hash(runtime.conn, list(runtime.tables.values()))
        first = rollout(Scripted(hermes_texts(row)), runtime, case, max_turns=6)
        assert full_state_hash(runtime.conn, list(runtime.tables.values())) == seed_hash
        second = rollout(Scripted(hermes_texts(row)), runtime, case, max_turns=6)
    finally:
        runtime.close()
    assert [e.tool for e in first.episode.trace][-1] == "cancel_order"
    assert first.episode.trace[-1].observation["status"] == "cancelled"
    # the second attempt cancels the same order again: it would be refused had the first write leaked
    assert second.episode.trace[-1].error is False and second.reward == 1.0


def test_reward_is_the_vcode_verdict(retail_kit: Kit) -> None:
    row, case = _write_row(retail_kit)
    runtime = retail_kit.world().runtime()
    try:
        full = rollout(Scripted(hermes_texts(row)), runtime, case, max_turns=6)
        without_write = rollout(Scripted([*hermes_texts(row)[:-2], "Done."]), runtime, case, max_turns=6)
        silent = rollout(Scripted(["Sure."]), runtime, case, max_turns=6)
    finally:
        runtime.close()
    for item in (full, without_write, silent):
        assert item.reward == (1.0 if item.episode.verdict.outcome == "pass" else 0.0)
        assert item.verifier_error is (item.episode.verdict.outcome == "error")
    assert (full.reward, without_write.reward, silent.reward) == (1.0, 0.0, 0.0)


def test_checks_reward_grades_failures_by_the_checks_they_met_and_keeps_a_pass_above_them(retail_kit: Kit) -> None:
    row, case = _write_row(retail_kit)
    texts = hermes_texts(row)
    attempts = {"full": texts, "without_write": [*texts[:-2], "Done."], "silent": ["Sure."],
                "unidentified": texts[1:]}  # the reference's calls, the identification left out
    runtime = retail_kit.world().runtime()
    try:
        by = {kind: {name: rollout(Scripted(list(t)), runtime, case, max_turns=6, reward=kind)
                     for name, t in attempts.items()} for kind in ("verdict", "checks")}
    finally:
        runtime.close()
    plain, graded = ({name: item.reward for name, item in by[kind].items()} for kind in ("verdict", "checks"))
    assert plain == {"full": 1.0, "without_write": 0.0, "silent": 0.0, "unidentified": 0.0}
    assert by["checks"]["unidentified"].episode.verdict.reason.startswith("procedure:")
    assert graded["full"] == 1.0 and graded["unidentified"] == 0.0  # a policy break earns nothing
    assert 0.5 > graded["without_write"] > graded["silent"] >= 0.0
    for name in ("without_write", "silent"):
        verdict = by["checks"][name].episode.verdict
        assert graded[name] == episode_reward(verdict, "checks") == 0.5 * (verdict.credit or 0.0)
        assert (verdict.outcome, verdict.reason) == (by["verdict"][name].episode.verdict.outcome,
                                                     by["verdict"][name].episode.verdict.reason)
    # a group whose attempts all fail ties under the verdict, and varies under the checks
    assert advantages([plain["without_write"], plain["silent"]], 2) == [0.0, 0.0]
    assert advantages([graded["without_write"], graded["silent"]], 2)[0] > 0


def test_a_malformed_tool_call_becomes_an_error_observation(retail_kit: Kit) -> None:
    _, case = _write_row(retail_kit)
    runtime = retail_kit.world().runtime()
    try:
        broken = rollout(Scripted(["<tool_call>\n{\"name\": \"cancel_order\", \"arguments\": {\n</tool_call>",
                                   "<tool_call>\n{\"name\": \"cancel_order\", \"arguments\": {\"order_id\": \"x\"}}"
                                   "\n</tool_call>", "Sorry."]), runtime, case, max_turns=4)
    finally:
        runtime.close()
    assert broken.episode.parse_failures == 1 and broken.reward == 0.0
    bad_arguments = broken.episode.trace[0]
    assert bad_arguments.error is True and "error" in bad_arguments.observation


def test_rl_prompts_use_the_sft_rows_tool_schemas_byte_for_byte(retail_kit: Kit) -> None:
    rows = retail_kit.jsonl("sft.jsonl")
    cases = rl_cases(retail_kit, rows) + retail_kit.cases("eval")
    assert_same_tools(rows, cases)
    altered = json.loads(canonical_json(cases[0].model_dump(mode="json", by_alias=True)))
    altered["prompt"]["tools"][0]["function"]["description"] += " "
    with pytest.raises(TrainerError, match="differ"):
        assert_same_tools(rows, [KitCase.model_validate(altered)])


def test_advantages_are_centred_within_each_group() -> None:
    assert advantages([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 2) == [0.5, -0.5, 0.0, 0.0, 0.0, 0.0]


class Flaky(SerialPolicy):
    """Replays the kit row of a prompt it knows on every other attempt at that prompt (its first, third, ...
    attempts pass), and answers "I don't know." otherwise: known prompts' groups vary, the others' all fail."""

    def __init__(self, known: dict[str, list[str]]) -> None:
        super().__init__()
        self.known, self.attempts, self.tool_format = known, dict[str, int](), FORMATS["hermes"]

    def turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, Decoded]:
        user, written = messages[1]["content"], sum(1 for m in messages if m["role"] == "assistant")
        if written == 0:
            self.attempts[user] = self.attempts.get(user, 0) + 1
        texts = self.known.get(user, []) if self.attempts.get(user, 0) % 2 else []
        return (texts[written] if written < len(texts) else "I don't know."), Decoded([], [], True)


def test_tied_groups_count_groups_whose_rewards_are_all_equal() -> None:
    assert tied_groups([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], 2) == 2
    assert tied_groups([1.0, 0.0, 1.0, 1.0], 4) == 0


@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_tied_groups_are_replaced_by_fresh_prompts_for_at_most_the_rounds_allowed(retail_kit: Kit,
                                                                                  rounds: int) -> None:
    rows = retail_kit.jsonl("sft.jsonl")
    pairs = rl_rows(retail_kit, rows)
    cases = rl_cases(retail_kit, rows)
    known = {row["messages"][1]["content"]: hermes_texts(row) for index, (row, _) in enumerate(pairs) if index % 3 == 0}
    runtime = retail_kit.world().runtime()
    try:
        drawn = draw_groups(Flaky(known), runtime, cases, random.Random(17), prompts=3, group_size=2, turn_cap=6,
                            resample_rounds=rounds, world=World(0, 1, 0))
    finally:
        runtime.close()
    # the first draw is the seeded draw a step without resampling makes
    assert drawn.prompts[:3] == random.Random(17).sample(cases, 3)
    assert len({id(case) for case in drawn.prompts}) == len(drawn.prompts)  # no prompt drawn twice in a step
    assert [f.index for f in drawn.figures] == drawn.mine == list(range(2 * len(drawn.prompts)))
    rewards = [f.reward for f in drawn.figures]
    varies = [rewards[i] != rewards[i + 1] for i in range(0, len(rewards), 2)]
    assert varies == [case.prompt is not None and case.prompt.messages[1]["content"] in known
                      for case in drawn.prompts]
    # each round replaces exactly the groups of the round before that tied, until none tied or the rounds ran out
    sizes, start = [3], 3
    while start < len(drawn.prompts):
        tied = sizes[-1] - sum(varies[start - sizes[-1]:start])
        sizes.append(tied)
        start += tied
    assert start == len(drawn.prompts) and len(sizes) - 1 == drawn.rounds <= rounds
    last_tied = sizes[-1] - sum(varies[start - sizes[-1]:start])
    assert drawn.rounds == rounds or last_tied == 0
    assert sum(f.model_calls for f in drawn.figures) <= step_model_calls(TrainConfig(
        kit=retail_kit.root, base="x", method="grpo", batch_size=6, group_size=2, max_turns=6, resample_rounds=rounds))


def _peft_attempts(retail_kit: Kit, tiny: Path) -> tuple[Any, list[Any]]:
    """A seeded LoRA on the tiny model and two sampled one-turn attempts of a training case."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny, use_safetensors=True),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    _, case = _write_row(retail_kit)
    sampler = ModelTurns(model, tokenizer, 12, 1.0, torch.Generator().manual_seed(0))
    runtime = retail_kit.world().runtime()
    try:
        attempts = [rollout(sampler, runtime, case, max_turns=1) for _ in range(2)]
    finally:
        runtime.close()
    assert all(a.turns and a.turns[0].new_ids for a in attempts)
    return model, attempts


def _logp(model: Any, item: Any) -> Any:
    import torch

    turn = item.turns[0]
    with torch.no_grad():
        return token_logprobs(model, torch.tensor([turn.prompt_ids + turn.new_ids]), len(turn.prompt_ids))


def test_one_update_raises_the_likelihood_of_the_rewarded_attempt(retail_kit: Kit, tiny: Path) -> None:
    import torch

    model, attempts = _peft_attempts(retail_kit, tiny)
    before = [float(_logp(model, a).sum()) for a in attempts]
    lora_b = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    optimizer.zero_grad()
    policy_loss(model, attempts, [0.5, -0.5])
    optimizer.step()
    after = [float(_logp(model, a).sum()) for a in attempts]
    assert any(not torch.equal(p, lora_b[n]) for n, p in model.named_parameters() if "lora_B" in n)
    assert after[0] > before[0] and after[1] < before[1]


def test_k3_is_zero_where_the_policies_agree_and_positive_elsewhere() -> None:
    import torch

    policy = torch.tensor([-0.5, -2.0, -0.1])
    assert torch.equal(k3(policy, policy), torch.zeros(3))
    apart = k3(policy, torch.tensor([-0.7, -1.0, -0.1]))
    assert bool((apart[:2] > 0).all()) and float(apart[2]) == 0.0


def test_the_kl_term_scores_under_the_start_weights_and_pulls_the_policy_back(retail_kit: Kit, tiny: Path) -> None:
    import torch

    model, attempts = _peft_attempts(retail_kit, tiny)
    start = StartPolicy(model)
    at_start = [_logp(model, a) for a in attempts]
    trainable = [p for p in model.parameters() if p.requires_grad]
    # at the start the penalty is 0 and adds no gradient: the update equals the plain one
    policy_loss(model, attempts, [0.5, -0.5])
    plain = [p.grad.clone() for p in trainable]
    model.zero_grad()
    assert policy_loss(model, attempts, [0.5, -0.5], start=start, kl_coef=1.0)[2] == 0.0
    assert all(torch.allclose(p.grad, g, atol=1e-7) for p, g in zip(trainable, plain, strict=True))
    torch.optim.SGD(trainable, lr=0.5).step()
    moved = [_logp(model, a) for a in attempts]
    assert any(not torch.equal(m, s) for m, s in zip(moved, at_start, strict=True))
    weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    for item, expected in zip(attempts, at_start, strict=True):
        turn = item.turns[0]
        scored = start.token_logprobs(torch.tensor([turn.prompt_ids + turn.new_ids]), len(turn.prompt_ids))
        assert torch.allclose(scored, expected, atol=1e-6)
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters() if p.requires_grad)

    def divergence() -> float:
        return sum(float(k3(_logp(model, a), s).sum()) for a, s in zip(attempts, at_start, strict=True))

    # with the policy-gradient weight negligible, a step on the loss lowers KL(policy || start)
    apart = divergence()
    assert apart > 0
    model.zero_grad()
    assert policy_loss(model, attempts, [1e-9, -1e-9], start=start, kl_coef=1.0)[2] == pytest.approx(apart, rel=1e-5)
    torch.optim.SGD(trainable, lr=0.05).step()
    assert divergence() < apart


def test_the_kl_term_runs_on_local_torch_only() -> None:
    assert TrainConfig(method="grpo", target="local-torch", kl_coef=0.1).unsupported() is None
    assert "local-torch" in (TrainConfig(method="grpo", target="local-mlx", kl_coef=0.1).unsupported() or "")
    assert "kl" not in (TrainConfig(method="grpo", target="local-mlx").unsupported() or "")


def test_the_budget_refuses_a_step_that_could_exceed_it() -> None:
    budget = Budget(max_model_calls=10, max_minutes=None, stop=None)
    assert budget.exhausted(10) is None
    budget.model_calls = 4
    assert budget.exhausted(7) == "max_model_calls"
    assert Budget(None, 1e-9, None).exhausted(1) == "max_minutes"
    assert Budget(None, None, lambda: "cancelled by user").exhausted(1) == "cancelled by user"


@pytest.mark.parametrize("target", ["local-torch", pytest.param("local-mlx", marks=needs_mlx)])
def test_a_model_call_budget_stops_grpo_cleanly_and_keeps_its_evidence(retail_kit: Kit, tiny: Path,
                                                                       tmp_path: Path, target: str) -> None:
    config = TrainConfig(kit=retail_kit.root, base=str(tiny), method="grpo", target=target, out=tmp_path,
                         steps=5, batch_size=2, group_size=2, max_turns=2, short_episodes=True, max_new_tokens=8,
                         eval_limit=2, max_model_calls=6, learning_rate=1e-3,
                         kl_coef=0.1 if target == "local-torch" else 0.0,
                         reward="checks" if target == "local-torch" else "verdict")
    rows = retail_kit.jsonl("sft.jsonl")
    report = run_training(config, retail_kit, rows, plan(config, retail_kit, rows, retail_kit.path("sft.jsonl")),
                          lambda line: None)
    # a step may make up to 1 prompt x 2 attempts x 2 turns = 4 calls: it only starts if that fits in 6
    assert isinstance(report, GRPOReport)
    assert report.stopped_by == "max_model_calls" and 1 <= report.steps_completed < 5
    assert report.model_calls <= 6 < report.model_calls + 4
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["stopped_by"] == "max_model_calls" and "rl" in saved and "rl_minus_base" in saved
    assert set(saved) == {"base", "rl", "rl_minus_base", "optimizer_updates", "steps_completed", "steps_planned",
                          "stopped_by", "model_calls", "eval_model_calls", "active_seconds",
                          "zero_variance_group_fraction", "reward_history", "kit_sha256", "group_size", "shaping",
                          "left_out", "eval_limit"}
    assert saved["left_out"]["untokenizable"] == 0 and saved["rl"]["partial"] is True  # eval_limit 2
    assert (saved["shaping"] or "").startswith("checks") == (target == "local-torch")
    assert (tmp_path / "training.png").is_file() and (tmp_path / "eval_cases_rl.json").is_file()
    assert (tmp_path / "export" / "manifest.json").is_file()
    steps = (tmp_path / "rl_steps.jsonl").read_text().splitlines()
    assert len(steps) == report.steps_completed
    for step in map(json.loads, steps):  # the KL figure where a KL term ran (local-torch's, --kl-coef 0.1)
        assert (step["kl"] is not None) == (step["optimizer_update"] and target == "local-torch")
        assert step["kl"] is None or step["kl"] >= 0
        assert 0 <= step["pass_rate"] <= step["reward_mean"]  # a pass earns 1; a failure 0, or its checks' share
    assert sum(json.loads(line)["model_calls"] for line in steps) == report.model_calls
