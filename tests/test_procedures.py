"""Declared procedures (issue #16 item 1): minted chains follow them, verifiers require them, the gate's
policy-skip probes fail, and a checker over training rows finds every kind of violation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, write_world
from kit_cache import cached_build
from typer.testing import CliRunner
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.cli import app
from world_format.errors import WorldFormatError
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.procedure_check import Event, ProcedureChecker, message_events

SMALL = BuildConfig(train_cases_per_task=4, eval_cases_per_task=2)
EXAMPLE_WORLDS = ["retail_desk", "it_helpdesk", "airline_desk"]


def procedural_world() -> dict[str, Any]:
    """The small shop with its policies as data: identify by email first, check before writing."""
    world = small_world()
    world["procedures"] = {"identify": "find_customer_by_email", "check_before_write": True}
    world["state"]["anchors"][0]["internal_key"] = True
    return world


def _rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(record["kit"]["path"]) / "sft.jsonl").read_text().splitlines()]


def _calls(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for m in row["messages"]
            for c in m.get("tool_calls") or []]


@pytest.fixture(scope="module")
def procedural_kit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("procedural")
    return build_kit(write_world(root / "w", procedural_world()), root / "out", SMALL)


def test_every_minted_chain_identifies_the_customer_first(procedural_kit: dict[str, Any]) -> None:
    rows = [row for row in _rows(procedural_kit) if row["metadata"]["template"] != "authored"]
    assert rows
    assert all(_calls(row)[0][0] == "find_customer_by_email" for row in rows)
    assert all("customer 1" not in row["messages"][1]["content"] for row in rows)  # no internal customer ids


def test_a_refusal_reads_the_row_and_explains_without_calling_the_write(procedural_kit: dict[str, Any]) -> None:
    refusals = [row for row in _rows(procedural_kit) if row["metadata"]["template"] == "write_refused"]
    assert refusals
    for row in refusals:
        assert [name for name, _ in _calls(row)] == ["find_customer_by_email", "get_order"]
        answer = row["messages"][-1]["content"]
        order = json.loads(row["messages"][-2]["content"])  # the look-up's observation, restated before deciding
        said = f"Your order {order['id']} has status {order['status']}. "
        assert answer.startswith(said + "I'm sorry, I can't cancel your order ") and answer.endswith(
            ": it is no longer pending.")
        assert "only pending orders can be cancelled" not in answer  # the explanation, not the tool's error


def test_the_policy_skip_probes_fail_every_admitted_case(procedural_kit: dict[str, Any]) -> None:
    with open_kit(Path(procedural_kit["kit"]["path"])) as kit:
        cases = kit.cases("train") + kit.cases("eval")
    skip = [case.probes["unidentified"] for case in cases if case.probes["unidentified"] != "n/a"]
    forbidden = [case.probes["forbidden-write"] for case in cases if case.probes["forbidden-write"] != "n/a"]
    assert len(skip) == len(cases) - sum(case.task.template == "authored" for case in cases)
    assert forbidden and set(skip) == set(forbidden) == {"fail"}


def test_a_family_whose_verifier_ignores_identification_is_still_held_to_it(tmp_path: Path) -> None:
    world = procedural_world()
    world["tasks"] = [{
        "family": {"query": "SELECT o.id AS order_id, c.email FROM orders o JOIN customers c ON c.id = o.customer_id "
                            "WHERE o.status = 'shipped'"},
        "instruction": "I'm {{email}}. What is the status of order {{order_id}}?",
        "anchor": {"table": "orders", "key": "{{order_id}}"},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                      {"tool": "get_order", "arguments": {"order_id": "{{order_id}}"}}],
        "answer": "Order {{order_id}} is shipped.",
        "vcode": {"checks": [{"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": "{{order_id}}"}},
                             {"kind": "answer", "mode": "contains", "value": "shipped", "field": "orders.status"},
                             {"kind": "unchanged_except"}]}}]
    record = build_kit(write_world(tmp_path / "w", world), tmp_path / "out", SMALL)
    with open_kit(Path(record["kit"]["path"])) as kit:
        family = next(r for r in kit.tasks() if r.template == "authored")
        cases = [c for c in kit.cases("train") + kit.cases("eval") if c.task_id == family.task_id]
    # its VCode would pass the chain without the identification; the procedure check every verdict runs fails it
    assert cases and {c.probes["unidentified"] for c in cases} == {"fail"}
    assert family.probe_matrix is not None
    assert family.probe_matrix["unidentified"]["reason"].startswith("procedure: unidentified: get_order names orders")


def test_a_family_whose_chain_reads_before_identifying_breaks_the_procedure(tmp_path: Path) -> None:
    world = procedural_world()
    world["tasks"] = [{
        "family": {"query": "SELECT o.id AS order_id, c.email FROM orders o JOIN customers c ON c.id = o.customer_id"},
        "instruction": "I'm {{email}}. What is the total of order {{order_id}}?",
        "anchor": {"table": "orders", "key": "{{order_id}}"},
        "reference": [{"tool": "get_order", "arguments": {"order_id": "{{order_id}}"}},
                      {"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}}],
        "answer": None,
        "vcode": {"checks": [{"kind": "tool_called", "tool": "find_customer_by_email",
                              "arguments": {"email": "{{email}}"}},
                             {"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": "{{order_id}}"}},
                             {"kind": "unchanged_except"}]}}]
    record = build_kit(write_world(tmp_path / "w", world), tmp_path / "out", SMALL)
    with open_kit(Path(record["kit"]["path"])) as kit:
        rejected = [r for r in kit.tasks(admitted=False) if r.template == "authored"][0]
    assert rejected.cases_left_out.get("procedure", 0) > 0
    assert rejected.rejected_because[0].startswith("procedure: unidentified: get_order names orders")


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> ProcedureChecker:
    world = procedural_world()
    world["tools"][-1]["confirm"] = True  # set_tier: the customer must confirm it
    loaded = load_world(write_world(tmp_path_factory.mktemp("checker"), world))
    return ProcedureChecker.of(loaded.runtime())


def _identified(customer: int, email: str) -> Event:
    return Event("call", "find_customer_by_email", {"email": email}, {"id": customer, "email": email})


def test_the_checker_finds_a_read_before_identification_and_another_customers_row(checker: ProcedureChecker) -> None:
    # order 100 belongs to customer 1 (orders: customer 1 + (i * 7) % 24)
    read = Event("call", "get_order", {"order_id": 100}, {"id": 100})
    assert [kind for kind, _ in checker.violations([read])] == ["unidentified"]
    assert [kind for kind, _ in checker.violations([_identified(2, "ben2@example.com"), read])] == [
        "another_customer"]
    assert checker.violations([_identified(1, "ana1@example.com"), read]) == []


def test_the_checker_finds_an_unconfirmed_write_and_an_attempted_refused_write(checker: ProcedureChecker) -> None:
    me = _identified(1, "ana1@example.com")
    tier = Event("call", "set_tier", {"customer_id": 1, "tier": "gold"}, {"affected": 1})
    assert [kind for kind, _ in checker.violations([me, tier])] == ["unconfirmed_write"]
    asked = Event("ask", text="Shall I change your tier to gold?")
    assert checker.violations([me, asked, Event("reply"), tier]) == []
    assert [kind for kind, _ in checker.violations([me, asked, Event("reply"), tier, tier])] == [
        "unconfirmed_write"]  # each confirmed write needs its own yes
    assert [kind for kind, _ in checker.violations([me, asked, Event("reply", accepted=False), tier])] == [
        "unconfirmed_write"]  # the customer said the question was unclear
    vague = Event("ask", text="Shall I go ahead?")
    assert [kind for kind, _ in checker.violations([me, vague, Event("reply"), tier])] == [
        "confirmation_incomplete"]  # a yes to a question that never said what would change
    refused = Event("call", "cancel_order", {"order_id": 100}, {"error": "only pending orders can be cancelled"},
                    error=True)
    assert [kind for kind, _ in checker.violations([me, refused])] == ["refused_write_attempted"]


def test_the_checker_reads_the_row_format(checker: ProcedureChecker) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "I'm ana1@example.com"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_0", "type": "function",
                     "function": {"name": "get_order", "arguments": {"order_id": 100}}}]},
                {"role": "tool", "tool_call_id": "call_0", "name": "get_order", "content": "{\"id\": 100}"},
                {"role": "assistant", "content": "Shall I?"}, {"role": "user", "content": "yes"}]
    events = message_events(messages)
    assert [event.kind for event in events] == ["request", "call", "ask", "reply"]
    report = checker.report([{"messages": messages, "metadata": {"case_id": "c-1"}}])
    assert report["violating_rows"] == 1 and report["violations"] == {"unidentified": 1}
    assert report["examples"][0]["case_id"] == "c-1"


@pytest.mark.parametrize("name", EXAMPLE_WORLDS)
def test_every_example_kit_follows_its_procedures_and_fails_every_policy_skip_probe(
        tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    record = cached_build(ROOT / "examples" / name / "world.json", tmp_path_factory)
    with open_kit(Path(record["kit"]["path"])) as kit:
        cases = kit.cases("train") + kit.cases("eval")
        runtime = kit.world().runtime()
        try:
            report = ProcedureChecker.of(runtime).report(kit.rows())
        finally:
            runtime.close()
    assert report["declared"] and report["rows"] == record["sft_rows"] and report["violating_rows"] == 0
    for probe in ("unidentified", "forbidden-write"):
        outcomes = [case.probes[probe] for case in cases if case.probes[probe] != "n/a"]
        assert outcomes and set(outcomes) == {"fail"}, probe
    if name == "airline_desk":
        assert {case.probes["unconfirmed"] for case in cases if case.probes["unconfirmed"] != "n/a"} == {"fail"}


def test_info_says_a_kit_without_procedures_teaches_none(kit_path: Path) -> None:
    shown = CliRunner().invoke(app, ["info", str(kit_path)])
    assert shown.exit_code == 0 and "the world declares none, so the kit teaches no procedure" in shown.stdout


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["procedures"].update(identify="list_orders"), "must be a read tool with a row result"),
    (lambda w: w["procedures"].update(identify="get_customer"), "must find a row of an anchor table"),
    (lambda w: w["procedures"].update(identify="nope"), "'nope' is not a declared tool"),
])
def test_an_identification_that_cannot_be_followed_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    world = procedural_world()
    change(world)
    with pytest.raises(WorldFormatError, match=f"/procedures/identify: .*{re.escape(message)}"):
        load_world(write_world(tmp_path, world))


def test_a_write_made_before_the_identification_fails_its_verifier(procedural_kit: dict[str, Any]) -> None:
    from blobkit.builder.gate import run_attempt, run_reference
    from blobkit.builder.probes import Attempt

    with open_kit(Path(procedural_kit["kit"]["path"])) as kit:
        case = next(c for c in kit.cases("train") if c.task.template == "write_ok"
                    and c.task.reference[-1].tool == "set_tier")
        runtime = kit.world().runtime()
        try:
            reference = run_reference(runtime, case.task)
            calls = reference.calls.calls
            assert [name for name, _ in calls] == ["find_customer_by_email", "set_tier"]  # the look-up is the identify
            assert run_attempt(runtime, case.task, Attempt(calls, case.task.answer)).verdict.outcome == "pass"
            backwards = run_attempt(runtime, case.task, Attempt(tuple(reversed(calls)), case.task.answer))
        finally:
            runtime.close()
    assert backwards.verdict.outcome == "fail" and "procedure: unidentified" in backwards.verdict.reason
