"""Natural conversations and arguments from the state (issue #16 items 2 and 3): rows named as customers name
them, labels and money as the world quotes them, counts as a customer counts, explanations instead of pasted
errors, and every write's arguments filled from the state."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, write_world
from kit_cache import cached_kit
from worlds import library_world, small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.builder.mint import answer_check, quoted
from blobkit.wording import task_defects
from world_format.errors import KitError, WorldFormatError
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Column, Task, World

SMALL = BuildConfig(train_cases_per_task=4, eval_cases_per_task=2)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("library")
    record = build_kit(write_world(root / "w", library_world()), root / "out", SMALL)
    rows = [json.loads(line) for line in (Path(record["kit"]["path"]) / "sft.jsonl").read_text().splitlines()]
    return {"record": record, "rows": rows, "world": library_world()}


def _observations(row: dict[str, Any]) -> dict[str, Any]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in row["messages"] if m["role"] == "tool"}


def _written(rows: list[dict[str, Any]], tool: str) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(the write's arguments, the identified patron, the looked-up loan) of each row that makes ``tool``."""
    found = []
    for row in rows:
        seen = _observations(row)
        calls = [(c["function"]["name"], c["function"]["arguments"], seen[c["id"]]) for m in row["messages"]
                 for c in m.get("tool_calls") or []]
        patron = next(obs for name, _, obs in calls if name == "find_patron_by_email")
        loan = next((obs for name, _, obs in calls if name == "get_loan"), {})
        found += [(arguments, patron, loan) for name, arguments, _ in calls if name == tool]
    return found


def test_write_arguments_come_from_the_customer_the_row_and_a_choice_that_changes_it(library: dict[str, Any]) -> None:
    renewals, payments, moves = (_written(library["rows"], t) for t in ("renew_loan", "pay_fine", "set_pickup"))
    assert renewals and all(args["card_number"] == patron["card_number"] for args, patron, _ in renewals)
    assert payments and all(args["amount_cents"] == loan["fine_cents"] > 0 for args, _, loan in payments)
    assert moves and all(args["branch"] != loan["branch"] for args, _, loan in moves)
    assert all("reason" not in entry for entry in library["record"]["tool_coverage"].values())


def test_refusals_explain_in_the_worlds_words(library: dict[str, Any]) -> None:
    refusals = [row["messages"][-1]["content"] for row in library["rows"]
                if row["metadata"]["template"] == "write_refused"]
    explanations = {p["explanation"] for tool in library["world"]["tools"] for p in tool.get("preconditions", [])
                    if "explanation" in p}
    errors = {p["error"] for tool in library["world"]["tools"] for p in tool.get("preconditions", [])}
    assert refusals and all(any(text.endswith(f": {e}.") for e in explanations) for text in refusals)
    assert not any(error.rstrip(".") in text for text in refusals for error in errors)


def test_counts_leave_out_what_a_customer_would_not_count(library: dict[str, Any]) -> None:
    counted = [row for row in library["rows"] if row["metadata"]["template"] == "aggregate_count"]
    assert counted
    for row in counted:
        listed = next(json.loads(m["content"]) for m in row["messages"] if m["role"] == "tool"
                      and m["name"] == "list_loans")
        kept = sum(loan["status"] != "returned" for loan in listed)
        assert re.search(rf"\b{kept} loans?, not counting returned books\.$", row["messages"][-1]["content"])


def test_money_in_minor_units_is_quoted_and_checked_in_the_major_unit() -> None:
    cents = Column(name="fine_cents", type="INTEGER", currency="$", decimals=2, minor_units=True)
    dollars = Column(name="total", type="REAL", currency="$", decimals=2)
    assert quoted(75, cents) == "$0.75" and quoted(1234, cents) == "$12.34" and quoted(310.97, dollars) == "$310.97"
    assert answer_check(75, column=cents) == {"kind": "answer", "mode": "number", "value": "0.75", "decimals": 2,
                                              "rounding": "half_even"}
    assert quoted("delivered", None) == "delivered" and quoted(3, None) == "3"


def test_customers_never_state_internal_ids_and_rows_are_named_as_declared(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with open_kit(cached_kit(ROOT / "examples" / "airline_desk" / "world.json", tmp_path_factory)) as kit:
        world = kit.world().world
        minted = [case.task for case in kit.cases("train") + kit.cases("eval") if case.task.template != "authored"]
    assert minted and all(task_defects(world, task) == [] for task in minted)
    legs = [task.instruction for task in minted if task.anchor.table == "booking_legs"]
    assert legs and all(re.search(r"my leg \d of booking [A-Z]{6}", text) for text in legs)
    assert not any(re.search(r"customer \d", task.instruction) for task in minted)


def test_the_lint_finds_a_pasted_error_and_an_internal_id() -> None:
    document = small_world()
    document["state"]["anchors"][0]["internal_key"] = True  # customer ids are internal
    world = World.model_validate(document)
    task = Task.model_validate({
        "instruction": "I am customer 7, please cancel order 103.", "anchor": {"table": "customers", "key": 7},
        "reference": [{"tool": "get_customer", "arguments": {"customer_id": 7}}],
        "answer": "Sorry: only pending orders can be cancelled.", "template": "write_refused",
        "vcode": {"checks": [{"kind": "unchanged_except"}]}})
    assert sorted(kind for kind, _ in task_defects(world, task)) == ["internal_id", "pasted_error"]


def test_a_minted_answer_that_pastes_a_tools_error_fails_the_build(tmp_path: Path) -> None:
    world = small_world()
    cancel = next(tool for tool in world["tools"] if tool["name"] == "cancel_order")
    cancel["preconditions"][1]["explanation"] = "only pending orders can be cancelled"  # the error itself
    with pytest.raises(KitError, match="wording defect \\(pasted_error\\)"):
        build_kit(write_world(tmp_path / "w", world), tmp_path / "out", SMALL)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["state"]["tables"][0]["columns"][1].update(currency="$"), "money is stored in INTEGER or REAL"),
    (lambda w: w["state"]["tables"][1]["columns"][3].update(minor_units=True), "give decimals"),
    (lambda w: w["state"]["anchors"][1].update(named_as="order {number}"), "name every key column"),
])
def test_declarations_wording_cannot_follow_are_refused(tmp_path: Path, change: Any, message: str) -> None:
    world = small_world()
    change(world)
    with pytest.raises(WorldFormatError, match=message):
        load_world(write_world(tmp_path, world))
