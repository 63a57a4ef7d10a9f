"""A score is a claim about the kit's distinct cases (issue 24 item 1), and model output is read as it was meant in
every shape a client sends (item 8).

The handed folder (shared/cases/evidence2/01-eval-duplicate-case-ids) is tested in test_evidence2.py; its siblings
are made here in code: repeats on the training side, the same conversation with its keys reordered, unknown ids, a
file of one side only, a held-out evaluation's summary and a company job's results.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from blobkit.adversaries import trajectories
from blobkit.cli import app
from blobkit.company.results import job_results
from trainers.errors import ScoreError, TrajectoryError
from trainers.eval_record import LeftOut
from trainers.evaluation import EpisodeResult, EvalSummary, replay_trajectory, run_episodes
from trainers.fit import FitResult
from trainers.formats import FORMATS
from trainers.formats.llama3 import parse_llama3
from trainers.report import sft_report
from trainers.scoring import Scored, score_verdicts
from trainers.trajectories import read_trajectories, score_trajectories
from world_format.chain import final_answer, run_chain
from world_format.kit import Kit, open_kit
from world_format.vcode import Verdict


def _eval(kit: Path, path: Path, *flags: str) -> Any:
    return CliRunner().invoke(app, ["eval", "--kit", str(kit), "--trajectories", str(path), *flags])


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def retail(example_kits: dict[str, Path]) -> Path:
    """The retail example's default build: the kit the handed trajectory files were written for."""
    return example_kits["retail_desk"]


@pytest.fixture(scope="module")
def reference_lines(retail: Path) -> dict[str, list[dict[str, Any]]]:
    """The reference agent's trajectories of the retail kit, by side."""
    with open_kit(retail) as kit:
        return {side: list(trajectories(kit, "reference", (side,))) for side in ("train", "eval")}


# --------------------------------------------------------------------------- siblings, in code


def test_repeats_on_the_training_side_count_once_and_state_both_sides(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    train, held_out = reference_lines["train"], reference_lines["eval"]
    reordered = [{key: line[key] for key in reversed(list(line))} for line in train[:5]]  # same messages, new order
    path = _write(tmp_path / "both.jsonl", held_out + train + train[:5] + reordered)
    result = _eval(retail, path, "--json")
    summary = json.loads(result.stdout)["summary"]
    assert result.exit_code == 0, result.output
    assert summary["cases"] == len(held_out) + len(train) and summary["duplicates"] == 10
    assert summary["sides"]["train"]["covered"] == summary["sides"]["train"]["cases_in_kit"] == len(train)
    assert summary["side"] == "train+eval" and summary["partial"] is False


def test_a_file_of_training_cases_only_is_no_claim_about_the_held_out_set(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    result = _eval(retail, _write(tmp_path / "train.jsonl", reference_lines["train"]))
    assert result.exit_code == 1 and "partial" in result.output
    assert "held-out: 0 of 66 cases; training: " in result.output


def test_an_unknown_case_id_is_an_error_naming_its_line(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    lines = reference_lines["eval"][:3] + [{**reference_lines["eval"][3], "case_id": "c-0000000000000000"}]
    result = _eval(retail, _write(tmp_path / "unknown.jsonl", lines))
    assert isinstance(result.exception, ScoreError)
    assert "unknown.jsonl:4: the kit has no case 'c-0000000000000000'" in str(result.exception)


def test_a_trajectory_line_with_an_unknown_key_or_a_message_without_a_role_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match=r"x.jsonl:1: unknown key 'score'"):
        read_trajectories(_write(tmp_path / "x.jsonl", [{"case_id": "c", "messages": [], "score": 1}]))
    with pytest.raises(TrajectoryError, match=r"y.jsonl:2: /messages/0: each message is an object with a role"):
        read_trajectories(_write(tmp_path / "y.jsonl", [{"case_id": "c", "messages": []},
                                                        {"case_id": "c", "messages": [{"content": "hi"}]}]))


def test_score_verdicts_counts_distinct_cases_and_refuses_conflicts() -> None:
    universe: dict[str, Any] = {"a": "eval", "b": "eval", "t": "train"}
    same = [Scored("a", True, "e1", "k1", "f:1"), Scored("a", True, "e1", "k1", "f:2"),
            Scored("t", False, "e2", "k", "f:3")]
    score = score_verdicts(same, universe)
    assert (score.cases, score.passed, score.duplicates, score.partial, score.side) == (2, 1, 1, True, "train+eval")
    assert score.sides["eval"].covered == 1 and score.sides["train"].coverage == 1.0
    with pytest.raises(ScoreError, match="f:2: case a is already scored from f:1 with different messages"):
        score_verdicts([Scored("a", True, "e", "k1", "f:1"), Scored("a", True, "e", "k2", "f:2")], universe)
    with pytest.raises(ScoreError, match="judge is not deterministic"):
        score_verdicts([Scored("a", True, "e", "k1", "f:1"), Scored("a", False, "e", "k1", "f:2")], universe)
    with pytest.raises(ScoreError, match="f:1: the kit has no case 'z'"):
        score_verdicts([Scored("z", True, "e", "k", "f:1")], universe)


def test_a_held_out_evaluation_states_its_coverage_and_counts_a_repeated_case_once(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]]) -> None:
    with open_kit(retail) as kit:
        held_out = kit.cases("eval")
        cases = {case.case_id: case for case in held_out}
        runtime = kit.world().runtime()
        try:
            lines = reference_lines["eval"][:4]
            results = tuple(replay_trajectory(runtime, cases[line["case_id"]], line["messages"]) for line in lines)
        finally:
            runtime.close()
    universe = {case.case_id: case.side for case in held_out}
    record = EvalSummary(results + results[:1], universe).to_json()
    assert (record["cases"], record["passed"], record["duplicates"]) == (4, 4, 1)
    assert (record["side"], record["cases_in_side"], record["coverage"]) == ("eval", 66, 0.0606)
    assert record["partial"] is True
    conflicting = EvalSummary((results[0], dataclasses.replace(results[0], messages=results[1].messages)))
    with pytest.raises(ScoreError, match="episode 1: case .* is already scored from episode 0 with different messages"):
        conflicting.to_json()


