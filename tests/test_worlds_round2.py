"""Real worlds, second round (issue 28): what a public retail policy and a library desk needed of the format.

Each item on a small world built in code (``worlds.py``), with the right declaration and the wrong one a world's
author would first write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import write_world
from worlds import library_world, small_world

from blobkit.errors import WorldFormatError
from world_format.loader import load_world


def _load(tmp_path: Path, document: dict[str, Any]) -> Any:
    return load_world(write_world(tmp_path / "w", document))


# ----------------------------------------------------------------- item 4: seed rows load in dependency order


def test_seed_rows_load_in_dependency_order_not_declaration_order(tmp_path: Path) -> None:
    world = small_world()
    world["state"]["tables"].reverse()  # orders (referencing customers) declared first
    loaded = _load(tmp_path, world)
    runtime = loaded.runtime()
    try:
        assert runtime.pristine.execute("SELECT count(*) FROM orders").fetchone() == (60,)
    finally:
        runtime.close()


def test_a_reference_to_a_missing_row_is_still_refused_whatever_the_order(tmp_path: Path) -> None:
    world = small_world()
    world["state"]["tables"].reverse()
    world["state"]["rows"]["orders"][3][1] = 999
    with pytest.raises(WorldFormatError, match="rows/orders/3: references a missing customers row"):
        _load(tmp_path, world)


def test_a_self_reference_may_name_a_later_row(tmp_path: Path) -> None:
    world = library_world()
    patrons = world["state"]["tables"][0]
    patrons["columns"].append({"name": "sponsor_id", "type": "INTEGER", "references": "patrons.id"})
    rows = world["state"]["rows"]["patrons"]
    for index, row in enumerate(rows):
        row.append(rows[(index + 1) % len(rows)][0])  # each patron sponsored by the next one
    assert _load(tmp_path, world).world.state.tables[0].columns[-1].name == "sponsor_id"


# ----------------------------------------------------------------- item 3: which reference owns a row is declared


def _with_items(owner: str | None) -> dict[str, Any]:
    """The shop with order items that reference their product *before* their order (the owner)."""
    world = small_world()
    state = world["state"]
    state["tables"].insert(0, {"name": "products", "columns": [
        {"name": "id", "type": "INTEGER", "primary_key": True}, {"name": "title", "type": "TEXT", "not_null": True}]})
    items: dict[str, Any] = {"name": "order_items", "columns": [
        {"name": "id", "type": "INTEGER", "primary_key": True},
        {"name": "product_id", "type": "INTEGER", "not_null": True, "references": "products.id"},
        {"name": "order_id", "type": "INTEGER", "not_null": True, "references": "orders.id"}]}
    if owner is not None:
        items["owner"] = owner
    state["tables"].append(items)
    state["rows"]["products"] = [[i, f"Product {i}"] for i in range(1, 6)]
    state["rows"]["order_items"] = [[i, 1 + i % 5, 100 + i % 60] for i in range(1, 121)]
    return world


def test_a_table_referencing_several_tables_must_declare_its_owner(tmp_path: Path) -> None:
    with pytest.raises(WorldFormatError, match=r"/state/tables/3/owner: .*\['product_id', 'order_id'\]: declare"):
        _load(tmp_path, _with_items(None))
    with pytest.raises(WorldFormatError, match="owner 'title' is not a column of 'order_items' that references"):
        _load(tmp_path, _with_items("title"))


def test_the_declared_owner_decides_the_entity_whatever_the_column_order(tmp_path: Path) -> None:
    from world_format.entities import Entities

    loaded = _load(tmp_path, _with_items("order_id"))
    runtime = loaded.runtime()
    try:
        entities = Entities(loaded.world, runtime.pristine)
        order = runtime.pristine.execute("SELECT customer_id FROM orders WHERE id = 107").fetchone()[0]
        assert entities.root("order_items", 7) == ("customers", order)  # item 7 is of order 107, not product 3
        assert entities.root("products", 3) == ("products", 3)
    finally:
        runtime.close()


# ------------------------------------------------------------- item 5: the task cap is a setting that says what it cut


def test_the_task_cap_is_a_setting_and_coverage_names_the_write_it_cut(tmp_path: Path) -> None:
    import re

    from blobkit.builder import BuildConfig
    from blobkit.builder.builder import execute_build

    path = write_world(tmp_path / "w", small_world())
    small = BuildConfig(max_tasks=2, train_cases_per_task=2, eval_cases_per_task=1)
    coverage = execute_build(path, small).record["tool_coverage"]
    cut = {name: entry["reason"] for name, entry in coverage.items() if "task cap cut it" in entry.get("reason", "")}
    assert "set_tier" in cut, coverage  # the only write no authored task makes
    needed = int(re.search(r"raise --max-tasks to (\d+)", cut["set_tier"]).group(1))  # type: ignore[union-attr]
    assert needed > 2
    raised = execute_build(path, small.model_copy(update={"max_tasks": needed})).record["tool_coverage"]
    assert raised["set_tier"]["cases"] > 0
    assert BuildConfig(max_tasks=40).max_tasks == 40  # above the old fixed 12


# ------------------------------------------------------- item 5: list arguments and choices among the customer's rows


def _shop_with_items_and_payments() -> dict[str, Any]:
    """The shop, identified by email, with order items (a return names several) and the customers' payment methods
    (an order is paid with another of *your* methods)."""
    world = _with_items("order_id")
    state = world["state"]
    state["tables"].append({"name": "payment_methods", "columns": [
        {"name": "id", "type": "TEXT", "primary_key": True},
        {"name": "customer_id", "type": "INTEGER", "not_null": True, "references": "customers.id"}]})
    state["rows"]["payment_methods"] = [[f"card_{c}{n}", c] for c in range(1, 25) for n in range(2)]
    state["tables"][2]["columns"].append({"name": "payment_method_id", "type": "TEXT",
                                          "references": "payment_methods.id"})
    state["tables"][2]["owner"] = "customer_id"
    for order in state["rows"]["orders"]:
        order.append(f"card_{order[1]}0")
    state["tables"][3]["columns"].append({"name": "returned", "type": "INTEGER", "not_null": True, "default": 0})
    for item in state["rows"]["order_items"]:
        item.append(0)
    integer = {"type": "integer", "description": "Order id"}
    exists = {"sql": "SELECT COUNT(*) FROM orders WHERE id = :order_id", "error": "no order with that id"}
    world["tools"] += [
        {"name": "return_items", "description": "Return items of a delivered order.", "effect": "write",
         "parameters": {"type": "object", "additionalProperties": False, "required": ["order_id", "item_ids"],
                        "properties": {"order_id": integer, "item_ids": {
                            "type": "array", "items": {"type": "integer"}, "description": "Items to return"}}},
         "preconditions": [exists, {"sql": "SELECT status = 'delivered' FROM orders WHERE id = :order_id",
                                    "error": "only delivered orders", "explanation": "it has not been delivered"}],
         "statements": ["UPDATE order_items SET returned = 1 WHERE order_id = :order_id AND id IN "
                        "(SELECT value FROM json_each(:item_ids))"],
         "result": {"shape": "affected"}, "anchors": {"order_id": "orders.id", "item_ids": "order_items.id"},
         "action": "return items {item_ids} of {row}"},
        {"name": "change_payment", "description": "Pay a pending order with another payment method.",
         "effect": "write",
         "parameters": {"type": "object", "additionalProperties": False,
                        "required": ["order_id", "payment_method_id"],
                        "properties": {"order_id": integer, "payment_method_id": {
                            "type": "string", "description": "One of the customer's payment methods"}}},
         "preconditions": [exists, {"sql": "SELECT status = 'pending' FROM orders WHERE id = :order_id",
                                    "error": "only pending orders", "explanation": "it is no longer pending"}],
         "statements": ["UPDATE orders SET payment_method_id = :payment_method_id WHERE id = :order_id"],
         "result": {"shape": "affected"},
         "anchors": {"order_id": "orders.id", "payment_method_id": "payment_methods.id"},
         "action": "pay for {row} with {payment_method_id}"}]
    world["tools"][0]["statements"] = ["SELECT id, customer_id, status, total, payment_method_id FROM orders "
                                       "WHERE id = :order_id"]
    world["procedures"] = {"identify": "find_customer_by_email", "check_before_write": True}
    world["tasks"] = []
    return world


def test_minting_fills_list_arguments_with_the_rows_children_and_choices_with_the_customers_own_rows(
        tmp_path: Path) -> None:
    import json

    from blobkit.builder import BuildConfig
    from blobkit.builder.builder import execute_build

    path = write_world(tmp_path / "w", _shop_with_items_and_payments())
    built = execute_build(path, BuildConfig(max_tasks=40, train_cases_per_task=4, eval_cases_per_task=2))
    coverage = built.record["tool_coverage"]
    assert coverage["return_items"]["cases"] > 0 and coverage["change_payment"]["cases"] > 0, coverage
    loaded = load_world(path)
    runtime = loaded.runtime()
    try:
        cases = [json.loads(line) for name in ("train_cases.jsonl", "eval_cases.jsonl")
                 for line in built.files[name].decode().splitlines()]
        returns = [c for c in cases if any(s["tool"] == "return_items" and not s.get("expect_error")
                                           for s in c["task"]["reference"])]
        payments = [c for c in cases if any(s["tool"] == "change_payment" and not s.get("expect_error")
                                            for s in c["task"]["reference"])]
        assert returns and payments
        for case in returns:
            step = next(s for s in case["task"]["reference"] if s["tool"] == "return_items")
            items, order = step["arguments"]["item_ids"], case["task"]["anchor"]["key"]
            own = [row[0] for row in runtime.pristine.execute(
                "SELECT id FROM order_items WHERE order_id = ? ORDER BY id", (order,))]
            assert items == own[:2] and all(str(item) in case["task"]["instruction"] for item in items)
            called = next(c for c in case["task"]["vcode"]["checks"] if c["kind"] == "tool_called"
                          and c["tool"] == "return_items")
            assert called["list_match"] == "multiset"
        for case in payments:
            step = next(s for s in case["task"]["reference"] if s["tool"] == "change_payment")
            method, order = step["arguments"]["payment_method_id"], case["task"]["anchor"]["key"]
            customer, current = runtime.pristine.execute("SELECT customer_id, payment_method_id FROM orders "
                                                         "WHERE id = ?", (order,)).fetchone()
            assert method.startswith(f"card_{customer}") and method != current  # another of *their* methods
            assert method in case["task"]["instruction"]
    finally:
        runtime.close()


# ----------------------------------------------------------------- item 1: several ways to identify, multi-column keys


def _two_ways_world() -> dict[str, Any]:
    """The shop, whose customers identify by email or by name and zip code."""
    world = small_world()
    customers = world["state"]["tables"][0]
    customers["columns"].append({"name": "zip", "type": "TEXT", "not_null": True, "label": "zip code"})
    for row in world["state"]["rows"]["customers"]:
        row.append(f"{94100 + row[0]}")
    world["state"]["anchors"][0].update(natural_keys=["email", "name", "zip"], internal_key=True)
    text = {"type": "string", "maxLength": 200}
    world["tools"].append({
        "name": "find_customer_by_name_zip", "description": "Find a customer by full name and zip code.",
        "effect": "read", "parameters": {"type": "object", "additionalProperties": False, "required": ["name", "zip"],
                                         "properties": {"name": {**text, "description": "Full name"},
                                                        "zip": {**text, "description": "Zip code"}}},
        "statements": ["SELECT id, name, email, tier, zip FROM customers WHERE name = :name AND zip = :zip"],
        "result": {"shape": "row", "not_found": "no such customer"},
        "anchors": {"name": "customers.name", "zip": "customers.zip"}})
    world["tools"][1]["statements"] = ["SELECT id, name, email, tier, zip FROM customers WHERE id = :customer_id"]
    world["tools"][2]["statements"] = ["SELECT id, name, email, tier, zip FROM customers WHERE email = :email"]
    world["procedures"] = {"identify": ["find_customer_by_email", "find_customer_by_name_zip"],
                           "check_before_write": True}
    world["tasks"] = [{
        "instruction": "My name is Chloe Smith2 and my zip code is 94102. What is my tier?",
        "anchor": {"table": "customers", "key": 2},
        "reference": [{"tool": "find_customer_by_name_zip", "arguments": {"name": "Chloe Smith2", "zip": "94102"}}],
        "answer": "Your tier is bronze.",
        "vcode": {"checks": [{"kind": "tool_called", "tool": "find_customer_by_name_zip",
                              "arguments": {"name": "Chloe Smith2", "zip": "94102"}},
                             {"kind": "answer", "mode": "contains", "value": "bronze", "field": "customers.tier"},
                             {"kind": "unchanged_except"}]}}]
    return world


def test_a_world_may_identify_its_customers_several_ways_and_minting_uses_each(tmp_path: Path) -> None:
    import json

    from blobkit.builder import BuildConfig
    from blobkit.builder.builder import execute_build

    path = write_world(tmp_path / "w", _two_ways_world())
    built = execute_build(path, BuildConfig(max_tasks=12, train_cases_per_task=6, eval_cases_per_task=2))
    authored = [json.loads(line) for line in built.files["tasks.jsonl"].decode().splitlines()
                if json.loads(line)["source"] == "authored"]
    # identified by name and zip: admitted, no procedure violation (it was dropped as one before)
    assert authored and not authored[0]["rejected_because"] and authored[0]["cases"]["train"] + \
        authored[0]["cases"]["eval"] == 1, authored
    cases = [json.loads(line) for name in ("train_cases.jsonl", "eval_cases.jsonl")
             for line in built.files[name].decode().splitlines()]
    first = {c["task"]["reference"][0]["tool"] for c in cases if c["task"]["template"] != "authored"}
    assert {"find_customer_by_email", "find_customer_by_name_zip"} <= first
    by_name = next(c for c in cases if c["task"]["template"] != "authored"
                   and c["task"]["reference"][0]["tool"] == "find_customer_by_name_zip")
    arguments = by_name["task"]["reference"][0]["arguments"]
    assert f"My name is {arguments['name']} and my zip code is {arguments['zip']}." in by_name["task"]["instruction"]
    assert all(c["probes"]["unidentified"] in ("fail", "n/a") for c in cases)


def test_identifications_must_find_rows_of_one_identity_table_by_natural_keys(tmp_path: Path) -> None:
    world = _two_ways_world()
    world["procedures"]["identify"] = ["find_customer_by_email", "get_order"]
    with pytest.raises(WorldFormatError, match=r"/procedures/identify/1: 'get_order' must find a row of an anchor "):
        _load(tmp_path, world)
    world["state"]["anchors"][0]["natural_keys"] = ["email", "name"]
    world["procedures"]["identify"] = ["find_customer_by_email", "find_customer_by_name_zip"]
    with pytest.raises(WorldFormatError, match=r"identify/1: .*customers.'zip' is not one"):
        _load(tmp_path, world)


# ------------------------------------------------------------- item 7: episodes long enough for the chains they teach


def test_the_turn_cap_is_derived_from_the_kit_and_a_cap_below_a_case_is_refused(kit_path: Path,
                                                                                tmp_path: Path) -> None:
    from trainers.config import TrainConfig
    from trainers.episode_limit import EPISODE_SLACK, case_turns, episode_limit
    from trainers.errors import ConfigError
    from world_format.kit import open_kit

    with open_kit(kit_path) as kit:
        cases = kit.cases("train") + kit.cases("eval")
        needed = max(case_turns(case) for case in cases)
        longest = max(cases, key=case_turns)
        assert needed == len(longest.task.reference) + len(longest.task.turns) + 1 and needed >= 3
        derived, record = episode_limit(TrainConfig(kit=kit_path, out=tmp_path), kit)
        assert derived.max_turns == needed + EPISODE_SLACK and record.derived and record.cases_over_limit == 0
        assert episode_limit(TrainConfig(kit=kit_path, out=tmp_path, max_turns=needed), kit)[0].max_turns == needed
        with pytest.raises(ConfigError, match=rf"--max-turns {needed - 1} is below the {needed} assistant turns case "):
            episode_limit(TrainConfig(kit=kit_path, out=tmp_path, max_turns=needed - 1), kit)
        short, record = episode_limit(TrainConfig(kit=kit_path, out=tmp_path, max_turns=1, short_episodes=True), kit)
        assert short.max_turns == 1 and record.cases_over_limit == len(cases)


def test_a_dry_run_refuses_a_cap_below_what_a_case_needs_and_records_a_derived_one(kit_path: Path,
                                                                                   tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from blobkit.cli import app

    runner = CliRunner()
    common = ["train", "--world", str(kit_path), "--base", "HuggingFaceTB/SmolLM2-135M-Instruct", "--dry-run"]
    refused = runner.invoke(app, [*common, "--max-turns", "2", "--out", str(tmp_path / "a")])
    assert refused.exit_code != 0 and "is below the" in str(refused.exception)
    assert not (tmp_path / "a" / "plan.json").exists()
    planned = runner.invoke(app, [*common, "--out", str(tmp_path / "b")])
    assert planned.exit_code == 0, planned.output
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert plan["episode_limit"]["derived"] and plan["config"]["max_turns"] == plan["episode_limit"]["max_turns"]
    cap = plan["turn_tokens"]  # the token cap of a turn, derived from the rows under SmolLM2's template the same way
    assert cap["derived"] and plan["config"]["max_new_tokens"] == cap["max_new_tokens"] > cap["longest_turn_tokens"]
    assert f"turns of at most {cap['max_new_tokens']} tokens (derived" in planned.output


# ----------------------------------------------------------------- the fourth example: a library desk using all of it


def test_the_library_desk_builds_twice_identically_past_the_old_cap_and_uses_items_1_to_7(tmp_path: Path) -> None:
    import json

    from conftest import ROOT

    from blobkit.builder import BuildConfig, build_kit
    from blobkit.verify import verify_kit
    from world_format.kit import open_kit

    world = ROOT / "examples" / "library_desk" / "world.json"
    config = BuildConfig(max_tasks=24)
    first, second = (build_kit(world, tmp_path / name, config) for name in ("a", "b"))
    assert first["kit"]["sha256"] == second["kit"]["sha256"]
    assert first["tasks_count"] > 12  # more tool-using tasks than the old fixed cap
    coverage = first["tool_coverage"]
    for used in ("find_patron_by_email", "find_patron_by_name_zip", "renew_loans", "pay_fine", "set_home_branch"):
        assert coverage[used]["cases"] > 0, (used, coverage[used])
    with open_kit(Path(first["kit"]["archive"])) as kit:
        assert verify_kit(kit)["verified"]
        cases = kit.cases("train") + kit.cases("eval")
        assert all(verdict in ("fail", "n/a", "changed") for case in cases for name, verdict in case.probes.items())
        loaded = kit.world()
        assert loaded.world.state.table("loans").owner == "card_number"  # type: ignore[union-attr]
        paid = [c for c in cases if c.task.turns and c.task.turns[0].confirms
                and c.task.turns[0].confirms.tool == "pay_fine"]
        assert paid and all("$" in c.task.turns[0].assistant for c in paid)  # the question states the amount
        rows = [json.loads(line) for line in kit.path("sft.jsonl").read_text().splitlines()]
        from world_format.procedure_check import report_of

        runtime = loaded.runtime()
        try:
            assert report_of(runtime, rows)["violating_rows"] == 0  # no confirmation omits a detail
        finally:
            runtime.close()


# ----------------------------------------------------------------- item 9: a safe arithmetic built-in


@pytest.mark.parametrize(("expression", "result"), [
    ("1193.51 - 25.5 * 2", "1142.51"), ("0.1 + 0.2", "0.3"), ("(3 + 4) * -2", "-14"), ("10 / 4", "2.5"),
    ("1 / 3", "0.3333333333333333333333333333333333")])
def test_calculate_evaluates_arithmetic_exactly(expression: str, result: str) -> None:
    from world_format.arithmetic import calculate

    assert calculate(expression) == result


def test_the_calculate_builtin_answers_a_call_and_runs_no_code(tmp_path: Path) -> None:
    world = small_world()
    world["tools"].append({"name": "calculate", "description": "Evaluate an arithmetic expression.", "effect": "none",
                           "builtin": "calculate", "result": {"shape": "recorded"},
                           "parameters": {"type": "object", "additionalProperties": False, "required": ["expression"],
                                          "properties": {"expression": {"type": "string", "maxLength": 500,
                                                                        "description": "e.g. 12.5 * 3"}}}})
    runtime = _load(tmp_path, world).runtime()
    try:
        with runtime.episode() as episode:
            assert episode.call("calculate", {"expression": "19.99 * 3 - 5"}).observation == {"result": "54.97"}
            for bad in ("__import__('os').system('true')", "2 ** 8", "1 / 0", "(1 + 2", ""):
                event = episode.call("calculate", {"expression": bad})
                assert event.error and event.observation["error"].startswith("cannot calculate: "), bad
            assert not episode.changes()
    finally:
        runtime.close()
    world["tools"][-1]["parameters"]["required"] = []
    with pytest.raises(WorldFormatError, match="calculate builtin takes exactly one required string parameter"):
        _load(tmp_path / "again", world)
