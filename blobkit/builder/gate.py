"""The discrimination gate: a task is admitted only if its verifier tells right from wrong.

Every probe runs on an isolated episode of the seed. The reference chain must run clean
and pass; the null, shortcut, wrong-row and wrong-value probes must all *fail* (an
``error`` verdict is a rejection too: a verifier that cannot judge cannot admit); removing
any successful write from the chain must change the final state hash; and replaying the
chain twice must give the same state and observations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from world_format.chain import observation_hash, run_chain
from world_format.models import ArgRef, Step, Task, Tool, World
from world_format.runtime import WorldRuntime
from world_format.vcode import Verdict, evaluate

Call = tuple[str, dict[str, Any]]
NEGATIVE_PROBES = ("null", "shortcut", "wrong_row", "wrong_value")


@dataclass(frozen=True)
class ProbeOutcome:
    """A verdict and the state hash the probe ended in."""

    verdict: Verdict
    state_hash: str

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"outcome": self.verdict.outcome, "reason": self.verdict.reason, "state_hash": self.state_hash}


def run_calls(runtime: WorldRuntime, task: Task, calls: Sequence[Call], answer: str | None) -> ProbeOutcome:
    """Execute literal calls, then judge them with the task's verifier."""
    with runtime.episode() as episode:
        for tool, arguments in calls:
            episode.call(tool, arguments)
        verdict = evaluate(task.vcode, episode, answer, task.answer)
        return ProbeOutcome(verdict, episode.state_hash())


@dataclass(frozen=True)
class ReferenceRun:
    """The reference chain as executed: resolved calls, observation hashes, verdict, state."""

    calls: tuple[Call, ...]
    errors: tuple[bool, ...]
    observation_hashes: tuple[str, ...]
    clean: bool
    problem: str
    outcome: ProbeOutcome


def run_reference(runtime: WorldRuntime, task: Task, steps: Sequence[Step] | None = None) -> ReferenceRun:
    """Run (a variant of) the reference chain and judge it."""
    with runtime.episode() as episode:
        result = run_chain(episode, steps if steps is not None else task.reference)
        verdict = evaluate(task.vcode, episode, task.answer, task.answer)
        outcome = ProbeOutcome(verdict, episode.state_hash())
    return ReferenceRun(
        calls=tuple((event.tool, event.arguments) for event in result.events),
        errors=tuple(event.error for event in result.events),
        observation_hashes=tuple(observation_hash(event.observation) for event in result.events),
        clean=result.clean, problem=result.problem, outcome=outcome,
    )


def perturb(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """A plausible but wrong value of the same type."""
    options = (schema or {}).get("enum")
    if options and value in options and len(options) > 1:
        return options[(options.index(value) + 1) % len(options)]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + 1.5, 2)
    if isinstance(value, str):
        return value + "x"
    return "wrong"


def perturb_answer(answer: str, task: Task | None = None) -> str:
    """The answer with the value its verifier checks replaced by a wrong one (else its last number)."""
    check = next((c for c in task.vcode.checks if c.kind == "answer"), None) if task else None
    value = getattr(check, "value", None)
    if check is not None and check.mode != "number" and isinstance(value, str) and value and value in answer:
        return answer.replace(value, "unknown" if value != "unknown" else "known")
    numbers = list(re.finditer(r"-?\d+(?:\.\d+)?", answer))
    if numbers:
        last = numbers[-1]
        wrong = str(perturb(float(last.group()) if "." in last.group() else int(last.group())))
        return answer[:last.start()] + wrong + answer[last.end():]
    return "Sorry, that request was not possible today."


def _is_write(world: World, tool: str) -> bool:
    declared: Tool | None = world.tool(tool)
    return declared is not None and declared.effect == "write"


def _successful_writes(world: World, run: ReferenceRun) -> list[int]:
    return [i for i, ((tool, _), error) in enumerate(zip(run.calls, run.errors, strict=True))
            if not error and _is_write(world, tool)]


def _answer_checked(task: Task) -> bool:
    return any(check.kind == "answer" for check in task.vcode.checks)


