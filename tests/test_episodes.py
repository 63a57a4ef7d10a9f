"""Episodes decoded together with kept KV caches give, token for token, what the per-turn path gives.

The model is the tiny one, trained for a few seconds on the retail kit's SFT rows, so that on held-out
cases it writes tool calls (well-formed or not), reads observations and runs several turns: the kept
caches, the shared prefix and token drift are all exercised.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import random
from typing import Any

import pytest

pytest.importorskip("torch")


from trainers.episode_decode import ModelTurns, common_prefix  # noqa: E402
from trainers.evaluation import EpisodeResult, model_policy, run_episode, run_episodes  # noqa: E402
from trainers.formats import format_of  # noqa: E402
from trainers.generation import Decoded, decode, prompt_ids, stop_ids, turn_text  # noqa: E402
from trainers.grpo import rollouts  # noqa: E402
from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts  # noqa: E402
from trainers.turns import TurnRequest  # noqa: E402
from world_format.kit import Kit, KitCase  # noqa: E402

MAX_TURNS, MAX_NEW_TOKENS = 4, 48


@pytest.fixture(scope="module")
def trained(retail_kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The tiny model after 80 full-weight steps on every token of the SFT rows (seeded): it writes tool calls."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = retail_kit.jsonl("sft.jsonl")
    path = build_tiny_model(row_texts(rows), tmp_path_factory.mktemp("episodes-tiny"), TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=700))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, dtype=torch.float32)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in row_texts(rows)]
    order, threads = random.Random(0), torch.get_num_threads()
    torch.set_num_threads(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            for _ in range(80):
                batch = order.sample(ids, 8)
                width = max(map(len, batch))
                padded = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in batch])
                mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in batch])
                loss = model(input_ids=padded, attention_mask=mask, labels=padded.masked_fill(mask == 0, -100)).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), tokenizer


class PerTurnReference:
    """Today's per-turn path (render the whole conversation, prefill it, decode), keeping every turn's ids."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model, self.tokenizer, self.turns = model, tokenizer, list[Decoded]()
        self.tool_format = format_of(tokenizer)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        turn = decode(self.model, prompt_ids(self.tokenizer, messages, tools),
                      stop_ids(self.tokenizer, self.tool_format), max_new_tokens=MAX_NEW_TOKENS)
        self.turns.append(turn)
        return turn_text(self.tokenizer, turn.new_ids, self.tool_format)


def _reference(trained: tuple[Any, Any], kit: Kit, cases: list[KitCase]) -> list[tuple[EpisodeResult, list[Decoded]]]:
    out = []
    runtime = kit.world().runtime()
    try:
        for case in cases:
            reference = PerTurnReference(*trained)
            out.append((run_episode(reference, runtime, case, MAX_TURNS), reference.turns))
    finally:
        runtime.close()
    return out


def _batched(trained: tuple[Any, Any], kit: Kit, cases: list[KitCase], slots: int) -> tuple[list[EpisodeResult],
                                                                                            ModelTurns]:
    policy = model_policy(*trained, MAX_NEW_TOKENS, slots=slots)
    runtime = kit.world().runtime()
    try:
        return run_episodes(policy, runtime, cases, MAX_TURNS), policy
    finally:
        runtime.close()


def test_batched_episodes_decode_every_turn_token_for_token_as_the_per_turn_path(trained: tuple[Any, Any],
                                                                                  retail_kit: Kit) -> None:
    cases = retail_kit.cases("eval")
    reference = _reference(trained, retail_kit, cases)
    results, policy = _batched(trained, retail_kit, cases, slots=8)
    for key, ((expected, turns), got) in enumerate(zip(reference, results, strict=True)):
        assert [t.new_ids for t in policy.decoded[key]] == [t.new_ids for t in turns], got.case_id
        assert [t.prompt_ids for t in policy.decoded[key]] == [t.prompt_ids for t in turns], got.case_id
        assert got.messages == expected.messages and got.verdict == expected.verdict
    # the run exercised what it claims: several turns per episode, the shared prefix, drift and no drift
    stats = policy.stats
    assert len(cases) >= 20 and sum(r.turns >= 3 for r in results) >= 5
    assert stats.turns == sum(r.turns for r in results) == sum(len(t) for _, t in reference)
    assert stats.reference_prefill == sum(len(t.prompt_ids) for _, turns in reference for t in turns)
    assert stats.shared_prefix > 0 and stats.prefilled < stats.reference_prefill / 2
    assert 0 < stats.drift_turns < stats.turns - len(cases)


