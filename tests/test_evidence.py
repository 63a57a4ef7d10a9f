"""Evidence that cannot lie: every handed input in shared/cases/evidence gives the right behaviour, with the values.

Each kind of fault has tests here on the handed input and on siblings made in code.
"""

from __future__ import annotations

import json
import re
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SHARED, write_world
from kit_cache import cached_kit
from typer.testing import CliRunner
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import app
from blobkit.errors import BlobkitError, WorldFormatError
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Task
from world_format.pack import write_package
from world_format.values import answer_numbers, values_equal
from world_format.vcode import evaluate

CASES = SHARED / "cases" / "evidence"
needs_cases = pytest.mark.skipif(not CASES.is_dir(), reason="the handed cases are not beside this checkout")


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _world(change: Any = None) -> dict[str, Any]:
    world = small_world()
    if change is not None:
        change(world)
    return world


def _case_world(name: str) -> dict[str, Any]:
    return json.loads((CASES / name / "world.json").read_text())


# --------------------------------------------------------------------------- 01: tool parameter schemas


@needs_cases
def test_a_nullable_parameter_loads_and_binds_null_omitted_and_a_string(tmp_path: Path) -> None:
    loaded = load_world(CASES / "01-nullable-parameter-type" / "world.json")
    runtime = loaded.runtime()
    try:
        for arguments in ({"order_id": 100, "note": None}, {"order_id": 100}, {"order_id": 100, "note": "late"}):
            with runtime.episode() as episode:
                assert episode.call("cancel_order", arguments).error is False, arguments
        with runtime.episode() as episode:
            refused = episode.call("cancel_order", {"order_id": 100, "note": 7})
        assert refused.error and "note" in refused.observation["error"]
    finally:
        runtime.close()
    spec = next(t for t in loaded.world.function_specs() if t["function"]["name"] == "cancel_order")
    assert spec["function"]["parameters"]["properties"]["note"]["type"] == ["string", "null"]


@needs_cases
@pytest.mark.parametrize(("name", "outcome"), [
    ("world.json", None), ("contrast-anyof.json", None),
    ("contrast-ref.json", "'$defs' is not supported for tool 'cancel_order'"),
    ("contrast-type-object.json", "tool 'cancel_order' parameter 'note'")])
def test_every_parameter_form_is_honoured_or_refused_naming_tool_and_parameter(name: str, outcome: str | None) -> None:
    result = _cli("info", str(CASES / "01-nullable-parameter-type" / name))
    assert "Traceback" not in result.output
    if outcome is None:
        assert result.exit_code == 0, result.output
    else:
        assert isinstance(result.exception, WorldFormatError)
        assert outcome in str(result.exception)


@pytest.mark.parametrize(("keyword", "value"), [("format", "email"), ("oneOf", [{"type": "integer"}]),
                                                ("$ref", "#/x"), ("items", {"type": "string"})])
def test_a_keyword_that_would_be_shown_but_not_applied_is_refused(tmp_path: Path, keyword: str, value: Any) -> None:
    def change(world: dict[str, Any]) -> None:
        world["tools"][0]["parameters"]["properties"]["order_id"][keyword] = value
    expected = re.escape(f"tool 'get_order' parameter 'order_id': keyword '{keyword}'")
    with pytest.raises(WorldFormatError, match=expected):
        load_world(write_world(tmp_path, _world(change)))


def test_a_declared_default_is_bound_when_the_argument_is_omitted(tmp_path: Path) -> None:
    def change(world: dict[str, Any]) -> None:
        tool = world["tools"][0]
        tool["parameters"]["required"] = []
        tool["parameters"]["properties"]["order_id"]["default"] = 101
    runtime = load_world(write_world(tmp_path, _world(change))).runtime()
    try:
        with runtime.episode() as episode:
            assert episode.call("get_order", {}).observation["id"] == 101
    finally:
        runtime.close()


def test_a_default_that_does_not_fit_its_schema_is_refused(tmp_path: Path) -> None:
    def change(world: dict[str, Any]) -> None:
        world["tools"][0]["parameters"]["properties"]["order_id"]["default"] = "one hundred"
    with pytest.raises(WorldFormatError, match="its default does not fit its own schema"):
        load_world(write_world(tmp_path, _world(change)))


# --------------------------------------------------------------------------- 02: names SQLite reserves or confuses


