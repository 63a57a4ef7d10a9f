"""Task families: an authored task filled in from every row of a query over the starting state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_world
from worlds import small_world

import world_format.family
from blobkit.builder import BuildConfig, build_kit
from blobkit.builder.family import seeded_order
from blobkit.errors import WorldFormatError
from blobkit.verify import verify_kit
from world_format.family import family_sample, fill
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Task

CONFIG = BuildConfig(train_cases_per_task=5, eval_cases_per_task=2)

ALL_ORDERS = ("SELECT o.id AS order_id, c.email, o.total, printf('%.2f', o.total) AS total_text "
              "FROM orders o JOIN customers c ON c.id = o.customer_id")


def cancel_family(query: str = ALL_ORDERS) -> dict[str, Any]:
    """Cancel an order after verifying the customer by email: one case per query row."""
    return {
        "family": {"query": query},
        "instruction": "Hi, I'm {{email}}. Please cancel order {{order_id}} (it was ${{total_text}}).",
        "anchor": {"table": "orders", "key": "{{order_id}}"},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                      {"tool": "cancel_order", "arguments": {"order_id": "{{order_id}}"}}],
        "answer": "Order {{order_id}} is now cancelled.",
        "vcode": {"checks": [
            {"kind": "sql", "query": "SELECT status FROM orders WHERE id = :id", "params": {"id": "{{order_id}}"},
             "expect": [["cancelled"]]},
            {"kind": "tool_called", "tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
            {"kind": "unchanged_except", "rows": [{"table": "orders", "key": "{{order_id}}"}]}]},
    }


def family_world(task: dict[str, Any]) -> dict[str, Any]:
    world = small_world()
    world["tasks"] = [task]
    return world


def _tasks(kit: dict[str, Any]) -> list[dict[str, Any]]:
    lines = (Path(kit["kit"]["path"]) / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_a_whole_slot_keeps_the_column_type_and_an_inline_slot_becomes_text() -> None:
    template = Task.model_validate(cancel_family())
    task = fill(template, {"order_id": 104, "email": "eli4@example.com", "total": 23.0, "total_text": "23.00"})
    assert task.anchor.key == 104 and isinstance(task.anchor.key, int)
    assert task.reference[1].arguments == {"order_id": 104}
    assert task.instruction == "Hi, I'm eli4@example.com. Please cancel order 104 (it was $23.00)."
    assert task.answer == "Order 104 is now cancelled."
    assert task.family is None


def test_a_family_builds_verified_cases_on_both_sides_and_counts_the_rows_it_left_out(tmp_path: Path) -> None:
    kit = build_kit(write_world(tmp_path / "src", family_world(cancel_family())), tmp_path / "out", CONFIG)
    family = next(t for t in _tasks(kit) if t["source"] == "authored")
    assert family["rejected_because"] == []
    assert family["cases"]["train"] == 5 and family["cases"]["eval"] >= 1  # 15 pending orders, about 20% eval
    # A quarter of the orders are pending; cancelling any other fails its own verifier and is left out.
    assert family["family"]["left_out"]["reference_fails"] > 0
    assert family["family"]["rows"] == 60
    assert family["prototype"]["anchor"]["key"] != family["distractor"]["anchor"]["key"]
    cases = [json.loads(line) for name in ("train_cases.jsonl", "eval_cases.jsonl")
             for line in (Path(kit["kit"]["path"]) / name).read_text(encoding="utf-8").splitlines()]
    ours = [case for case in cases if case["task_id"] == family["task_id"]]
    assert len({case["anchor"]["key"] for case in ours}) == len(ours) == 5 + family["cases"]["eval"]
    assert all("{{" not in json.dumps(case["task"]) for case in ours)
    with open_kit(Path(kit["kit"]["archive"])) as opened:
        assert verify_kit(opened)["mismatches"] == []


def test_the_cases_picked_do_not_depend_on_the_order_the_query_returns_rows() -> None:
    rows = [{"order_id": 100 + i, "email": f"c{i}@example.com"} for i in range(50)]
    picked, total = seeded_order(rows, 42, "t-abc", keep=50)
    assert total == 50 and sorted(r["order_id"] for r in picked) == [r["order_id"] for r in rows]
    assert seeded_order(list(reversed(rows)), 42, "t-abc", keep=50)[0] == picked
    assert picked != rows and seeded_order(rows, 7, "t-abc", keep=50)[0] != picked
    first_ten, _ = seeded_order(iter(rows), 42, "t-abc", keep=10)
    assert first_ten == picked[:10]


def test_a_family_query_is_read_up_to_its_sample_size_and_the_rest_left_unread(tmp_path: Path) -> None:
    loaded = load_world(write_world(tmp_path / "src", family_world(cancel_family())))
    runtime = loaded.runtime()
    try:
        task = loaded.world.tasks[0]
        whole = family_sample(runtime, task, limit=60)
        assert len(whole.rows) == 60 and not whole.more  # the query returns exactly 60 rows
        cut = family_sample(runtime, task, limit=25)
        assert cut.more and cut.rows == whole.rows[:25]  # the first rows, in the query's order
        assert [row["order_id"] for row in cut.dicts()] == [row[0] for row in whole.rows[:25]]
    finally:
        runtime.close()


def test_a_build_ranks_only_the_sample_of_a_large_family_and_says_it_was_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_world(tmp_path / "src", family_world(cancel_family()))
    full = build_kit(path, tmp_path / "full", CONFIG)
    assert "sampled" not in next(t for t in _tasks(full) if t["source"] == "authored")["family"]
    monkeypatch.setattr(world_format.family, "FAMILY_SAMPLE_ROWS", 30)
    sampled = build_kit(path, tmp_path / "sampled", CONFIG)
    entry = next(t for t in _tasks(sampled) if t["source"] == "authored")
    family = entry["family"]
    assert family["rows"] == 30 and family["sampled"] is True
    first_thirty = {row["order_id"] for row in _query_rows(path, ALL_ORDERS + " LIMIT 30")}
    cases = [json.loads(line) for name in ("train_cases.jsonl", "eval_cases.jsonl")
             for line in (Path(sampled["kit"]["path"]) / name).read_text(encoding="utf-8").splitlines()]
    keys = {case["anchor"]["key"] for case in cases if case["task_id"] == entry["task_id"]}
    assert keys and keys <= first_thirty


def _query_rows(path: Path, query: str) -> list[dict[str, Any]]:
    loaded = load_world(path)
    runtime = loaded.runtime()
    try:
        with runtime.guard.world("read") as conn:
            cursor = conn.execute(query)
            columns = [c[0] for c in cursor.description]
            return [dict(zip(columns, row, strict=True)) for row in cursor]
    finally:
        runtime.close()


def test_building_a_family_world_twice_gives_the_same_archive(tmp_path: Path) -> None:
    path = write_world(tmp_path / "src", family_world(cancel_family()))
    first, second = (build_kit(path, tmp_path / name, CONFIG) for name in ("a", "b"))
    assert first["kit"]["sha256"] == second["kit"]["sha256"]


@pytest.mark.parametrize(("query", "message"), [
    (ALL_ORDERS + " WHERE o.id = :order_id", "without parameters"),
    ("UPDATE orders SET status = 'cancelled' RETURNING id AS order_id", "family/query"),
    (ALL_ORDERS + " WHERE o.id < 0", "returns no rows"),
    ("SELECT o.id AS order_id FROM orders o", "slot {{email}} is not a column"),
    ("SELECT 'abc' AS order_id, c.email, 1 AS total, '1' AS total_text FROM customers c", "is not of type 'integer'"),
])
def test_a_bad_family_is_refused_when_the_world_loads(tmp_path: Path, query: str, message: str) -> None:
    path = write_world(tmp_path / "src", family_world(cancel_family(query)))
    with pytest.raises(WorldFormatError, match="tasks/0") as error:
        load_world(path)
    assert message in str(error.value)


def test_a_family_without_slots_is_refused(tmp_path: Path) -> None:
    task = small_world()["tasks"][0] | {"family": {"query": ALL_ORDERS}}
    with pytest.raises(WorldFormatError, match="at least one"):
        load_world(write_world(tmp_path / "src", family_world(task)))


def test_the_retail_example_authors_its_workflows_as_families() -> None:
    from conftest import ROOT

    loaded = load_world(ROOT / "examples" / "retail_desk" / "world.json")
    assert sum(task.family is not None for task in loaded.world.tasks) == 3


def test_a_family_whose_rows_all_fail_their_reference_is_rejected_with_a_reason(tmp_path: Path) -> None:
    shipped = ALL_ORDERS + " WHERE o.status = 'shipped'"  # cancel_order refuses every shipped order
    world = family_world(cancel_family(shipped))
    world["tasks"].append(small_world()["tasks"][0])
    kit = build_kit(write_world(tmp_path / "src", world), tmp_path / "out", CONFIG)
    rejected = [json.loads(line) for line in
                (Path(kit["kit"]["path"]) / "rejected.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["rejected_because"] for r in rejected if r["source"] == "authored"] == [
        ["family: no row of the query gives a case whose reference chain passes"]]
    assert rejected[0]["family"]["left_out"]["reference_fails"] == 15
