"""Real worlds: composite keys, structured arguments, JSON columns, pure tools, declared constraints, conversations.

Each construct is tried on a small world built in code (the shop of ``worlds.py`` plus order lines keyed by
(order, position)), with the right values and with the bad input a user would first try; the third example
world (examples/airline_desk) uses them all and is built, verified and attacked here.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, write_world
from kit_cache import cached_kit
from typer.testing import CliRunner
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import app
from blobkit.errors import WorldFormatError
from trainers.evaluation import replay_trajectory, run_episode
from trainers.formats import FORMATS
from trainers.turns import PerTurn
from world_format.chain import run_chain
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Task, confirmation_policy
from world_format.pack import write_package
from world_format.runtime import WorldRuntime
from world_format.vcode import evaluate

AIRLINE = ROOT / "examples" / "airline_desk" / "world.json"
Change = Callable[[dict[str, Any]], Any]


def _tool(name: str, description: str, effect: str, properties: dict[str, Any], statements: list[str],
          shape: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "effect": effect, "statements": statements,
            "parameters": {"type": "object", "additionalProperties": False, "required": list(properties),
                           "properties": properties}, "result": {"shape": shape}, **extra}


LINE_KEY = {"order_id": "order_lines.order_id", "position": "order_lines.position"}
INTEGER = {"type": "integer", "description": "An id"}


def line_world() -> dict[str, Any]:
    """The small shop with order lines: a composite key, a JSON column, a default, a CHECK and an index."""
    world = small_world()
    state = world["state"]
    state["tables"].append({"name": "order_lines", "columns": [
        {"name": "order_id", "type": "INTEGER", "primary_key": True, "references": "orders.id"},
        {"name": "position", "type": "INTEGER", "primary_key": True},
        {"name": "sku", "type": "TEXT", "not_null": True},
        {"name": "quantity", "type": "INTEGER", "not_null": True, "default": 1},
        {"name": "extras", "type": "TEXT", "not_null": True, "default": "{}", "json_data": True}],
        "checks": ["quantity > 0"]})
    state["indexes"] = [{"name": "lines_by_sku", "table": "order_lines", "columns": ["sku"]}]
    state["anchors"].append({"table": "order_lines", "label": "order line", "answer_fields": ["sku", "quantity"]})
    state["rows"]["order_lines"] = [[100 + i // 2, i % 2, f"SKU-{i}", 1 + i % 3, json.dumps({"gift": i % 4 == 0})]
                                    for i in range(40)]
    lines = {"type": "array", "description": "Lines and their new quantities",
             "items": {"type": "object", "additionalProperties": False, "required": ["position", "quantity"],
                       "properties": {"position": {"type": "integer"}, "quantity": {"type": "integer"}}}}
    world["tools"] += [
        _tool("get_line", "One line of an order.", "read", {"order_id": INTEGER, "position": INTEGER},
              ["SELECT order_id, position, sku, quantity, extras FROM order_lines "
               "WHERE order_id = :order_id AND position = :position"], "row", anchors=LINE_KEY),
        _tool("count_skus", "How many order lines carry these SKUs.", "read",
              {"skus": {"type": "array", "items": {"type": "string"}, "description": "SKUs"}},
              ["SELECT count(*) AS lines FROM order_lines WHERE sku IN (SELECT value FROM json_each(:skus))"], "row"),
        _tool("set_quantities", "Set the quantity of several lines of an order.", "write",
              {"order_id": INTEGER, "lines": lines},
              ["UPDATE order_lines SET quantity = (SELECT json_extract(j.value, '$.quantity') FROM json_each(:lines) j "
               "WHERE json_extract(j.value, '$.position') = order_lines.position) WHERE order_id = :order_id AND "
               "position IN (SELECT json_extract(value, '$.position') FROM json_each(:lines))"], "affected"),
        _tool("add_line", "Add a line to an order.", "write", {"order_id": INTEGER, "sku": {"type": "string",
                                                                                              "description": "SKU"}},
              ["INSERT INTO order_lines (order_id, position, sku) SELECT :order_id, coalesce(max(position) + 1, 0), "
               ":sku FROM order_lines WHERE order_id = :order_id",
               "SELECT order_id, position, sku, quantity, extras FROM order_lines WHERE order_id = :order_id "
               "ORDER BY position DESC LIMIT 1"], "row"),
        _tool("hand_off", "Hand the conversation to a human agent.", "none",
              {"reason": {"type": "string", "enum": ["refund", "other"], "description": "Why"}}, [], "recorded"),
    ]
    world["tools"][-1]["result"]["message"] = "A human agent will take over."
    world["tools"][-1].pop("statements")
    return world


def _changed(change: Change) -> dict[str, Any]:
    world = line_world()
    change(world)
    return world


def _task(world: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = world["tasks"][0]
    return task


def _column(world: dict[str, Any], table: str, name: str) -> dict[str, Any]:
    columns = next(t for t in world["state"]["tables"] if t["name"] == table)["columns"]
    column: dict[str, Any] = next(c for c in columns if c["name"] == name)
    return column


def _named(world: dict[str, Any], name: str) -> dict[str, Any]:
    tool: dict[str, Any] = next(t for t in world["tools"] if t["name"] == name)
    return tool


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[WorldRuntime]:
    loaded = load_world(write_world(tmp_path / "lines", line_world()))
    runtime = loaded.runtime()
    yield runtime
    runtime.close()


def _refused(tmp_path: Path, change: Change) -> str:
    with pytest.raises(WorldFormatError) as refused:
        load_world(write_world(tmp_path / "bad", _changed(change)))
    return str(refused.value)


# --------------------------------------------------------------------------- composite keys


def test_two_primary_key_columns_make_a_composite_key_in_the_seed_and_in_the_change_log(runtime: WorldRuntime) -> None:
    info = runtime.pristine.execute("SELECT name, pk FROM pragma_table_info('order_lines') WHERE pk > 0").fetchall()
    assert info == [("order_id", 1), ("position", 2)]
    with runtime.episode() as episode:
        assert episode.call("add_line", {"order_id": 100, "sku": "NEW"}).observation == {
            "order_id": 100, "position": 2, "sku": "NEW", "quantity": 1, "extras": {}}
        assert [(c.table, c.key, c.before) for c in episode.changes()] == [
            ("order_lines", {"order_id": 100, "position": 2}, None)]


def test_unchanged_except_names_a_row_of_a_composite_key_by_an_object(runtime: WorldRuntime) -> None:
    vcode = Task.model_validate({
        "instruction": "x", "anchor": {"table": "orders", "key": 100}, "reference": [{"tool": "get_order"}],
        "vcode": {"checks": [{"kind": "unchanged_except",
                              "rows": [{"table": "order_lines", "key": {"order_id": 100, "position": 0}}]}]}}).vcode
    lines = {"order_id": 100, "lines": [{"position": 0, "quantity": 5}]}
    with runtime.episode() as episode:
        episode.call("set_quantities", lines)
        assert evaluate(vcode, episode, None, None).outcome == "pass"
    with runtime.episode() as episode:
        episode.call("set_quantities", {**lines, "lines": [{"position": 1, "quantity": 5}]})
        verdict = evaluate(vcode, episode, None, None)
    assert verdict.outcome == "fail"
    assert verdict.reason == "unexpected change in order_lines row {'order_id': 100, 'position': 1}"


@pytest.mark.parametrize(("key", "message"), [
    ({"order_id": 100}, "the key of a 'order_lines' row lacks key column 'position'"),
    ({"order_id": 100, "position": 0, "sku": "x"}, "the key of a 'order_lines' row has 'sku', not a key column"),
    (100, "table 'order_lines' has a composite key: give an object with ['order_id', 'position']"),
])
def test_a_row_key_missing_a_key_column_or_naming_another_is_refused_at_load(tmp_path: Path, key: Any,
                                                                              message: str) -> None:
    check = {"kind": "unchanged_except", "rows": [{"table": "order_lines", "key": key}]}
    assert message in _refused(tmp_path, lambda w: _task(w)["vcode"]["checks"].append(check))
    anchored = _refused(tmp_path, lambda w: _task(w).update(anchor={"table": "order_lines", "key": key}))
    assert message in anchored and "/tasks/0/anchor/key" in anchored


# --------------------------------------------------------------------------- structured arguments


def test_a_list_argument_is_bound_as_json_and_read_with_json_each(runtime: WorldRuntime) -> None:
    with runtime.episode() as episode:
        assert episode.call("count_skus", {"skus": ["SKU-1", "SKU-2", "SKU-2", "NOPE"]}).observation == {"lines": 2}
        assert episode.call("set_quantities", {"order_id": 101, "lines": [{"position": 0, "quantity": 7},
                                                                          {"position": 1, "quantity": 9}]}
                            ).observation == {"affected": 2}
        rows = episode.query("SELECT position, quantity FROM order_lines WHERE order_id = 101 ORDER BY position", {})
    assert rows == [(0, 7), (1, 9)]


@pytest.mark.parametrize(("tool", "arguments", "error"), [
    ("get_order", {"order_id": [100]}, "at order_id: [100] is not of type 'integer'"),
    ("count_skus", {"skus": "SKU-1"}, "at skus: 'SKU-1' is not of type 'array'"),
    ("set_quantities", {"order_id": 100, "lines": [{"position": 0}]}, "'quantity' is a required property"),
    ("set_quantities", {"order_id": 100, "lines": [{"position": 0, "quantity": 1, "gift": True}]},
     "Additional properties are not allowed ('gift' was unexpected)"),
])
def test_a_list_where_a_scalar_is_declared_and_the_reverse_are_tool_errors_that_change_nothing(
        runtime: WorldRuntime, tool: str, arguments: dict[str, Any], error: str) -> None:
    with runtime.episode() as episode:
        event = episode.call(tool, arguments)
        assert event.error and error in event.observation["error"]
        assert episode.changes() == []


def test_a_reference_that_passes_a_list_for_a_scalar_parameter_is_refused_at_load(tmp_path: Path) -> None:
    message = _refused(tmp_path, lambda w: _task(w)["reference"][0].update(arguments={"order_id": [100]}))
    assert "/tasks/0/reference/0/arguments: [100] is not of type 'integer'" in message


def test_a_read_tool_that_uses_json_each_still_cannot_write(tmp_path: Path) -> None:
    def sneaky(world: dict[str, Any]) -> None:
        _named(world, "count_skus")["statements"] = [
            "UPDATE orders SET status = 'x' WHERE id IN (SELECT value FROM json_each(:skus))",
            "SELECT 1 AS lines"]
    assert "/tools/" in _refused(tmp_path, sneaky)


def test_tool_called_matches_a_list_in_order_or_as_a_multiset(runtime: WorldRuntime) -> None:
    def verdict(list_match: str, expected: list[str]) -> str:
        vcode = Task.model_validate({
            "instruction": "x", "anchor": {"table": "orders", "key": 100}, "reference": [{"tool": "get_order"}],
            "vcode": {"checks": [{"kind": "tool_called", "tool": "count_skus", "list_match": list_match,
                                  "arguments": {"skus": expected}}]}}).vcode
        with runtime.episode() as episode:
            episode.call("count_skus", {"skus": ["b", "a", "a"]})
            return evaluate(vcode, episode, None, None).outcome
    assert verdict("ordered", ["b", "a", "a"]) == "pass"
    assert verdict("ordered", ["a", "a", "b"]) == "fail"
    assert verdict("multiset", ["a", "a", "b"]) == "pass"
    assert verdict("multiset", ["a", "b"]) == "fail"
    assert verdict("multiset", ["a", "b", "b"]) == "fail"


# --------------------------------------------------------------------------- JSON columns


def test_a_json_column_comes_back_nested_and_a_json_value_check_reads_into_the_state(runtime: WorldRuntime) -> None:
    def json_value(value: Any) -> str:
        vcode = Task.model_validate({
            "instruction": "x", "anchor": {"table": "orders", "key": 100}, "reference": [{"tool": "get_order"}],
            "vcode": {"checks": [{"kind": "json_value", "table": "order_lines", "column": "extras", "pointer": "/gift",
                                  "key": {"order_id": 100, "position": 0}, "value": value}]}}).vcode
        with runtime.episode() as episode:
            return evaluate(vcode, episode, None, None).outcome
    with runtime.episode() as episode:
        assert episode.call("get_line", {"order_id": 100, "position": 0}).observation["extras"] == {"gift": True}
    assert (json_value(True), json_value(False), json_value(1)) == ("pass", "fail", "fail")


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["state"]["rows"]["order_lines"][0].__setitem__(4, "{not json"),
     "table 'order_lines' column 'extras' is declared json_data but row 1 holds no valid JSON text"),
    (lambda w: _column(w, "order_lines", "quantity").update(json_data=True),
     "/state/tables/2/columns/3/json_data: JSON is stored in TEXT columns, not INTEGER"),
    (lambda w: _task(w)["vcode"]["checks"].append({"kind": "json_value", "table": "order_lines", "column": "sku",
                                                   "key": {"order_id": 100, "position": 0}, "pointer": "/a",
                                                   "value": 1}),
     "/tasks/0/vcode/checks/3: order_lines.sku is not a column declared json_data"),
])
def test_bad_json_data_is_refused_at_load_naming_where(tmp_path: Path, change: Change, message: str) -> None:
    assert message in _refused(tmp_path, change)


# --------------------------------------------------------------------------- pure tools


def test_a_pure_tool_validates_and_records_its_arguments_and_changes_nothing(runtime: WorldRuntime) -> None:
    with runtime.episode() as episode:
        event = episode.call("hand_off", {"reason": "refund"})
        assert (event.error, event.observation) == (False, {"status": "recorded",
                                                            "message": "A human agent will take over."})
        assert episode.call("hand_off", {"reason": "angry"}).error
        assert episode.changes() == [] and [e.arguments for e in episode.trace] == [{"reason": "refund"},
                                                                                    {"reason": "angry"}]
        vcode = Task.model_validate({
            "instruction": "x", "anchor": {"table": "orders", "key": 100}, "reference": [{"tool": "get_order"}],
            "vcode": {"checks": [{"kind": "tool_called", "tool": "hand_off", "arguments": {"reason": "refund"}}]}}
        ).vcode
        assert evaluate(vcode, episode, None, None).outcome == "pass"


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: _named(w, "hand_off").update(statements=["UPDATE orders SET status = 'x'"]),
     "tool 'hand_off' is pure (effect none): it has no statements or preconditions"),
    (lambda w: _named(w, "hand_off").update(effect="write"),
     "tool 'hand_off' runs SQL: give it statements and a rows, row or affected result"),
    (lambda w: _named(w, "get_order").update(confirm=True),
     "/tools/0/confirm: only a write tool asks the customer to confirm it"),
])
def test_a_pure_tool_that_tries_to_write_is_refused(tmp_path: Path, change: Change,
                                                                 message: str) -> None:
    assert message in _refused(tmp_path, change)


# --------------------------------------------------------------------------- declared constraints


def test_defaults_checks_and_indexes_are_created_in_the_seed_and_enforced(runtime: WorldRuntime) -> None:
    ddl = runtime.pristine.execute("SELECT sql FROM sqlite_schema WHERE name = 'order_lines'").fetchone()[0]
    assert "DEFAULT 1" in ddl and "DEFAULT '{}'" in ddl and "CHECK (quantity > 0)" in ddl
    assert runtime.pristine.execute("SELECT tbl_name FROM sqlite_schema WHERE type = 'index' AND name = "
                                    "'lines_by_sku'").fetchone() == ("order_lines",)
    with runtime.episode() as episode:
        event = episode.call("set_quantities", {"order_id": 100, "lines": [{"position": 0, "quantity": 0}]})
        assert event.observation == {"error": "the change was refused: CHECK constraint failed: quantity > 0"}
        assert episode.changes() == []


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["state"]["rows"]["order_lines"][0].__setitem__(3, 0),
     "/state/rows/order_lines/0: CHECK constraint failed: quantity > 0"),
    (lambda w: _column(w, "order_lines", "quantity").update(default="many"),
     "/state/tables/2/columns/3/default: 'many' does not fit a INTEGER column"),
    (lambda w: _column(w, "order_lines", "extras").update(default="{"),
     "/state/tables/2/columns/4/default: '{' is not valid JSON text"),
    (lambda w: w["state"]["indexes"].append({"name": "bad", "table": "order_lines", "columns": ["nope"]}),
     "/state/indexes/1: 'order_lines.nope' is not a declared table.column"),
    (lambda w: w["state"]["tables"][2]["checks"].append("json_valid(extras)"),
     "unsafe use of json_valid()"),
])
def test_constraints_the_seed_breaks_or_sqlite_would_not_trust_are_refused_at_load(tmp_path: Path, change: Change,
                                                                                    message: str) -> None:
    assert message in _refused(tmp_path, change)


def test_a_packaged_seed_whose_default_differs_from_its_declaration_is_refused(tmp_path: Path) -> None:
    package = write_package(load_world(write_world(tmp_path / "src", line_world())), tmp_path / "pkg")
    document = json.loads((package / "world.json").read_text())
    _column(document, "order_lines", "quantity")["default"] = 2
    from world_format.manifest import file_entry

    (package / "world.json").write_text(json.dumps(document))
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["files"]["world.json"] = file_entry((package / "world.json").read_bytes())
    (package / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(WorldFormatError, match="differs from its declaration"):
        load_world(package)


# --------------------------------------------------------------------------- conversations


def _confirmed(world: dict[str, Any], turn: int = 0) -> None:
    task = _task(world)
    task["turns"] = [{"after_step": 1, "assistant": "Order 100 is pending. Shall I cancel it?", "user": "Yes."}]
    task["vcode"]["checks"].append({"kind": "after_turn", "tool": "cancel_order", "turn": turn})


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: _confirmed(w, turn=1), "/tasks/0/vcode/checks/3/turn: the task has 1 scripted user turn(s)"),
    (lambda w: (_confirmed(w), _task(w)["turns"][0].update(after_step=3)),
     "/tasks/0/turns/0/after_step: turns come in order, after 0 to 2 reference steps"),
    (lambda w: (_confirmed(w), _task(w)["vcode"]["checks"].append({"kind": "after_turn", "tool": "nope", "turn": 0})),
     "/tasks/0/vcode/checks/4/tool: unknown tool 'nope'"),
])
def test_a_user_turn_the_script_does_not_have_is_refused_at_load(tmp_path: Path, change: Change,
                                                                 message: str) -> None:
    assert message in _refused(tmp_path, change)


def test_after_turn_passes_a_write_after_the_yes_and_fails_one_before_it(tmp_path: Path) -> None:
    loaded = load_world(write_world(tmp_path / "w", _changed(_confirmed)))
    task, runtime = loaded.world.tasks[0], loaded.runtime()
    try:
        for deliver_first, outcome in ((True, "pass"), (False, "fail")):
            with runtime.episode() as episode:
                episode.call("get_order", {"order_id": 100})
                if deliver_first:
                    episode.deliver_turn()
                episode.call("cancel_order", {"order_id": 100})
                if not deliver_first:
                    episode.deliver_turn()
                verdict = evaluate(task.vcode, episode, task.answer, task.answer)
                assert verdict.outcome == outcome, verdict.reason
        assert verdict.reason == "cancel_order was called before the customer's turn 0 (e.g. the confirmation)"
    finally:
        runtime.close()


def test_a_confirm_tool_adds_its_policy_line_to_the_system_prompt() -> None:
    world = load_world(AIRLINE).world
    prompt = world.system_prompt()
    for name in ("cancel_legs", "cancel_booking"):
        tool = world.tool(name)
        assert tool is not None and tool.confirm and f"- {confirmation_policy(tool)}" in prompt.splitlines()
    assert "Before calling cancel_booking (cancel), tell the customer exactly what will change" in prompt


# --------------------------------------------------------------------------- the third example world


@pytest.fixture(scope="module")
def airline_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The airline example built with the default settings: the run's shared build (:mod:`kit_cache`, as
    ``example_kits``' airline kit), read only."""
    return cached_kit(AIRLINE, tmp_path_factory, BuildConfig())