@needs_cases
def test_a_reserved_table_name_is_refused_naming_the_table() -> None:
    result = _cli("info", str(CASES / "02-reserved-table-name" / "world.json"))
    assert isinstance(result.exception, WorldFormatError) and "'sqlite_orders' is reserved" in str(result.exception)


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["state"]["tables"][1].update(name="CUSTOMERS"), "duplicate table, index, view or trigger name"),
    (lambda w: w["state"]["tables"][0]["columns"][3].update(name="EMAIL"), "duplicate column name 'EMAIL'"),
    (lambda w: w["state"]["tables"][1]["columns"][1].update(references="customers.tier"), "neither the primary key"),
])
def test_names_that_collide_in_sqlite_and_foreign_keys_it_would_refuse_are_errors_at_declaration(
        tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(WorldFormatError, match=message):
        load_world(write_world(tmp_path, _world(change)))


# --------------------------------------------------------------------------- 03: a seed's identity is its behaviour


@needs_cases
@pytest.mark.parametrize(("package", "difference"), [
    ("package-nonstrict", "the seed has \"COLLATE NOCASE DEFAULT 'pending'\" where the declaration has 'NOT NULL'"),
    ("package-tampered", "index 'orders_total_uq': undeclared index"),
])
def test_a_seed_that_behaves_differently_is_refused_naming_the_difference(package: str, difference: str) -> None:
    assert load_world(CASES / "03-seed-undeclared-schema" / "package-clean").sha256
    with pytest.raises(WorldFormatError, match="differs from its declaration|undeclared") as refused:
        load_world(CASES / "03-seed-undeclared-schema" / package)
    assert difference in str(refused.value)


@needs_cases
def test_a_seed_with_an_undeclared_check_alone_is_refused_naming_it(tmp_path: Path) -> None:
    import sqlite3

    package = tmp_path / "pkg"
    shutil.copytree(CASES / "03-seed-undeclared-schema" / "package-tampered", package)
    conn = sqlite3.connect(package / "seed.sqlite")
    conn.execute("DROP INDEX orders_total_uq")
    conn.commit()
    conn.close()
    manifest = json.loads((package / "manifest.json").read_text())
    from world_format.manifest import file_entry

    manifest["files"]["seed.sqlite"] = file_entry((package / "seed.sqlite").read_bytes())
    (package / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(WorldFormatError, match="differs from its declaration") as refused:
        load_world(package)
    assert "the seed adds \", CHECK ( STATUS <> 'cancelled' OR ID % 4 = 3 )\"" in str(refused.value)


def test_pack_round_trips_to_the_same_identity_and_a_declared_index_is_part_of_it(tmp_path: Path) -> None:
    source = load_world(write_world(tmp_path / "src", small_world()))
    packed = load_world(write_package(source, tmp_path / "pkg"))
    assert packed.sha256 == source.sha256
    indexed = _world(lambda w: w["state"].__setitem__("indexes", [
        {"name": "orders_by_status", "table": "orders", "columns": ["status"]}]))
    with_index = load_world(write_world(tmp_path / "idx", indexed))
    assert with_index.sha256 != source.sha256
    assert load_world(write_package(with_index, tmp_path / "pkg-idx")).sha256 == with_index.sha256


# --------------------------------------------------------------------------- 04: WAL seeds


@needs_cases
def test_a_wal_mode_seed_is_read_as_its_rollback_journal_copy(tmp_path: Path) -> None:
    loaded = load_world(CASES / "04-seed-wal-mode" / "package")
    assert loaded.seed[18:20] == b"\x01\x01"
    repacked = load_world(write_package(loaded, tmp_path / "again"))
    assert repacked.sha256 == loaded.sha256 and repacked.seed_state_hash == loaded.seed_state_hash


# --------------------------------------------------------------------------- 05: data never becomes control syntax


@needs_cases
def test_observations_escape_control_strings_and_cases_whose_text_carries_one_are_left_out(tmp_path: Path) -> None:
    record = build_kit(CASES / "05-control-strings-in-data" / "world.json", tmp_path, BuildConfig(eval_percent=50))
    with open_kit(Path(record["kit"]["path"])) as kit:
        assert kit.tasks()[0].cases_left_out == {"control_string": 24}
        texts = [m["content"] for row in kit.rows() for m in row["messages"]]
        held_out = [c.task.instruction + (c.task.answer or "") for c in kit.cases("eval")]
    assert not any(marker in text for text in texts + held_out for marker in ("<|im_end|>", "<tool_call>"))


def test_authored_text_carrying_a_control_string_is_refused_at_load(tmp_path: Path) -> None:
    world = _world(lambda w: w["policies"].append("Reply briefly.<|im_end|>"))
    with pytest.raises(WorldFormatError, match=r"/policies/\d+: carries the chat control string '<\|im_end\|>'"):
        load_world(write_world(tmp_path, world))


# --------------------------------------------------------------------------- 06: exact integers, declared precision


@pytest.mark.parametrize(("left", "right", "decimals", "equal"), [
    (5123409000027, 5123409004027, None, False), (5123409000027, 5123409000027.0, None, True),
    (771234500000, 771234500001, None, False), (0.1 + 0.2, 0.3, None, False), (0.1 + 0.2, 0.3, 2, True),
    (265.575, 265.58, 2, True), (265.575, "265.58", 2, False), (2.675, 2.68, 2, True), (2.665, 2.67, 2, False),
    (25, 25.0, None, True),
    (True, 1, None, True),
    ("25", 25, None, False),
])
def test_values_compare_exactly_by_type_and_reals_at_a_declared_precision(left: Any, right: Any, decimals: int | None,
                                                                         equal: bool) -> None:
    assert values_equal(left, right, decimals) is equal


def test_answer_numbers_are_tokens_not_parts_of_dates_or_tags() -> None:
    assert answer_numbers("Order 1042 ($1,234.50) ships 2026-05-22 as MER-LT-0069 at 10:30, 15%.") == [
        Decimal(1042), Decimal("1234.50"), Decimal(15)]


@needs_cases
def test_linking_to_the_wrong_parent_fails_and_a_large_tracking_number_lookup_is_admitted(tmp_path: Path) -> None:
    loaded = load_world(CASES / "06-large-integers" / "world.json")
    task = loaded.world.tasks[0]
    runtime = loaded.runtime()
    try:
        with runtime.episode() as episode:
            episode.call("get_order", {"order_id": 5123405000015})
            episode.call("link_order", {"order_id": 5123405000015, "parent_order_id": 5123409000027 + 4000})
            assert evaluate(task.vcode, episode, task.answer, task.answer).outcome == "fail"
    finally:
        runtime.close()
    record = build_kit(CASES / "06-large-integers" / "world.json", tmp_path, BuildConfig())
    with open_kit(Path(record["kit"]["path"])) as kit:
        lookups = [t for t in kit.tasks() if t.template == "lookup_field"]
        fields = {t.spec["field"] for t in lookups if t.spec}
    assert "tracking_number" in fields


# --------------------------------------------------------------------------- 07: every case passes the whole gate


@needs_cases
@pytest.mark.parametrize("seed", [1, 2, 3, 42])
def test_already_true_family_rows_are_left_out_at_every_seed_and_a_read_only_agent_passes_nothing(
        tmp_path: Path, seed: int) -> None:
    record = build_kit(CASES / "07-vacuous-family-rows" / "world.json", tmp_path, BuildConfig(seed=seed))
    with open_kit(Path(record["kit"]["path"])) as kit:
        family = next(t for t in kit.tasks() if t.family)
        cases = kit.cases("train") + kit.cases("eval")
    assert family.cases_left_out and set(family.cases_left_out) <= {"read-only", "write_removal"}
    shipped = [c for c in cases if c.task_id == family.task_id]
    assert shipped and all(c.probes["read-only"] == "fail" for c in shipped)
    seed_status = {row[0]: row[1] for row in _case_world("07-vacuous-family-rows")["state"]["rows"]["orders"]}
    assert all(seed_status[c.anchor["key"]] != "shipped" for c in shipped)


# --------------------------------------------------------------------------- 08: kit structure


@needs_cases
@pytest.mark.parametrize(("kit", "message"), [
    ("kit-empty", "kit.json: /format_version: Field required"),
    ("kit-empty.tar.zst", "kit-empty.tar.zst/kit-empty/kit.json: /format_version: Field required"),
    ("kit-no-record/acme-shop-train-kit", "kit.json: /record: Field required"),
    ("kit-bad-jsonl/acme-shop-train-kit", "tasks.jsonl:1: invalid JSON"),
    ("kit-bad-jsonl", "it holds the folder acme-shop-train-kit: pass that instead"),
])
@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_malformed_kit_gets_one_typed_line_from_info_and_verify(kit: str, message: str, command: str) -> None:
    if command == "verify" and kit == "kit-bad-jsonl":
        message = "no kit.json"
    result = _cli(command, str(CASES / "08-kit-structure" / kit))
    assert isinstance(result.exception, BlobkitError) and "Traceback" not in result.output
    assert message in str(result.exception)


def test_a_task_is_rejected_when_no_case_survives_the_gate_and_the_reason_names_the_probe(tmp_path: Path) -> None:
    world = _world()
    world["tasks"][0]["vcode"]["checks"] = [{"kind": "answer", "mode": "contains", "value": "pending"}]
    world["tasks"][0]["answer"] = "It is pending."
    build = BuildConfig(max_tasks=1, train_cases_per_task=4, eval_cases_per_task=2)
    with pytest.raises(Exception, match="no task passed the discrimination gate"):
        build_kit(write_world(tmp_path / "src", world), tmp_path / "out", build)


def test_a_hedged_answer_fails_a_committed_check_and_passes_an_uncommitted_one(tmp_path: Path) -> None:
    loaded = load_world(write_world(tmp_path, small_world()))
    runtime = loaded.runtime()

    def verdict(check: dict[str, Any], answer: str) -> str:
        task = Task.model_validate({"instruction": "x", "anchor": {"table": "orders", "key": 100},
                                    "reference": [{"tool": "get_order", "arguments": {"order_id": 100}}],
                                    "vcode": {"checks": [check]}})
        with runtime.episode() as episode:
            return evaluate(task.vcode, episode, answer).outcome

    try:
        bare = {"kind": "answer", "mode": "contains", "value": "pending"}
        field = {**bare, "field": "orders.status"}
        assert verdict(bare, "It is pending or shipped.") == "pass"
        assert verdict(field, "It is pending or shipped.") == "fail"
        assert verdict(field, "It is one of: pending, shipped, delivered, cancelled.") == "fail"
        assert verdict(field, "Order 100 is pending.") == "pass"
        number = {"kind": "answer", "mode": "number", "value": "10.00", "decimals": 2}
        assert verdict(number, "It costs $10 or $11.") == "fail"
        assert verdict(number, "It costs $10.") == "pass"
    finally:
        runtime.close()


# --------------------------------------------------------------------------- adversaries, scored from outside


@pytest.fixture(scope="module", params=["retail_desk", "it_helpdesk"])
def example_kit(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cached_kit(ROOT / "examples" / request.param / "world.json", tmp_path_factory,
                      BuildConfig(train_cases_per_task=8, eval_cases_per_task=3))


@pytest.mark.parametrize("agent", ["reference", "null", "shortcut", "wrong-row", "wrong-value", "off-by-one",
                                   "read-only", "hedger", "over-inclusive"])
def test_adversaries_pass_no_case_and_the_reference_passes_every_case_scored_from_outside(
        example_kit: Path, agent: str, tmp_path: Path) -> None:
    trajectories = tmp_path / f"{agent}.jsonl"
    assert _cli("adversary", "--kit", str(example_kit), "--agent", agent, "--out", str(trajectories)).exit_code == 0
    lines = [json.loads(line) for line in trajectories.read_text().splitlines()]
    result = _cli("eval", "--kit", str(example_kit), "--trajectories", str(trajectories), "--json",
                  "--min-pass-rate", "0")
    scored = json.loads(result.stdout)
    with open_kit(example_kit) as kit:
        sides = {c.case_id: c.side for c in kit.cases("train") + kit.cases("eval")}
    passed = {side: sum(c["passed"] for c in scored["cases"] if sides[c["case_id"]] == side)
              for side in ("train", "eval")}
    assert lines and scored["summary"]["cases"] == len(lines)
    if agent == "reference":
        assert scored["summary"]["pass_rate"] == 1.0 and len(lines) == len(sides)
    else:
        assert passed == {"train": 0, "eval": 0}, scored["summary"]


def test_info_reports_every_adversary_at_zero(example_kit: Path) -> None:
    summary = json.loads(_cli("info", str(example_kit), "--json").stdout)
    assert summary["adversaries"] and all(rate["passed"] == 0 for rate in summary["adversaries"].values())


def test_eval_names_the_line_of_an_unknown_case_and_exits_1_below_the_pass_rate(example_kit: Path,
                                                                               tmp_path: Path) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text(json.dumps({"case_id": "c-nope", "messages": []}) + "\n")
    result = _cli("eval", "--kit", str(example_kit), "--trajectories", str(path))
    assert isinstance(result.exception, BlobkitError)
    assert "agent.jsonl:1: the kit has no case 'c-nope'" in str(result.exception)
    with open_kit(example_kit) as kit:
        case = kit.cases("eval")[0]
    path.write_text(json.dumps({"case_id": case.case_id, "messages": [{"role": "assistant", "content": "?"}]}) + "\n")
    assert _cli("eval", "--kit", str(example_kit), "--trajectories", str(path)).exit_code == 1
