"""An answer must assert the value (issue 24 item 2, handed kind 14-negated-answer-passes) and the gate perturbs
what is checked (issue 28 item 6): negated, conditional and hedged statements fail a value check; numbers the agent
put into its calls excuse nothing; a digit-only text key is text; the negated and number-hedge agents fail every
admitted case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import handed_evidence, reference_lines, score_trajectories, write_world
from worlds import small_world

from blobkit.builder.agents import CaseRun
from blobkit.builder.agents.number_hedge import plan as number_hedge
from blobkit.builder.agents.off_by_one import next_key
from blobkit.builder.agents.off_by_one import plan as off_by_one
from blobkit.builder.probes import ReferenceCalls, perturb_answer
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import AnswerCheck, Ref, Task
from world_format.vcode import evaluate

EXAMPLES = ["retail_desk", "it_helpdesk", "airline_desk"]


def _task(check: dict[str, Any], answer: str | None = None) -> Task:
    return Task.model_validate({"instruction": "x", "anchor": {"table": "orders", "key": 100}, "answer": answer,
                                "reference": [{"tool": "get_order", "arguments": {"order_id": 100}}],
                                "vcode": {"checks": [check]}})


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Any:
    world = small_world()
    world["state"]["tables"].append({"name": "books", "columns": [
        {"name": "isbn", "type": "TEXT", "primary_key": True}, {"name": "copies", "type": "INTEGER"}]})
    world["state"]["rows"]["books"] = [["9786517269898", 3], ["9780000000002", 5]]
    loaded = load_world(write_world(tmp_path_factory.mktemp("books"), world))
    opened = loaded.runtime()
    yield opened
    opened.close()


def _verdict(runtime: Any, check: dict[str, Any], answer: str, key: str | None = None,
             calls: tuple[tuple[str, dict[str, Any]], ...] = ()) -> str:
    task = _task(check, key)
    with runtime.episode() as episode:
        for tool, arguments in calls:
            episode.call(tool, arguments)
        verdict = evaluate(task.vcode, episode, answer, task.answer)
    return f"{verdict.outcome}: {verdict.reason}" if verdict.outcome != "pass" else "pass"


STATUS = {"kind": "answer", "mode": "contains", "value": "shipped", "field": "orders.status"}
AMOUNT = {"kind": "answer", "mode": "number", "value": "194.99", "decimals": 2}
COUNT = {"kind": "answer", "mode": "number", "value": 3}


@pytest.mark.parametrize("answer", [
    "I checked it: it is not shipped, and it never was shipped.",
    "It isn't shipped.", "Shipped? No, it was never shipped.", "Your order is no longer shipped.",
    "It is shipped. Actually, it is not shipped.", "If the carrier is right, it is shipped.",
    "It may be shipped.", "I think it is shipped.", "Perhaps, it is shipped.", "It would be shipped by now.",
    "Unless I am mistaken it is shipped.", "Your order cannot be shipped.", "It is shipped if the carrier is right.",
    "Assuming the scan is right, your order is shipped."])
def test_a_negated_conditional_or_hedged_statement_fails_a_contains_check(runtime: Any, answer: str) -> None:
    assert _verdict(runtime, STATUS, answer).startswith("fail: answer check (contains) failed: the answer does not "
                                                        "assert 'shipped'")


@pytest.mark.parametrize("answer", [
    "Order 100 is shipped.", "No worries: order 100 is shipped.", "It is shipped, not delivered... sorry, I mean "
    "it is shipped.", "Your order is shipped and nothing else is needed.", "It was shipped, but not by us.",
    "I would be happy to help: your order is shipped.", "Thanks for asking about your order: it is shipped.",
    "Your order is shipped, let me know if you need anything else."])
def test_an_affirmative_statement_passes_whatever_negation_stands_in_another_clause(runtime: Any,
                                                                                  answer: str) -> None:
    assert _verdict(runtime, {**STATUS, "field": None}, answer) == "pass"


def test_a_value_that_holds_a_negation_itself_may_be_stated(runtime: Any) -> None:
    check = {"kind": "answer", "mode": "contains", "value": "it is no longer pending"}
    assert _verdict(runtime, check, "I'm sorry, I can't cancel your order 100: it is no longer pending.") == "pass"
    assert _verdict(runtime, check, "It is not true that it is no longer pending.").startswith("fail")


@pytest.mark.parametrize(("answer", "outcome"), [
    ("You will get $194.99 back.", "pass"), ("You will not get $194.99 back.", "fail"),
    ("It is not 194.99, and it never was 194.99.", "fail"), ("You might get $194.99 back.", "fail"),
    ("If approved, you will get $194.99 back.", "fail"), ("About $194.99 will come back.", "fail")])
def test_a_number_check_reads_the_statement_of_the_number(runtime: Any, answer: str, outcome: str) -> None:
    assert _verdict(runtime, AMOUNT, answer).split(":")[0] == outcome


def test_numbers_the_agent_put_into_calls_excuse_nothing_and_the_answer_keys_numbers_do(runtime: Any) -> None:
    hedge = "Order 100 has 3 items. Or perhaps 2 or 4."
    failed = (("get_order", {"order_id": 2}), ("get_order", {"order_id": 4}))
    undeclared = (("note_numbers", {"n0": 2, "n1": 4}),)
    declared = (("list_orders", {"customer_id": 2}), ("list_orders", {"customer_id": 4}))
    for calls in (failed, undeclared, declared):
        assert _verdict(runtime, COUNT, hedge, "Order 100 has 3 items.", calls) == \
            "fail: answer check (number) failed: the answer also states 2"
    assert _verdict(runtime, COUNT, "Order 100 has 3 items.", "Order 100 has 3 items.") == "pass"
    assert _verdict(runtime, COUNT, "Order 100 has 3 items.").startswith("fail")  # no key names order 100


def test_a_digit_only_text_key_is_text_not_a_second_number(runtime: Any) -> None:
    assert _verdict(runtime, COUNT, "There are 3 copies of 9786517269898.") == "pass"
    assert _verdict(runtime, COUNT, "There are 3 copies of 9786517269899.").endswith("also states 9786517269899")


def test_the_wrong_value_perturbs_the_checked_number_not_the_last_one() -> None:
    task = _task({"kind": "answer", "mode": "number", "value": "1193.51", "decimals": 2},
                 "Done: $1193.51 will be refunded to paypal_3473552.")
    assert task.answer is not None
    assert perturb_answer(task.answer, task) == "Done: $1193.52 will be refunded to paypal_3473552."
    text = _task({"kind": "answer", "mode": "contains", "value": "W8704143"}, "Your order #W8704143 is shipped.")
    assert text.answer is not None and perturb_answer(text.answer, text) == "Your order #unknown is shipped."


def test_off_by_one_moves_text_keys_with_digits_as_well_as_integers(runtime: Any) -> None:
    assert [next_key(v) for v in ("#W8704143", "MER-LT-0069", "NW199", 50123, "KXTRAB", "9786517269898")] == \
        ["#W8704144", "MER-LT-0070", "NW200", 50124, "KXTRAB", "9786517269899"]
    task = _task(STATUS, "Order 100 is shipped.")
    run = ReferenceCalls((("find_customer_by_email", {"email": "ana12@example.com"}),), (False,))
    moved = off_by_one(CaseRun(runtime, task, run))
    assert moved is not None and moved.calls == (("find_customer_by_email", {"email": "ana13@example.com"}),)


def test_the_number_hedge_carries_its_neighbours_in_failed_calls(runtime: Any) -> None:
    task = _task(COUNT, "Order 100 has 3 items.")
    run = ReferenceCalls((("get_order", {"order_id": 100}),), (False,))
    attempt = number_hedge(CaseRun(runtime, task, run))
    assert attempt is not None and attempt.answer == "Order 100 has 3 items. Or perhaps 2 or 4."
    assert attempt.calls[1:] == (("get_order", {"order_id": 2}), ("get_order", {"order_id": 4}))


# ------------------------------------------------------------ on the example kits: the gate and scoring from outside


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_admitted_case_fails_the_negated_and_number_hedge_agents(example_kits: dict[str, Path],
                                                                      example: str) -> None:
    with open_kit(example_kits[example]) as kit:
        cases = kit.cases("train") + kit.cases("eval")
    for agent in ("negated", "number-hedge"):
        applied = [case.probes[agent] for case in cases if case.probes[agent] != "n/a"]
        assert applied and set(applied) == {"fail"}, (example, agent)


def _checked_values(task: Task) -> list[str]:
    return [str(task.answer if isinstance(c.value, Ref) else c.value) for c in task.vcode.checks
            if isinstance(c, AnswerCheck) and (c.mode == "number" or (c.mode == "contains" and c.field))]


def _with_answer(line: dict[str, Any], answer: str) -> dict[str, Any]:
    messages = [dict(m) for m in line["messages"]]
    messages[-1] = {"role": "assistant", "content": answer}
    return {"case_id": line["case_id"], "messages": messages}


SIBLINGS = ["I checked it: it is not {v}, and it never was {v}.", "{v}? No, it isn't {v}.",
            "It is no longer {v}.", "If our records are right, it is {v}.", "It may be {v}.",
            "I don't think it is {v}."]


@pytest.mark.parametrize("example", EXAMPLES)
def test_answers_that_deny_the_value_pass_no_held_out_case_scored_from_outside(
        example_kits: dict[str, Path], example: str, tmp_path: Path) -> None:
    """Kind 14 by its stated transformation, on this build's case ids: each held-out reference trajectory whose
    answer check is contains (with field) or number, its final answer replaced by a statement that denies the
    value; its siblings (other negations, conditional, hedged) likewise."""
    with open_kit(example_kits[example]) as kit:
        tasks = {case.case_id: case.task for case in kit.cases("eval")}
    lines = [line for line in reference_lines(example_kits[example]) if _checked_values(tasks[line["case_id"]])]
    assert lines
    for shape in SIBLINGS:
        denied = [_with_answer(line, " ".join(shape.format(v=v) for v in _checked_values(tasks[line["case_id"]])))
                  for line in lines]
        scored = score_trajectories(example_kits[example], denied, tmp_path / "denied.jsonl")
        assert scored["exit_code"] == 1 and scored["summary"]["passed"] == 0, (shape, scored["summary"])
        assert all("does not assert" in case["verdict"]["reason"] for case in scored["cases"])
    affirmed = [_with_answer(line, " ".join(f"It is {v}." for v in _checked_values(tasks[line["case_id"]])))
                for line in lines]
    control = score_trajectories(example_kits[example], affirmed, tmp_path / "affirmed.jsonl")
    assert control["summary"]["passed"] > 0  # the same shape stated affirmatively is not what fails


@pytest.mark.parametrize(("name", "example"), [("negated_retail.jsonl", "retail_desk"),
                                               ("negated_airline.jsonl", "airline_desk")])
def test_the_handed_negated_answers_pass_nothing(request: pytest.FixtureRequest, name: str, example: str,
                                                tmp_path: Path) -> None:
    folder = handed_evidence("14-negated-answer-passes")
    if folder is None:
        pytest.skip("the handed evidence is not on this machine")
    lines = [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines()]
    # the airline evidence was recorded on the airline world at its first size (its case ids are that kit's)
    kit_path = (request.getfixturevalue("airline_first_kit") if example == "airline_desk"
                else request.getfixturevalue("example_kits")[example])
    with open_kit(kit_path) as kit:
        known = {case.case_id for case in kit.cases("eval")}
    lines = [line for line in lines if line["case_id"] in known]  # ids minting still gives (the rest: by transform)
    assert lines
    scored = score_trajectories(kit_path, lines, tmp_path / name)
    assert scored["exit_code"] == 1 and scored["summary"]["passed"] == 0, scored["summary"]
