"""Running a reference chain (or any scripted call list) inside an isolated episode."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from world_format.canonical import canonical_json, sha256_hex
from world_format.control import escape_json_text
from world_format.customer import Customer
from world_format.errors import ReplayError
from world_format.models import ArgRef, Step, Task, UserTurn
from world_format.runtime import Episode, ToolEvent
from world_format.vcode import json_pointer


def observation_text(observation: Any) -> str:
    """The exact text a model sees for an observation: canonical JSON (never a Python repr), with every ``<``
    escaped so data can never become chat control syntax (:mod:`world_format.control`)."""
    return escape_json_text(canonical_json(observation))


def observation_hash(observation: Any) -> str:
    """sha256 of the observation text."""
    return sha256_hex(observation_text(observation).encode("utf-8"))


def _resolve(name: str, value: Any, observations: Sequence[Any]) -> Any:
    if isinstance(value, ArgRef):
        if value.from_step >= len(observations):
            raise ReplayError(f"argument {name} refers to step {value.from_step}, which has not run")
        try:
            return json_pointer(observations[value.from_step], value.pointer)
        except KeyError:
            raise ReplayError(f"argument {name}: {value.pointer} is not in step {value.from_step}'s result") from None
    if isinstance(value, list):
        return [_resolve(name, item, observations) for item in value]
    if isinstance(value, dict):
        return {key: _resolve(name, item, observations) for key, item in value.items()}
    return value


def resolve_arguments(step: Step, observations: Sequence[Any]) -> dict[str, Any]:
    """Literal arguments plus values threaded from earlier observations (also inside lists and objects)."""
    return {name: _resolve(name, value, observations) for name, value in step.arguments.items()}


def threaded(value: Any) -> bool:
    """Whether an argument holds a value threaded from an earlier step, at any depth."""
    if isinstance(value, ArgRef):
        return True
    if isinstance(value, list):
        return any(threaded(item) for item in value)
    if isinstance(value, dict):
        return any(threaded(item) for item in value.values())
    return False


@dataclass(frozen=True)
class ChainRun:
    """What running a chain produced."""

    events: tuple[ToolEvent, ...]
    clean: bool
    problem: str = ""


def interleaved(calls: int, turns_at: Sequence[int]) -> Iterator[tuple[Literal["call", "turn"], int]]:
    """The conversation order of ``calls`` tool calls and the scripted user turns: ``("turn", t)`` comes just
    before ``("call", turns_at[t])``, and turns at or past the last call come after it."""
    turn = 0
    for index in range(calls):
        while turn < len(turns_at) and turns_at[turn] <= index:
            yield "turn", turn
            turn += 1
        yield "call", index
    for rest in range(turn, len(turns_at)):
        yield "turn", rest


def run_chain(episode: Episode, steps: Sequence[Step], turns: Sequence[UserTurn] = ()) -> ChainRun:
    """Execute steps in order, asking each scripted turn's question (its ``assistant`` wording) before step
    ``after_step`` (the rest at the end) of the scripted customer (:mod:`world_format.customer`), and recording a
    step's ``say`` as a remark before its call (so the verdict sees what the replayed row shows); ``clean`` is
    false when a step errs unexpectedly (or fails to err) or the customer does not take a question as the one its
    reply answers."""
    observations: list[Any] = []
    problem = ""
    customer = Customer(episode, turns)
    for kind, index in interleaved(len(steps), [turn.after_step for turn in turns]):
        if kind == "turn":
            customer.reply(turns[index].assistant)
            said = episode.said[-1]
            if not said.accepted and not problem:
                problem = f"turn {index}: the customer does not take the question as a request to confirm: " \
                          f"{said.problem}"
            continue
        step = steps[index]
        try:
            arguments = resolve_arguments(step, observations)
        except ReplayError as exc:
            return ChainRun(tuple(episode.trace), False, f"step {index}: {exc}")
        if step.say:  # said beside the call, as an agent's text before its calls is recorded (a remark)
            episode.say(step.say, "remark")
        event = episode.call(step.tool, arguments)
        observations.append(event.observation)
        if event.error != step.expect_error and not problem:
            expected = "an error" if step.expect_error else "success"
            problem = f"step {index} ({step.tool}) expected {expected}, got {observation_text(event.observation)[:120]}"
    return ChainRun(tuple(episode.trace), not problem, problem)


TEMPLATED_COMPLETION = "I have completed your request."


def final_answer(task: Task) -> tuple[str, str]:
    """The final answer a reference run gives, and where it came from."""
    if task.answer is not None:
        return task.answer, "answer_key"
    return TEMPLATED_COMPLETION, "templated_completion"