def test_a_company_result_says_partial_and_why(tmp_path: Path) -> None:
    summary = EvalSummary(tuple(EpisodeResult(f"c{i}", "t", "read", Verdict("pass" if i else "fail"), "answer", 1, 0,
                                              (), (), f"e{i}") for i in range(2)))
    report = sft_report(summary, summary, FitResult(tmp_path, "lora", {}, 1, 1.0, [], None), "0" * 64)
    left_out = LeftOut(untokenizable=0, cases={}, why="none")
    limited = report.model_copy(update={"eval_limit": 2, "left_out": left_out})
    held_out = job_results(True, limited, eval_cases=6).held_out
    assert held_out is not None and held_out.partial is True and held_out.partial_unexplained is None
    held_out = job_results(True, limited.model_copy(update={"eval_limit": None}), eval_cases=6).held_out
    assert held_out is not None
    assert held_out.partial_unexplained == "4 held-out cases were neither evaluated nor left out"


# --------------------------------------------------------------------------- item 8: model output in every shape


def _as_parts(line: dict[str, Any], shape: str) -> dict[str, Any]:
    messages = []
    for message in line["messages"]:
        if message["role"] == "assistant":
            message = dict(message)
            text = message.get("content") or ""
            if shape == "parts":
                message["content"] = [{"type": "text", "text": text[:3]}, {"type": "text", "text": text[3:]}]
            elif shape == "wire":
                message["content"] = text or None
                message["tool_calls"] = [{**call, "function": {**call["function"], "arguments": json.dumps(
                    call["function"]["arguments"])}} for call in message.get("tool_calls") or []] or None
                if message["tool_calls"] is None:
                    del message["tool_calls"]
        messages.append(message)
    return {**line, "messages": messages}


@pytest.mark.parametrize("shape", ["parts", "wire"])
def test_openai_content_parts_and_wire_arguments_score_as_the_plain_form(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]], shape: str) -> None:
    lines = [_as_parts(line, shape) for line in reference_lines["eval"]]
    with open_kit(retail) as kit:
        scored = score_trajectories(kit, _lines(lines), "x.jsonl")
    assert (scored.score.cases, scored.score.passed, scored.score.partial) == (66, 66, False)
    assert sum(r.parse_failures for r in scored.results) == 0


def _lines(lines: list[dict[str, Any]]) -> list[Any]:
    from trainers.trajectories import TrajectoryLine

    return [TrajectoryLine(number, line["case_id"], line["messages"], None) for number, line in enumerate(lines, 1)]


