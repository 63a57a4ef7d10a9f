"""A declared hand-off rule (issue 28 item 9): minted hand-off cases call the pure hand-off tool and give the fixed
message, are executed rows, pass the reference and fail the wrong agents; a rule naming an unknown or impure tool
is refused by name."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_world
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.builder.agents import NAMES
from world_format.errors import WorldFormatError
from world_format.kit import open_kit
from world_format.loader import load_world

SMALL = BuildConfig(train_cases_per_task=4, eval_cases_per_task=2)
MESSAGE = "I have passed your request to a human agent, who will take over this conversation."
TRANSFER = {"name": "transfer_to_human_agents", "effect": "none", "description": "Hand the conversation to a human.",
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["reason", "order_id", "summary"],
                           "properties": {"reason": {"type": "string", "enum": ["compensation", "other"],
                                                     "description": "Why"},
                                          "order_id": {"type": "integer", "description": "Order id"},
                                          "summary": {"type": "string", "maxLength": 500,
                                                      "description": "What the customer needs"}}},
            "result": {"shape": "recorded", "message": "A human agent will take over this conversation."},
            "anchors": {"order_id": "orders.id"}}


def handoff_world(**rule: Any) -> dict[str, Any]:
    """The small shop identifying customers by email, with a pure hand-off tool and a rule for compensation."""
    world = small_world()
    world["procedures"] = {"identify": "find_customer_by_email", "check_before_write": True, "handoff": {
        "tool": "transfer_to_human_agents", "arguments": {"reason": "compensation"},
        "when": ["I want compensation for the late delivery of {row}.", "I'd like a goodwill credit for {row}."],
        "message": MESSAGE, **rule}}
    world["state"]["anchors"][0]["internal_key"] = True
    world["tools"].append(json.loads(json.dumps(TRANSFER)))
    return world


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("handoff")
    first = build_kit(write_world(root / "w", handoff_world()), root / "a", SMALL)
    second = build_kit(write_world(root / "w", handoff_world()), root / "b", SMALL)
    return Path(first["kit"]["path"]), Path(second["kit"]["path"])


def _digests(kit: Path) -> dict[str, str]:
    return {str(p.relative_to(kit)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(kit.rglob("*")) if p.is_file()}


def _calls(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for m in row["messages"]
            for c in m.get("tool_calls") or []]


def test_a_world_with_a_handoff_rule_builds_to_identical_bytes_twice(built: tuple[Path, Path]) -> None:
    first, second = built
    assert _digests(first) == _digests(second)


def test_handoff_rows_identify_call_the_handoff_tool_and_give_the_message(built: tuple[Path, Path]) -> None:
    rows = [json.loads(line) for line in (built[0] / "sft.jsonl").read_text().splitlines()]
    handoffs = [row for row in rows if row["metadata"]["template"] == "handoff"]
    assert handoffs
    for row in handoffs:
        calls = _calls(row)
        assert [tool for tool, _ in calls] == ["find_customer_by_email", "transfer_to_human_agents"]
        arguments = calls[1][1]
        assert arguments["reason"] == "compensation" and isinstance(arguments["order_id"], int)
        assert f"order {arguments['order_id']}" in row["messages"][1]["content"]
        assert arguments["summary"].startswith("The customer says: ")
        executed = [m for m in row["messages"] if m["role"] == "tool"]  # the observations the tools returned
        assert json.loads(executed[-1]["content"])["status"] == "recorded"
        assert row["messages"][-1] == {"role": "assistant", "content": MESSAGE}


def test_handoff_cases_pass_the_reference_and_every_applicable_wrong_agent_fails(built: tuple[Path, Path]) -> None:
    with open_kit(built[0]) as kit:
        cases = [case for side in ("train", "eval") for case in kit.cases(side) if case.template == "handoff"]
    assert {case.side for case in cases} == {"train", "eval"}
    for case in cases:
        applied = {name: case.probes[name] for name in NAMES if case.probes[name] != "n/a"}
        assert {"null", "no-handoff", "forbidden-write", "wrong-row", "wrong-value", "unidentified"} <= set(applied)
        assert set(applied.values()) == {"fail"}, case.probes
        assert {"tool_called", "answer", "tool_not_called", "unchanged_except"} <= \
            {check.kind for check in case.task.vcode.checks}


def test_no_handoff_is_not_applicable_to_a_world_without_a_rule(kit_path: Path) -> None:
    with open_kit(kit_path) as kit:
        assert {case.probes["no-handoff"] for case in kit.cases("eval")} == {"n/a"}


@pytest.mark.parametrize(("rule", "change", "message"), [
    ({"tool": "transfer_to_humans"}, None, "/procedures/handoff/tool: 'transfer_to_humans' is not a declared tool"),
    ({"tool": "cancel_order"}, None, "/procedures/handoff/tool: 'cancel_order' must be a pure tool"),
    ({"arguments": {"urgency": "high"}}, None, "/procedures/handoff/arguments/urgency: 'transfer_to_human_agents' "
                                               "has no parameter 'urgency'"),
    ({}, "no_identify", "a hand-off rule needs procedures.identify"),
    ({"arguments": {}}, "integer_reason", "'transfer_to_human_agents' requires 'reason'"),
])
def test_a_handoff_rule_that_cannot_be_followed_is_refused_by_name(tmp_path: Path, rule: dict[str, Any],
                                                                   change: str | None, message: str) -> None:
    world = handoff_world(**rule)
    if change == "no_identify":
        del world["procedures"]["identify"]
        world["state"]["anchors"][0]["internal_key"] = False
    if change == "integer_reason":
        world["tools"][-1]["parameters"]["properties"]["reason"] = {"type": "integer", "description": "Why"}
    with pytest.raises(WorldFormatError, match=message.replace("(", r"\(")):
        load_world(write_world(tmp_path / "w", world))


def test_a_request_listed_twice_is_refused(tmp_path: Path) -> None:
    world = handoff_world(when=["I want compensation for {row}.", "I want compensation for {row}."])
    with pytest.raises(WorldFormatError, match="listed twice"):
        load_world(write_world(tmp_path / "w", world))


def test_the_rule_adds_its_policy_line_to_the_system_prompt(tmp_path: Path) -> None:
    prompt = load_world(write_world(tmp_path / "w", handoff_world())).world.system_prompt()
    assert prompt.splitlines()[-1] == (
        '- Requests like these go to a human agent: "I want compensation for the late delivery of <row>."; '
        '"I\'d like a goodwill credit for <row>.". For them call transfer_to_human_agents with reason="compensation", '
        f"change nothing, and then tell the customer: {MESSAGE}")
