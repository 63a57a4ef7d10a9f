"""The world format: loading both forms, packing, hashing, tool execution and VCode."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import jsonschema
import pytest
from conftest import EXAMPLES, ROOT, write_world

from world_format.chain import run_chain
from world_format.loader import load_world
from world_format.models import Task
from world_format.pack import write_package
from world_format.runtime import full_state_hash
from world_format.schema import schema_text
from world_format.vcode import evaluate, normalize_text


def test_single_file_and_packaged_forms_have_the_same_identity(small_world_file: Path, tmp_path: Path) -> None:
    single = load_world(small_world_file)
    packaged = load_world(write_package(single, tmp_path / "pkg"))
    assert packaged.form == "package" and single.form == "file"
    assert packaged.sha256 == single.sha256
    assert packaged.seed_state_hash == single.seed_state_hash


def test_packing_twice_gives_byte_identical_files(small_world_file: Path, tmp_path: Path) -> None:
    loaded = load_world(small_world_file)
    first, second = write_package(loaded, tmp_path / "a"), write_package(loaded, tmp_path / "b")
    for name in ("world.json", "seed.sqlite", "manifest.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_state_hash_ignores_row_order_and_integral_floats(small_world_doc: dict, tmp_path: Path) -> None:
    base = load_world(write_world(tmp_path / "a", small_world_doc))
    small_world_doc["state"]["rows"]["orders"].reverse()
    for row in small_world_doc["state"]["rows"]["orders"]:
        row[3] = float(row[3])
    shuffled = load_world(write_world(tmp_path / "b", small_world_doc))
    assert shuffled.seed_state_hash == base.seed_state_hash


def test_state_hash_changes_when_a_value_changes(small_world_doc: dict, tmp_path: Path) -> None:
    base = load_world(write_world(tmp_path / "a", small_world_doc))
    small_world_doc["state"]["rows"]["orders"][0][2] = "shipped"
    changed = load_world(write_world(tmp_path / "b", small_world_doc))
    assert changed.seed_state_hash != base.seed_state_hash


def test_incremental_state_hash_equals_a_full_rescan(small_world_file: Path) -> None:
    runtime = load_world(small_world_file).runtime()
    with runtime.episode() as episode:
        episode.call("cancel_order", {"order_id": 100})
        episode.call("set_tier", {"customer_id": 2, "tier": "gold"})
        assert episode.state_hash() == full_state_hash(runtime.conn, runtime.world.state.tables)
        assert episode.state_hash() != runtime.seed_hash
    with runtime.episode() as episode:
        assert episode.state_hash() == runtime.seed_hash


def test_episodes_are_isolated_and_leave_the_seed_unchanged(small_world_file: Path) -> None:
    runtime = load_world(small_world_file).runtime()
    with runtime.episode() as episode:
        assert not episode.call("cancel_order", {"order_id": 100}).error
    with runtime.episode() as episode:
        assert episode.call("get_order", {"order_id": 100}).observation["status"] == "pending"


@pytest.mark.parametrize("arguments", [
    {"order_id": "100 OR 1=1"}, {"order_id": 10**30}, {}, {"order_id": 100, "extra": 1}, [100],
    {"order_id": 1.5}, {"order_id": None}, {"order_id": "'; DROP TABLE orders; --"},
])
def test_bad_model_arguments_become_error_observations(small_world_file: Path, arguments: object) -> None:
    runtime = load_world(small_world_file).runtime()
    with runtime.episode() as episode:
        event = episode.call("get_order", arguments)
        assert event.error and "error" in event.observation
        assert episode.call("get_order", {"order_id": 100}).observation["id"] == 100


def test_a_failed_precondition_returns_its_declared_message_and_changes_nothing(small_world_file: Path) -> None:
    runtime = load_world(small_world_file).runtime()
    with runtime.episode() as episode:
        event = episode.call("cancel_order", {"order_id": 101})
        assert event.observation == {"error": "only pending orders can be cancelled"}
        assert episode.changes() == []


def test_read_tools_cannot_write_even_through_the_executor(small_world_doc: dict, tmp_path: Path) -> None:
    small_world_doc["tools"][0]["statements"] = ["UPDATE orders SET status = 'x' WHERE id = :order_id RETURNING id"]
    with pytest.raises(Exception, match="may not perform"):
        load_world(write_world(tmp_path, small_world_doc))


def test_a_runaway_query_is_stopped_by_the_time_budget(small_world_doc: dict, tmp_path: Path) -> None:
    small_world_doc["tools"][0]["statements"] = [
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT MAX(n) + :order_id AS id FROM r"]
    runtime = load_world(write_world(tmp_path, small_world_doc), validate=False).runtime(timeout_s=0.2)
    with runtime.episode() as episode:
        event = episode.call("get_order", {"order_id": 1})
    assert event.error and "too long" in event.observation["error"]


def test_authored_task_reference_passes_and_null_trace_fails(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    runtime, task = loaded.runtime(), loaded.world.tasks[0]
    with runtime.episode() as episode:
        assert run_chain(episode, task.reference).clean
        assert evaluate(task.vcode, episode, task.answer, task.answer).outcome == "pass"
    with runtime.episode() as episode:
        assert evaluate(task.vcode, episode, None, task.answer).outcome == "fail"


def test_a_verifier_that_cannot_run_is_an_error_never_a_pass(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    runtime = loaded.runtime()
    task = Task.model_validate({
        "instruction": "x", "anchor": {"table": "orders", "key": 100},
        "reference": [{"tool": "get_order", "arguments": {"order_id": 100}}],
        "vcode": {"checks": [{"kind": "sql", "query": "SELECT nope FROM orders", "expect": [[1]]}]}})
    with runtime.episode() as episode:
        assert evaluate(task.vcode, episode, "answer").outcome == "error"


def _credit_task() -> Task:
    """Order 100's look-up, with a capture and five checks: met, unmet, unrunnable, met, and one on the capture."""
    return Task.model_validate({
        "instruction": "x", "anchor": {"table": "orders", "key": 100},
        "reference": [{"tool": "get_order", "arguments": {"order_id": 100}}],
        "vcode": {"captures": [{"name": "listed", "tool": "list_orders", "pointer": "/0/id"}], "checks": [
            {"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": 100}},
            {"kind": "answer", "mode": "contains", "value": "pending"},
            {"kind": "sql", "query": "SELECT nope FROM orders", "expect": [[1]]},
            {"kind": "tool_not_called", "tool": "cancel_order"},
            {"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": {"$ref": "capture.listed"}}}]}})