@pytest.mark.parametrize("content", [[{"type": "image_url", "image_url": {"url": "x"}}], 42, {"text": "x"},
                                     [{"type": "text", "text": 7}]])
def test_unreadable_content_is_a_counted_parse_failure_never_an_empty_answer(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]], content: Any) -> None:
    with open_kit(retail) as kit:
        case = next(c for c in kit.cases("eval") if c.template == "lookup_field")  # its answer is checked
        line = next(x for x in reference_lines["eval"] if x["case_id"] == case.case_id)
        messages = [dict(m) for m in line["messages"]]
        messages[-1]["content"] = content  # the final answer
        runtime = kit.world().runtime()
        try:
            result = replay_trajectory(runtime, case, messages)
        finally:
            runtime.close()
    assert result.parse_failures == 1 and result.answer is None and not result.passed


def test_a_refusal_part_and_a_legacy_function_call_are_read_as_sent(
        retail: Path, reference_lines: dict[str, list[dict[str, Any]]]) -> None:
    with open_kit(retail) as kit:
        cases = {c.case_id: c for c in kit.cases("eval")}
        line = next(x for x in reference_lines["eval"] if sum(1 for m in x["messages"] if m.get("tool_calls")) ==
                    sum(len(m.get("tool_calls") or []) for m in x["messages"]))  # one call per turn
        messages = []
        for message in line["messages"]:
            if message.get("tool_calls"):
                call = message["tool_calls"][0]["function"]
                message = {"role": "assistant", "content": None,
                           "function_call": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            elif message["role"] == "assistant":
                message = {"role": "assistant", "content": [{"type": "refusal", "refusal": message["content"]}]}
            messages.append(message)
        runtime = kit.world().runtime()
        try:
            result = replay_trajectory(runtime, cases[line["case_id"]], messages)
        finally:
            runtime.close()
    assert result.passed and result.parse_failures == 0, result.verdict


def test_a_llama3_final_answer_in_json_is_an_answer_not_a_failed_call() -> None:
    answer = '{"order_id": 7, "status": "shipped"}'
    assert parse_llama3(answer + "<|eot_id|>").content == answer
    assert parse_llama3('{"name": "Ann Lee", "email": "ann@example.com"}').is_final
    assert parse_llama3('{"name": "get_order", "parameters": {"order_id": 7}}').tool_calls == [
        {"name": "get_order", "arguments": {"order_id": 7}}]
    assert parse_llama3('{"name": "get_order", "parameters": 7}').parse_errors
    assert parse_llama3("{not json").parse_errors  # unreadable: counted, never an empty answer


class _Scripted:
    """A policy that writes each case's reference calls in Llama 3's format, then its answer key as JSON text."""

    tool_format = FORMATS["llama3"]

    def __init__(self, kit: Kit) -> None:
        self.kit = kit
        self.turns: dict[str, list[str]] = {}

    def plan(self, case: Any) -> list[str]:
        runtime = self.kit.world().runtime()
        try:
            with runtime.episode() as episode:
                events = run_chain(episode, case.task.reference, case.task.turns).events
        finally:
            runtime.close()
        calls = [json.dumps({"name": e.tool, "parameters": e.arguments}) + "<|eot_id|>" for e in events]
        return calls + [json.dumps({"answer": final_answer(case.task)[0]}) + "<|eot_id|>"]

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        key = messages[1]["content"]
        return self.turns[key].pop(0)


def test_an_episode_of_a_llama3_model_answering_in_json_is_judged_on_that_answer(retail: Path) -> None:
    with open_kit(retail) as kit:
        cases = [c for c in kit.cases("eval") if not c.task.turns and c.template == "lookup_field"][:4]
        policy = _Scripted(kit)
        for case in cases:
            assert case.prompt is not None
            policy.turns[case.prompt.messages[1]["content"]] = policy.plan(case)
        runtime = kit.world().runtime()
        try:
            results = run_episodes(policy, runtime, cases, max_turns=8)
        finally:
            runtime.close()
    assert cases and all(r.answer is not None and r.answer.startswith('{"answer"') for r in results)
    assert all(r.parse_failures == 0 for r in results) and all(r.passed for r in results), [r.verdict for r in results]