def test_the_airline_world_builds_twice_to_identical_bytes_and_verifies(tmp_path: Path) -> None:
    airline_kits = [Path(build_kit(AIRLINE, tmp_path / name, BuildConfig())["kit"]["path"]) for name in ("a", "b")]
    first, second = airline_kits
    archives = [Path(f"{kit}.tar.zst").read_bytes() for kit in airline_kits]
    assert archives[0] == archives[1]
    result = CliRunner().invoke(app, ["verify", str(first), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verified"] and report["mismatches"] == []
    assert (report["train_cases_replayed"], report["eval_cases_checked"], report["tasks_checked"]) == (461, 66, 12)
    assert second.name == first.name


def test_the_airline_kit_carries_every_construct(airline_kit: Path) -> None:
    with open_kit(airline_kit) as kit:
        records = kit.tasks()
        rows = kit.rows()
        # the legs' sum has no quantity to add up (positions are keys), so that one template is rejected
        assert len(records) == 11 and [r.template for r in kit.tasks(admitted=False)] == ["aggregate_total"]
        assert {r.template for r in records} >= {"write_confirmed", "authored"}
        conversation = next(r for r in rows if r["metadata"]["template"] == "write_confirmed")["messages"]
        roles = [m["role"] for m in conversation]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user", "assistant",
                         "tool", "assistant"]  # identify, look up, ask, the customer's yes, write, answer
        assert conversation[2]["tool_calls"][0]["function"]["name"] == "find_customer_by_email"
        assert conversation[7]["content"] == "Yes, please go ahead."
        assert conversation[8]["tool_calls"][0]["function"]["name"] == "cancel_booking"
        lists = [m["tool_calls"][0]["function"]["arguments"] for r in rows for m in r["messages"]
                 if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "cancel_legs"]
        assert lists and all(isinstance(a["positions"], list) and len(a["positions"]) == 2 for a in lists)
        handed = [m for r in rows for m in r["messages"] if m["role"] == "tool" and "recorded" in m["content"]]
        assert handed and json.loads(handed[0]["content"]) == {"status": "recorded",
                                                               "message": "A human agent will take over this "
                                                                          "conversation."}
        confirmed = next(r for r in records if r.template == "write_confirmed")
        assert confirmed.probe_matrix["unconfirmed"]["outcome"] == "fail"
        assert "unconfirmed_write" in confirmed.probe_matrix["unconfirmed"]["reason"]


@pytest.mark.parametrize("agent", ["reference", "null", "shortcut", "wrong-row", "wrong-value", "off-by-one",
                                   "read-only", "hedger", "over-inclusive", "unconfirmed"])
def test_the_airline_adversaries_pass_nothing_and_the_reference_passes_everything(
        airline_kit: Path, agent: str, tmp_path: Path) -> None:
    kit_path = airline_kit
    out = tmp_path / "agent.jsonl"
    runner = CliRunner()
    assert runner.invoke(app, ["adversary", "--kit", str(kit_path), "--agent", agent, "--out", str(out)]
                         ).exit_code == 0
    lines = out.read_text().splitlines()
    scored = json.loads(runner.invoke(app, ["eval", "--kit", str(kit_path), "--trajectories", str(out), "--json",
                                            "--min-pass-rate", "0"]).stdout)
    assert lines and scored["summary"]["cases"] == len(lines)
    passed = sum(case["passed"] for case in scored["cases"])
    assert passed == (len(lines) if agent == "reference" else 0), scored["summary"]


def test_an_episode_feeds_the_scripted_yes_when_the_agent_asks_and_ends_when_the_script_is_used_up(
        airline_kit: Path) -> None:
    with open_kit(airline_kit) as kit:
        case = next(c for c in kit.cases("eval") if c.task.turns)
        loaded = kit.world()
    runtime = loaded.runtime()
    try:
        steps, turn = case.task.reference, case.task.turns[0]
        with runtime.episode() as episode:  # the reference's arguments, resolved by running it
            arguments = [event.arguments for event in run_chain(episode, steps, case.task.turns).events]
        calls = [f"<tool_call>\n{json.dumps({'name': step.tool, 'arguments': args})}\n</tool_call>"
                 for step, args in zip(steps, arguments, strict=True)]
        asked = calls[:turn.after_step] + [turn.assistant]
        texts = iter(asked + calls[turn.after_step:] + [case.task.answer])
        seen: list[list[dict[str, Any]]] = []

        def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
            seen.append(list(messages))
            return next(texts)
        result = run_episode(PerTurn(generate, FORMATS["hermes"]), runtime, case, max_turns=12)
        assert result.verdict.outcome == "pass", result.verdict.reason
        assert seen[len(asked)][-1] == {"role": "user", "content": turn.user}
        eager = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": step.tool,
                                                                                  "arguments": args}}]}
                 for step, args in zip(steps, arguments, strict=True)]
        replayed = replay_trajectory(runtime, case, eager + [{"role": "assistant", "content": case.task.answer}], 12)
        assert replayed.verdict.outcome == "fail" and "unconfirmed_write" in replayed.verdict.reason
    finally:
        runtime.close()


