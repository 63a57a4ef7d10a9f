"""Tool coverage: every declared tool is exercised by the kit's cases, or the build says why not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, write_world
from kit_cache import cached_build
from typer.testing import CliRunner
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import app

SMALL = BuildConfig(train_cases_per_task=4, eval_cases_per_task=2)


def _coverage(world: dict[str, Any], tmp_path: Path) -> dict[str, dict[str, Any]]:
    record = build_kit(write_world(tmp_path / "w", world), tmp_path / "out", SMALL)
    coverage: dict[str, dict[str, Any]] = record["tool_coverage"]
    return coverage


def test_every_tool_of_the_retail_kit_is_counted_and_each_one_never_called_has_a_reason(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    record = cached_build(ROOT / "examples" / "retail_desk" / "world.json", tmp_path_factory, SMALL)
    coverage = record["tool_coverage"]
    world = json.loads((ROOT / "examples" / "retail_desk" / "world.json").read_text())
    assert sorted(coverage) == sorted(tool["name"] for tool in world["tools"])
    with_rows = {name for name, entry in coverage.items() if entry["rows"]}
    assert {"get_order", "cancel_order", "issue_refund", "find_customer_by_email"} <= with_rows
    assert coverage["find_product_by_sku"] == {  # minting finds products by SKU (their ids are internal)
        "cases": 0, "rows": 0, "reason": "the task cap cut it: the tasks that would call it are tasks 15 (lookup_field "
        "on products), 21 (lookup_field on products), 22 (lookup_field on products), 23 (lookup_field on products), "
        "past --max-tasks 12; raise --max-tasks to 23 to select them all"}
    assert coverage["get_customer"]["reason"] == (
        "minted chains reach the row with the identification (find_customer_by_email), whose observation already "
        "holds what this tool returns, so they do not call it")
    assert all(("reason" in entry) == (entry["cases"] == 0) for entry in coverage.values())


def test_a_pure_tool_no_task_calls_is_reported_as_such(tmp_path: Path) -> None:
    world = small_world()
    world["tools"].append({"name": "hand_off", "description": "Hand over to a human.", "effect": "none",
                           "parameters": {"type": "object", "additionalProperties": False, "properties": {}},
                           "result": {"shape": "recorded"}})
    assert _coverage(world, tmp_path)["hand_off"] == {
        "cases": 0, "rows": 0, "reason": "a pure tool: minting never calls one, and no authored task does"}


def test_a_write_whose_required_argument_minting_cannot_fill_names_that_argument(tmp_path: Path) -> None:
    world = small_world()
    set_tier = next(tool for tool in world["tools"] if tool["name"] == "set_tier")
    del set_tier["parameters"]["properties"]["tier"]["enum"]
    reason = _coverage(world, tmp_path)["set_tier"]["reason"]
    assert reason == ("required parameter 'tier' is not anchored to a column of the row or of the identified "
                      "customer, and has no enum or examples for minting to draw from")


def test_a_write_without_preconditions_is_reported_as_one_minting_cannot_refuse(tmp_path: Path) -> None:
    world = small_world()
    next(tool for tool in world["tools"] if tool["name"] == "set_tier")["preconditions"] = []
    assert _coverage(world, tmp_path)["set_tier"]["reason"].startswith("a write without preconditions")


def test_info_and_company_inspect_show_the_coverage(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    source = write_world(tmp_path / "w", small_world())
    record = cached_build(source, tmp_path_factory, SMALL)
    info = CliRunner().invoke(app, ["info", record["kit"]["path"]])
    assert info.exit_code == 0 and "  tools exercised: " in info.stdout
    inspected = CliRunner().invoke(app, ["company", "inspect", "--source", str(source), "--json"])
    coverage = json.loads(inspected.stdout)["admission"]["tool_coverage"]
    assert coverage["get_order"]["cases"] > 0


@pytest.mark.parametrize("world", ["it_helpdesk", "airline_desk"])
def test_the_other_examples_explain_every_tool_they_leave_out(world: str,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    record = cached_build(ROOT / "examples" / world / "world.json", tmp_path_factory, SMALL)
    missing = {name: entry["reason"] for name, entry in record["tool_coverage"].items() if not entry["cases"]}
    assert all(reason for reason in missing.values())
    if world == "airline_desk":
        assert "cancel_legs" not in missing and "transfer_to_human_agents" not in missing