def _wrong_value_calls(world: World, task: Task, run: ReferenceRun) -> tuple[list[Call], str | None]:
    calls = [(tool, dict(args)) for tool, args in run.calls]
    if task.answer is not None and _answer_checked(task):
        return calls, perturb_answer(task.answer, task)
    writes = _successful_writes(world, run)
    index = writes[-1] if writes else len(calls) - 1
    tool_name, arguments = calls[index]
    tool = world.tool(tool_name)
    properties = tool.parameters.get("properties", {}) if tool else {}
    key_params = set(tool.anchors) if tool else set()
    names = [n for n in arguments if n not in key_params] or list(arguments)
    if names:
        arguments[names[0]] = perturb(arguments[names[0]], properties.get(names[0]))
    return calls, task.answer


def _shortcut_calls(world: World, run: ReferenceRun) -> list[Call]:
    writes = _successful_writes(world, run)
    return [run.calls[writes[-1]]] if writes else []


def gate_task(runtime: WorldRuntime, task: Task, distractor: Task | None) -> dict[str, Any]:
    """Run every probe; return the probe matrix with ``admitted`` and the first rejection reason."""
    world = runtime.world
    reference = run_reference(runtime, task)
    matrix: dict[str, Any] = {"reference": reference.outcome.to_json()}
    reasons: list[str] = []
    if not reference.clean:
        reasons.append(f"reference: {reference.problem}")
    if not reference.outcome.verdict.passed:
        verdict = reference.outcome.verdict
        reasons.append(f"reference: verifier says {verdict.outcome}: {verdict.reason}")
    probes: dict[str, ProbeOutcome] = {
        "null": run_calls(runtime, task, [], None),
        "shortcut": run_calls(runtime, task, _shortcut_calls(world, reference), task.answer),
    }
    if distractor is not None:
        distractor_run = run_reference(runtime, distractor)
        probes["wrong_row"] = run_calls(runtime, task, distractor_run.calls, distractor.answer)
    calls, answer = _wrong_value_calls(world, task, reference)
    probes["wrong_value"] = run_calls(runtime, task, calls, answer)
    for name in NEGATIVE_PROBES:
        if name not in probes:
            matrix[name] = None
            reasons.append(f"{name}: no distractor row of the same shape to probe with")
            continue
        matrix[name] = probes[name].to_json()
        if probes[name].verdict.outcome != "fail":
            reasons.append(f"{name}: expected fail, verifier said {probes[name].verdict.outcome}")
    removal = []
    for index in _successful_writes(world, reference):
        steps = [step for i, step in enumerate(task.reference) if i != index]
        without = run_reference(runtime, task, _renumber(steps, index))
        changed = without.outcome.state_hash != reference.outcome.state_hash
        removal.append({"step": index, "state_hash": without.outcome.state_hash, "changed": changed})
        if not changed:
            reasons.append(f"write_removal: removing step {index} leaves the final state unchanged")
    matrix["write_removal"] = removal
    again = run_reference(runtime, task)
    deterministic = (again.outcome.state_hash == reference.outcome.state_hash
                     and again.observation_hashes == reference.observation_hashes)
    matrix["deterministic"] = deterministic
    if not deterministic:
        reasons.append("replay: the reference chain gives different results on a second run")
    matrix["admitted"] = not reasons
    matrix["rejected_because"] = reasons
    return matrix


def _renumber(steps: list[Step], removed: int) -> list[Step]:
    """Steps after removing one: $from references past it shift down; references to it stay broken."""
    renumbered = []
    for step in steps:
        arguments: dict[str, Any] = {}
        for name, value in step.arguments.items():
            if isinstance(value, ArgRef) and value.from_step > removed:
                value = value.model_copy(update={"from_step": value.from_step - 1})
            elif isinstance(value, ArgRef) and value.from_step == removed:
                value = value.model_copy(update={"from_step": 10_000})
            arguments[name] = value
        renumbered.append(step.model_copy(update={"arguments": arguments}))
    return renumbered