def test_the_batch_size_changes_no_token(trained: tuple[Any, Any], retail_kit: Kit) -> None:
    cases = retail_kit.cases("eval")[:9]
    runs = {slots: _batched(trained, retail_kit, cases, slots)[1].decoded for slots in (1, 3, 8)}
    assert runs[1] == runs[3] == runs[8] and len(runs[1]) == len(cases)


def test_a_batch_gives_every_episode_the_logits_it_gets_alone_bit_for_bit(trained: tuple[Any, Any], retail_kit: Kit,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = trained
    requests = [TurnRequest(key, case.prompt.messages, case.prompt.tools)
                for key, case in enumerate(retail_kit.cases("eval")[:5]) if case.prompt is not None]
    seen: list[Any] = []
    choose = ModelTurns._choose
    monkeypatch.setattr(ModelTurns, "_choose", lambda self, logits: seen.append(logits.clone()) or choose(self, logits))

    def steps(batch: list[TurnRequest]) -> dict[int, list[Any]]:
        """Each request's logits at every decode step (rows leave a batch in order as they stop)."""
        seen.clear()
        policy = ModelTurns(model, tokenizer, MAX_NEW_TOKENS)
        policy.begin()
        policy.next_turns(batch)
        lengths = [len(policy.decoded[r.key][0].new_ids) for r in batch]
        out: dict[int, list[Any]] = {r.key: [] for r in batch}
        for step, logits in enumerate(seen):
            live = [r.key for r, n in zip(batch, lengths, strict=True) if n > step]
            for row, key in enumerate(live):
                out[key].append(logits[row])
        return out

    together = steps(requests)
    alone = {key: got for request in requests for key, got in steps([request]).items()}
    assert len({len(v) for v in together.values()}) > 1  # rows stopped at different steps
    for key, rows in together.items():
        assert len(rows) == len(alone[key]) and all(a.equal(b) for a, b in zip(rows, alone[key], strict=True))


def test_token_drift_cuts_the_cache_back_to_what_the_render_shares(trained: tuple[Any, Any],
                                                                    retail_kit: Kit) -> None:
    model, tokenizer = trained
    case = retail_kit.cases("eval")[0]
    assert case.prompt is not None
    messages, tools = case.prompt.messages, case.prompt.tools
    policy = ModelTurns(model, tokenizer, MAX_NEW_TOKENS)
    policy.begin()
    first = policy.next_turns([TurnRequest(0, messages, tools)])
    previous = policy.decoded[0][0].prompt_ids + policy.decoded[0][0].new_ids
    # the conversation records another assistant turn than the one generated (as a template rewriting history would)
    rewritten = [*messages, {"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "ok"}]
    second = policy.next_turns([TurnRequest(0, rewritten, tools)])
    full = prompt_ids(tokenizer, rewritten, tools)
    shared = common_prefix(previous, full)
    assert first[0] != "Let me check." and shared < len(previous)
    assert policy.stats.drift_turns == 1 and policy.stats.drift_tokens == len(previous) - shared
    assert policy.decoded[0][1].prompt_ids == full
    expected = decode(model, full, stop_ids(tokenizer, policy.tool_format), max_new_tokens=MAX_NEW_TOKENS)
    assert policy.decoded[0][1].new_ids == expected.new_ids and \
        second[0] == turn_text(tokenizer, expected.new_ids, policy.tool_format)
    policy.done()


def test_sampled_rollouts_keep_the_full_prompt_of_every_turn_and_repeat_with_the_seed(trained: tuple[Any, Any],
                                                                                     retail_kit: Kit) -> None:
    import torch

    model, tokenizer = trained
    cases = [case for case in retail_kit.cases("eval")[:3] for _ in range(2)]  # three groups of two

    def sample() -> list[Any]:
        policy = ModelTurns(model, tokenizer, MAX_NEW_TOKENS, 1.0, torch.Generator().manual_seed(5), slots=4)
        runtime = retail_kit.world().runtime()
        try:
            return rollouts(policy, runtime, cases, MAX_TURNS)
        finally:
            runtime.close()

    first, second = sample(), sample()
    assert [[t.new_ids for t in r.turns] for r in first] == [[t.new_ids for t in r.turns] for r in second]
    for case, item in zip(cases, first, strict=True):
        assert case.prompt is not None
        messages = list(item.episode.messages)
        starts = [i for i, m in enumerate(messages) if i >= len(case.prompt.messages) and m["role"] == "assistant"]
        assert len(starts) == len(item.turns) == item.episode.turns
        for start, turn in zip(starts, item.turns, strict=True):
            assert turn.prompt_ids == prompt_ids(tokenizer, messages[:start], case.prompt.tools)  # what it saw
            assert turn.new_ids and len(turn.new_ids) <= MAX_NEW_TOKENS