@pytest.mark.parametrize(("listed", "answer", "outcome", "passed", "credit"), [
    # list_orders never called: the capture fails first; the two checks on order 100 still count
    (False, "It is pending.", "fail", (), round(3 / 6, 4)),
    # the capture holds 100 (customer 1's first order): only the unrunnable query is left
    (True, "It is pending.", "error", ("tool_called", "answer"), round(5 / 6, 4)),
    (True, "It shipped.", "fail", ("tool_called",), round(4 / 6, 4)),
])
def test_credit_is_the_share_of_checks_met_each_on_its_own_and_leaves_the_verdict_alone(
        small_world_file: Path, listed: bool, answer: str, outcome: str, passed: tuple[str, ...],
        credit: float) -> None:
    runtime, task = load_world(small_world_file).runtime(), _credit_task()
    with runtime.episode() as episode:
        if listed:
            assert episode.call("list_orders", {"customer_id": 1}).observation[0]["id"] == 100
        episode.call("get_order", {"order_id": 100})
        plain = evaluate(task.vcode, episode, answer)
        scored = evaluate(task.vcode, episode, answer, credit=True)
    assert (plain.outcome, plain.reason, plain.checks, plain.credit) == (scored.outcome, scored.reason,
                                                                          scored.checks, None)
    assert (scored.outcome, scored.checks, scored.credit) == (outcome, passed, credit)
    assert "credit" not in plain.to_json() and scored.to_json()["credit"] == credit


@pytest.mark.parametrize(("mode", "value", "answer", "expected"), [
    ("number", 3, "Customer 12 has 3 orders.", "pass"),
    ("number", 3, "3 4 5 6", "fail"),
    ("contains", "only pending orders can be cancelled", "I can't: Only pending orders can be cancelled.", "pass"),
    ("contains", "gold", "The tier is goldish", "fail"),
    ("normalized", "Order shipped", "  order, SHIPPED ", "pass"),
    ("regex", r"^\d+$", "42", "pass"),
    ("json_field", 7, '{"count": 7}', "pass"),
    ("exact", "yes", "no", "fail"),
])
def test_answer_checks(small_world_file: Path, mode: str, value: object, answer: str, expected: str) -> None:
    runtime = load_world(small_world_file).runtime()
    check = {"kind": "answer", "mode": mode, "value": value}
    if mode == "json_field":
        check["pointer"] = "/count"
    task = Task.model_validate({"instruction": "x", "anchor": {"table": "orders", "key": 100},
                                "reference": [{"tool": "get_order", "arguments": {"order_id": 100}}],
                                "vcode": {"checks": [check]}})
    with runtime.episode() as episode:
        episode.call("list_orders", {"customer_id": 12})
        # the right answer names customer 12, so an answer may too (a number the agent passed to a tool excuses nothing)
        assert evaluate(task.vcode, episode, answer, "Customer 12 has 3 orders.").outcome == expected


def test_normalize_text_keeps_emails_and_decimals() -> None:
    assert normalize_text("Mail ANA@x.com, total 12.50!") == "mail ana@x.com total 12.50"


def test_committed_schema_matches_the_models() -> None:
    committed = (ROOT / "spec" / "world.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), "run: python -m world_format.schema > spec/world.schema.json"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates_against_the_schema_and_loads(example: Path) -> None:
    schema = json.loads((ROOT / "spec" / "world.schema.json").read_text())
    jsonschema.validate(json.loads((example / "world.json").read_text()), schema)
    loaded = load_world(example / "world.json")
    assert len(loaded.world.tools) >= 6 and len(loaded.world.tasks) >= 2


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 2


def test_seed_database_is_created_strict(small_world_file: Path) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(load_world(small_world_file).seed)
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'orders'").fetchone()[0]
    assert sql.endswith("STRICT")
