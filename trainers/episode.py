"""Held-out evaluation as real multi-turn episodes: the model calls tools, the world answers, VCode judges."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from blobkit.chain import observation_text
from world_format.models import Task
from world_format.runtime import WorldRuntime
from world_format.vcode import evaluate

from .chat import parse_assistant_output
from .generation import generate_turn

Generate = Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]


def run_episode(generate: Generate, runtime: WorldRuntime, case: dict[str, Any], max_turns: int) -> dict[str, Any]:
    """Run one held-out case on an isolated copy of the seed; return the trace and the verdict."""
    task = Task.model_validate(case["task"])
    messages: list[dict[str, Any]] = [dict(m) for m in case["prompt"]["messages"]]
    tools = case["prompt"]["tools"]
    parse_failures, answer, turns = 0, None, 0
    with runtime.episode() as episode:
        for turn in range(1, max_turns + 1):
            turns = turn
            parsed = parse_assistant_output(generate(messages, tools))
            if parsed.parse_errors:
                parse_failures += len(parsed.parse_errors)
                messages.append({"role": "assistant", "content": parsed.content})
                messages.append({"role": "tool", "name": "parse_error",
                                 "content": observation_text({"error": "; ".join(parsed.parse_errors)})})
                continue
            if not parsed.tool_calls:
                answer = parsed.content
                messages.append({"role": "assistant", "content": answer})
                break
            calls = [{"type": "function", "function": call} for call in parsed.tool_calls]
            messages.append({"role": "assistant", "content": parsed.content, "tool_calls": calls})
            for call in parsed.tool_calls:
                event = episode.call(call["name"], call["arguments"])
                messages.append({"role": "tool", "name": call["name"], "content": observation_text(event.observation)})
        verdict = evaluate(task.vcode, episode, answer, task.answer)
        trace = [event.to_json() for event in episode.trace]
    return {"case_id": case["case_id"], "template": case["template"], "verdict": verdict.to_json(),
            "passed": verdict.passed, "answer": answer, "turns": turns, "parse_failures": parse_failures,
            "trace": trace}


def model_generator(model: Any, tokenizer: Any, max_new_tokens: int) -> Generate:
    """A greedy generator over a loaded model."""
    def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return generate_turn(model, tokenizer, messages, tools, max_new_tokens=max_new_tokens)
    return generate


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass rate, coverage, per-template rates, parse failures, refusal errors."""
    by_template: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        by_template[result["template"]].append(result["passed"])
    failed = Counter(r["template"] for r in results if not r["passed"])
    false_rejection = sum(1 for r in results if r["template"] == "write_ok" and not r["passed"]
                          and "can't" in (r["answer"] or "").lower())
    return {
        "pass_rate": round(sum(r["passed"] for r in results) / len(results), 4) if results else 0.0,
        "cases": len(results),
        "passed": sum(r["passed"] for r in results),
        "per_template": {t: round(sum(v) / len(v), 4) for t, v in sorted(by_template.items())},
        "tool_call_parse_failures": sum(r["parse_failures"] for r in results),
        "refusal": {"false_acceptance": failed.get("write_refused", 0), "false_rejection": false_rejection},
        "verifier_errors": sum(1 for r in results if r["verdict"]["outcome"] == "error"),
        "model_calls": sum(r["turns"] for r in results),
    }


def evaluate_cases(generate: Generate, runtime: WorldRuntime, cases: list[dict[str, Any]], max_turns: int,
                   progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run every case; return (summary, per-case results)."""
    results = []
    for index, case in enumerate(cases):
        if progress:
            progress(index, len(cases))
        results.append(run_episode(generate, runtime, case, max_turns))
    return summarize(results), results
