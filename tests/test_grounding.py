"""Grounding turns (tool calls that quote the user's words) and the extra SFT examples made from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blobkit.errors import ConfigError
from trainers.config import TrainConfig
from trainers.grounding import (
    answer_quote_examples,
    answer_quote_turns,
    grounding_examples,
    grounding_turns,
    with_grounding_repeats,
)
from trainers.plan import plan, validate_rows
from world_format.kit import open_kit


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                               "function": {"name": name, "arguments": arguments}}]}


def email_row(email: str, said: str | None = None) -> dict[str, Any]:
    """find the customer by the email they gave, then list their orders, then answer."""
    return {
        "messages": [
            {"role": "system", "content": "You are the support agent."},
            {"role": "user", "content": f"Hi, this is {said or email}. How many orders do I have?"},
            _call("find_customer_by_email", {"email": email}),
            {"role": "tool", "name": "find_customer_by_email", "content": json.dumps({"id": 7, "email": email})},
            _call("list_orders", {"customer_id": 7}),
            {"role": "tool", "name": "list_orders", "content": "[]"},
            {"role": "assistant", "content": "You have no orders."},
        ],
        "tools": [{"type": "function", "function": {"name": "find_customer_by_email"}}],
        "metadata": {"case_id": email},
    }


def test_a_call_passing_the_users_email_is_a_grounding_turn_and_a_call_passing_an_observed_id_is_not() -> None:
    assert grounding_turns(email_row("kim.lee@example.com")) == [2]


def test_a_string_the_user_never_wrote_does_not_count() -> None:
    assert grounding_turns(email_row("kim.lee@example.com", said="Kim Lee")) == []


def order_row(said: str) -> dict[str, Any]:
    """identify the customer by email, then read the order they named by its number."""
    row = email_row("kim.lee@example.com")
    row["messages"][1]["content"] = f"Hi, this is kim.lee@example.com. {said}"
    row["messages"][4] = _call("get_order", {"order_id": 50123})
    return row


@pytest.mark.parametrize(("said", "turns"), [
    ("What is the status of my order 50123?", [2, 4]),  # the order number the customer wrote is grounding
    ("What is the status of my order 501234?", [2]),  # a longer number is not that one
    ("My order 5.50123 in total?", [2]),  # nor is a figure with a decimal point
    ("Where is my latest order?", [2]),  # an id read from an observation is not grounding
])
def test_an_integer_the_customer_wrote_counts_as_grounding_as_a_whole_number(said: str, turns: list[int]) -> None:
    assert grounding_turns(order_row(said)) == turns


def test_a_row_with_several_grounding_calls_gives_one_example_up_to_the_last_of_them() -> None:
    row = order_row("What is the status of my order 50123?")
    (example,) = grounding_examples([row])
    assert example["messages"] == row["messages"][:5]


def test_a_grounding_example_is_the_executed_conversation_up_to_and_including_that_call() -> None:
    row = email_row("kim.lee@example.com")
    (example,) = grounding_examples([row])
    assert example["messages"] == row["messages"][:3]
    assert example["tools"] == row["tools"] and "metadata" not in example


def test_repeats_append_each_grounding_example_that_many_times_after_the_rows() -> None:
    rows = [email_row("kim.lee@example.com"), email_row("x@example.com", said="X"), email_row("ana_ito@example.com")]
    out = with_grounding_repeats(rows, 2)
    assert out[:3] == rows and len(out) == 3 + 2 * 2
    assert [m["messages"][1]["content"] for m in out[3:]] == [rows[0]["messages"][1]["content"],
                                                              rows[2]["messages"][1]["content"]] * 2
    assert with_grounding_repeats(rows, 0) == rows
    with pytest.raises(ConfigError):
        with_grounding_repeats(rows, -1)


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_the_plan_counts_grounding_examples_in_the_optimizer_steps_and_they_validate(kit_path: Path,
                                                                                   tmp_path: Path) -> None:
    # kit_path: the small world built with 4 training and 2 held-out cases per task (shared, read only)
    with open_kit(kit_path) as kit:
        rows = kit.jsonl("sft.jsonl")
        examples = grounding_examples(rows)
        assert examples, "the small world's email lookups quote the user"
        validate_rows(kit.world(), examples)
        config = TrainConfig(kit=kit_path, base="Qwen/Qwen2.5-0.5B-Instruct", method="sft", target="local-torch",
                             out=tmp_path / "plan", dry_run=True, batch_size=4, epochs=1, grounding_repeats=3)
        planned = plan(config, kit, rows, kit.path("sft.jsonl"))
    assert planned.rows == len(rows) and planned.grounding_examples == 3 * len(examples)
    assert planned.estimated_optimizer_steps == -(-(len(rows) + 3 * len(examples)) // 4)


def total_row(total: str, user_says: str = "What is the total of order 51264?") -> dict[str, Any]:
    """get_order, then an answer quoting the observed total."""
    return {
        "messages": [
            {"role": "system", "content": "You are the support agent."},
            {"role": "user", "content": user_says},
            _call("get_order", {"order_id": 51264}),
            {"role": "tool", "name": "get_order", "content": json.dumps({"id": 51264, "total": float(total)})},
            {"role": "assistant", "content": f"The total of order 51264 is {total}."},
        ],
    }


def test_an_answer_quoting_an_observed_amount_counts_and_one_repeating_the_users_figure_does_not() -> None:
    assert answer_quote_turns(total_row("265.57")) == [4]
    assert answer_quote_turns(total_row("265.57", user_says="Is 265.57 the total of order 51264?")) == []
    assert answer_quote_turns(email_row("kim.lee@example.com")) == []
    (example,) = answer_quote_examples([total_row("265.57")])
    assert example["messages"] == total_row("265.57")["messages"]


def test_answer_repeats_come_after_the_grounding_repeats() -> None:
    rows = [email_row("kim.lee@example.com"), total_row("265.57")]
    out = with_grounding_repeats(rows, 1, answer_repeats=2)  # both rows ground (an email, an order number)
    assert len(out) == 2 + 2 + 2
    assert out[2]["messages"] == rows[0]["messages"][:3] and out[3]["messages"] == rows[1]["messages"][:3]
    assert out[4]["messages"] == out[5]["messages"] == rows[1]["messages"]
