"""Failed held-out episodes sorted by kind: each kind made by changing a reference trajectory one way, and
scored by the real replay and verifier on the retail example."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from blobkit.adversaries import trajectories
from trainers.evaluation import EpisodeResult, EvalSummary, replay_trajectory
from trainers.failure_kinds import FailureKinds, count_failures, failure_kind
from world_format.kit import Kit, KitCase
from world_format.runtime import WorldRuntime
from world_format.vcode import Verdict


@pytest.fixture(scope="module")
def replayed(retail_kit: Kit) -> Iterator[tuple[WorldRuntime, dict[str, KitCase], list[dict[str, Any]]]]:
    runtime = retail_kit.world().runtime()
    try:
        yield (runtime, {case.case_id: case for case in retail_kit.cases("eval")},
               list(trajectories(retail_kit, "reference", ("eval",))))
    finally:
        runtime.close()


def _line(lines: list[dict[str, Any]], cases: dict[str, KitCase], template: str) -> dict[str, Any]:
    return next(line for line in lines if cases[line["case_id"]].template == template)


def _calls(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")]


def _kind(replayed: Any, line: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[str | None, EpisodeResult]:
    runtime, cases, _ = replayed
    result = replay_trajectory(runtime, cases[line["case_id"]], messages)
    return failure_kind(result), result


def test_the_reference_trajectories_fail_in_no_kind(replayed: Any) -> None:
    runtime, cases, lines = replayed
    results = [replay_trajectory(runtime, cases[line["case_id"]], line["messages"]) for line in lines]
    assert all(r.passed for r in results) and count_failures(results) == FailureKinds(**dict.fromkeys(
        FailureKinds.model_fields, 0))
    assert all(r.reference == tuple(step.tool for step in cases[r.case_id].task.reference) for r in results)


def test_an_answer_without_the_checked_value_and_a_missing_answer(replayed: Any) -> None:
    line = _line(replayed[2], replayed[1], "aggregate_total")
    messages = copy.deepcopy(line["messages"])
    messages[-1]["content"] = "Your order is all in order."
    assert _kind(replayed, line, messages)[0] == "answer_missing_value"
    assert _kind(replayed, line, line["messages"][:-1])[0] == "turn_limit"


def test_a_dropped_call_is_wrong_calls_and_a_changed_identifier_is_wrong_arguments(replayed: Any) -> None:
    line = _line(replayed[2], replayed[1], "aggregate_total")
    messages = copy.deepcopy(line["messages"])
    calculation, last = _calls(messages)[-1], _calls(messages)[-2]  # the sum's calculate call, the list before it
    assert messages[calculation]["tool_calls"][0]["function"]["name"] == "calculate"
    without_calculator = messages[:calculation] + messages[calculation + 2:]
    assert _kind(replayed, line, without_calculator)[1].passed  # the verifier does not require the calculator
    dropped = messages[:last] + messages[last + 2:]
    kind, result = _kind(replayed, line, dropped)
    assert kind == "wrong_calls" and len(result.trace) == len(result.reference) - 1
    call = messages[last]["tool_calls"][0]["function"]
    arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else dict(call["arguments"])
    arguments["order_id"] += 1  # an order number copied one digit off: another customer's order
    call["arguments"] = json.dumps(arguments) if isinstance(call["arguments"], str) else arguments
    kind, result = _kind(replayed, line, messages)
    assert kind == "wrong_arguments" and [e.tool for e in result.trace] == list(result.reference), result.verdict


def test_skipping_the_identification_is_a_procedure_failure(replayed: Any) -> None:
    line = _line(replayed[2], replayed[1], "aggregate_total")
    messages = copy.deepcopy(line["messages"])
    first = _calls(messages)[0]
    kind, result = _kind(replayed, line, messages[:first] + messages[first + 2:])
    assert kind == "procedure" and result.verdict.reason.startswith("procedure:"), result.verdict


def test_a_verifier_error_and_an_answer_that_also_states_another_value() -> None:
    base = EpisodeResult("c", "t", "read", Verdict("error", "verifier error: x"), "a", 1, 0, (), (), "e", ())
    assert failure_kind(base) == "verifier_error"
    other = dataclasses.replace(base, verdict=Verdict("fail", "answer check (number) failed: the answer also "
                                                               "states 7"))
    assert failure_kind(other) == "answer_states_other"


def test_the_evaluation_record_counts_failures_that_sum_to_the_failed_cases(replayed: Any) -> None:
    runtime, cases, lines = replayed
    chosen = lines[:6]
    results = [replay_trajectory(runtime, cases[line["case_id"]], line["messages"][:-1] if i % 2 else
                                 line["messages"]) for i, line in enumerate(chosen)]
    record = EvalSummary(tuple(results)).record()
    assert record.failures is not None
    assert sum(record.failures.model_dump().values()) == record.cases - record.passed
    assert record.to_json()["failures"] == record.failures.to_json()


def test_the_benchmark_table_classifies_saved_case_records_as_the_evaluation_does(replayed: Any, tmp_path: Any) -> None:
    import importlib.util
    import sys

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("failure_table", ROOT / "benchmarks" / "failure_table.py")
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    sys.modules["failure_table"] = table  # its dataclasses look their module up
    spec.loader.exec_module(table)
    runtime, cases, lines = replayed
    results = [replay_trajectory(runtime, cases[line["case_id"]], line["messages"][:-1] if i % 3 == 0 else
                                 line["messages"]) for i, line in enumerate(lines[:9])]
    path = tmp_path / "eval_cases_sft.json"
    path.write_text(json.dumps([r.to_json() for r in results]), encoding="utf-8")
    references = {c.case_id: tuple(s.tool for s in c.task.reference) for c in cases.values()}
    kinds, total, passed = table.saved_failures(path, references)
    assert (kinds, total, passed) == (count_failures(results), 9, sum(r.passed for r in results))
    assert kinds.turn_limit > 0
