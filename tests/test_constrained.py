"""Constrained decoding of tool calls (issue 29 lever 4): a turn can only name a declared tool, with arguments
valid for it and row-naming arguments the conversation holds; the verifier sees and accepts what it always did."""

from __future__ import annotations

import json
import os
import random

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llguidance")

from trainers.constrained import ToolCallConstraint, conversation_values, key_parameters  # noqa: E402
from trainers.errors import ConfigError  # noqa: E402
from trainers.evaluation import model_policy, replay_trajectory, run_episodes  # noqa: E402
from trainers.formats import format_of, get_format  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tinker_tiny: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tinker_tiny).eval(), AutoTokenizer.from_pretrained(tinker_tiny)


def _conversation(retail_kit: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    case = retail_kit.cases("eval")[0]
    observation = json.dumps({"id": 7, "orders": [{"id": 50123, "status": "shipped"}], "email": "ada@example.com"})
    messages = [*case.prompt.messages, {"role": "user", "content": "It is order 50124, my email is bo@example.com."},
                {"role": "tool", "name": "find_customer_by_email", "content": observation}]
    return messages, case.prompt.tools


def _accepts(constraint: ToolCallConstraint, tokenizer: Any, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]], text: str) -> bool:
    matcher = constraint.matcher(messages, tools).matcher
    return all(matcher.consume_token(t) for t in tokenizer.encode(text, add_special_tokens=False)) and \
        matcher.is_accepting()


def test_the_values_a_row_naming_argument_may_take_come_from_the_conversation(retail_kit: Any) -> None:
    messages, _ = _conversation(retail_kit)
    strings, integers = conversation_values(messages)
    assert {"bo@example.com", "ada@example.com", "shipped"} <= set(strings)
    assert {50124, 50123, 7} <= set(integers)
    assert conversation_values([{"role": "assistant", "content": "order 999"}]) == ([], [])


def test_the_grammar_admits_declared_calls_with_valid_arguments_and_conversation_keys_only(
        retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    constraint = ToolCallConstraint(tokenizer, format_of(tokenizer), key_parameters(retail_kit.world().world))
    messages, tools = _conversation(retail_kit)

    def call(name: str, arguments: dict[str, Any]) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    accepts = lambda text: _accepts(constraint, tokenizer, messages, tools, text)  # noqa: E731
    assert accepts(call("get_order", {"order_id": 50124}))
    assert accepts(call("find_customer_by_email", {"email": "bo@example.com"}))
    assert accepts(call("get_order", {"order_id": 50123}) + "\n" + call("get_order", {"order_id": 50124}))
    assert accepts("Your order 50124 has shipped.")
    assert not accepts(call("get_order", {"order_id": 50125}))  # a number nobody said
    assert not accepts(call("find_customer_by_email", {"email": "bo@exampel.com"}))  # copied a character wrong
    assert not accepts(call("teleport", {"order_id": 50124}))  # not a declared tool
    assert not accepts(call("get_order", {"order_id": "50124"}))  # the schema's type
    assert not accepts(call("get_order", {}))  # a required field
    assert not accepts(call("issue_refund", {"order_id": 50124, "reason": "bored"}))  # the schema's enum
    assert not accepts("Sure, let me look. <tool_call>")  # an answer never writes a call tag


def test_formats_that_do_not_write_tool_call_json_blocks_are_refused(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    with pytest.raises(ConfigError, match="--decoding free"):
        ToolCallConstraint(tokenizer, get_format("llama3"), {})


def test_random_walks_through_the_grammar_are_calls_the_world_accepts(retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    """Whatever tokens a sampler picks among those the mask allows, the call parses, names a declared tool and its
    arguments pass the world's own validator."""
    import torch

    _, tokenizer = tiny
    constraint = ToolCallConstraint(tokenizer, format_of(tokenizer), key_parameters(retail_kit.world().world))
    messages, tools = _conversation(retail_kit)
    runtime, rng, finished = retail_kit.world().runtime(), random.Random(0), 0
    fmt = format_of(tokenizer)
    try:
        for _ in range(12):
            turn = constraint.matcher(messages, tools)
            ids = tokenizer.encode("<tool_call>\n", add_special_tokens=False)
            for token in ids:
                turn.advance(token)
            for _ in range(200):
                logits = torch.zeros(len(tokenizer) + 3)
                turn.mask(logits)
                allowed = torch.isfinite(logits).nonzero()[:, 0].tolist()
                token = tokenizer.eos_token_id if tokenizer.eos_token_id in allowed else rng.choice(allowed)
                if token == tokenizer.eos_token_id:
                    break
                turn.advance(token)
                ids.append(token)
            else:
                continue
            finished += 1
            parsed = fmt.parse(tokenizer.decode(ids, skip_special_tokens=False))
            assert not parsed.parse_errors and parsed.tool_calls
            for found in parsed.tool_calls:
                tool = runtime.tools[found["name"]]
                assert not list(tool.validator.iter_errors(found["arguments"]))
    finally:
        runtime.close()
    assert finished >= 6


def test_constrained_episodes_are_judged_as_the_free_scoring_path_judges_their_messages(
        retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    loaded = retail_kit.world()
    cases = retail_kit.cases("eval")[:3]
    runtime = loaded.runtime()
    try:
        policy = model_policy(model, tokenizer, 24, 3, decoding="constrained", world=loaded.world)
        episodes = run_episodes(policy, runtime, cases, 2)
        for case, episode in zip(cases, episodes, strict=True):
            replayed = replay_trajectory(runtime, case, episode.messages, max_turns=2)
            assert replayed.verdict == episode.verdict and replayed.trace == episode.trace
    finally:
        runtime.close()