def test_a_sqlite_error_in_a_hardened_schema_never_escapes_as_a_traceback(tmp_path: Path) -> None:
    world = _changed(lambda w: w["state"]["tables"][2]["checks"].append("json_valid(extras)"))
    result = CliRunner().invoke(app, ["build", "--world", str(write_world(tmp_path / "w", world)),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and not isinstance(result.exception, sqlite3.Error)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_reference_and_check_values_keep_their_json_type_inside_lists_and_objects() -> None:
    task = Task.model_validate({
        "instruction": "x", "anchor": {"table": "orders", "key": 100},
        "reference": [{"tool": "t", "arguments": {"flag": True, "ratio": 1.5, "whole": 2.0, "items": [True, 0],
                                                  "nested": {"on": False, "from": {"$from": 0, "pointer": "/a"}}}}],
        "vcode": {"checks": [{"kind": "tool_called", "tool": "t", "arguments": {"flag": True, "items": [False, 1]}}]}})
    arguments = task.reference[0].arguments
    assert [type(arguments[k]) for k in ("flag", "ratio", "whole")] == [bool, float, float]
    assert [type(v) for v in arguments["items"]] == [bool, int] and arguments["nested"]["on"] is False
    assert task.vcode.checks[0].arguments == {"flag": True, "items": [False, 1]}  # type: ignore[union-attr]
    assert type(task.vcode.checks[0].arguments["items"][0]) is bool  # type: ignore[union-attr]


def test_the_unconfirmed_agent_says_it_applies_to_no_case_of_a_single_turn_kit_and_eval_refuses_an_empty_file(
        kit_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "unconfirmed.jsonl"
    runner = CliRunner()
    written = runner.invoke(app, ["adversary", "--kit", str(kit_path), "--agent", "unconfirmed", "--out", str(out)])
    assert written.exit_code == 0 and out.read_text() == ""
    assert "0 trajectories of unconfirmed written" in written.output
    assert "(unconfirmed applies to no case of this kit)" in written.output
    scored = runner.invoke(app, ["eval", "--kit", str(kit_path), "--trajectories", str(out)])
    assert scored.exit_code != 0 and f"{out} holds no trajectories: nothing to score" in str(scored.exception)
