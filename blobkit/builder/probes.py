"""Probes: the wrong agents every case must fail, each a scripted attempt built from the case's reference run.

An :class:`Attempt` is what an agent does: the tool calls it makes, in order, and its final answer.
The gate runs each probe's attempt on an isolated episode and the case's verifier must fail it; the
same attempts, written out as conversations, are the adversarial agents of ``blobkit eval``.

=================  ===========================================================================
probe              the attempt
=================  ===========================================================================
null               no call and no answer (a do-nothing agent)
shortcut           only the last successful write, with the answer key (skips the look-ups)
wrong_row          the reference chain of another case of the same task, with its answer key
wrong_value        the reference calls with the checked answer perturbed (or, when the answer is
                   not checked, the last write's first non-key argument perturbed)
off_by_one         the reference calls with every anchor-key integer argument plus one
read_only          the reference calls without their successful writes, with the answer key
hedged             the reference calls; the answer key plus a conflicting value ("… or X")
over_inclusive     the reference calls; the answer key plus every candidate value of the field
unconfirmed        (multi-turn tasks) the reference calls all made before the customer's turns
                   come: a write without waiting for the confirmation
skip_identify      the reference calls without the world's declared identification step (the
                   customer was never verified)
forbidden_write    the reference calls plus each write the verifier forbids (a ``tool_not_called``
                   check on a write tool: the refused write attempted anyway)
=================  ===========================================================================

The last three are the *policy-skip* probes: the reference chain with one of the world's declared procedures
(:class:`world_format.models.Procedures`, a tool's ``confirm``) skipped. A case whose verifier lets any of them
pass does not hold the agent to the policy, and is left out.

A probe that cannot differ from the reference on a case (no write to leave out, no integer key, no
checked answer) is *not applicable* there and is recorded as such, never as a pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from world_format.chain import interleaved
from world_format.models import AnswerCheck, Ref, Task, Tool, ToolNotCalledCheck, UserTurn, World
from world_format.runtime import WorldRuntime
from world_format.state import normalize_value
from world_format.values import normalize_text, to_decimal

Call = tuple[str, dict[str, Any]]
PROBES = ("null", "shortcut", "wrong_row", "wrong_value", "off_by_one", "read_only", "hedged", "over_inclusive",
          "unconfirmed", "skip_identify", "forbidden_write")
"""Every probe, in the order the gate runs them."""
MAX_LISTED_VALUES = 50
"""The over-inclusive answer lists at most this many candidate values of a field."""


@dataclass(frozen=True)
class Attempt:
    """A scripted trajectory: the calls an agent makes, in order, its final answer, and (a multi-turn task) how
    many calls it has made when each of the customer's scripted turns comes."""

    calls: tuple[Call, ...]
    answer: str | None
    turns_at: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReferenceCalls:
    """The reference chain as executed: resolved calls, which returned an error, and where the customer's turns
    came (calls made before each)."""

    calls: tuple[Call, ...]
    errors: tuple[bool, ...]
    turns_at: tuple[int, ...] = ()

    def placed(self, calls: tuple[Call, ...], answer: str | None) -> Attempt:
        """An attempt making ``calls`` with the customer's turns where the reference had them (or at the end)."""
        return Attempt(calls, answer, tuple(min(at, len(calls)) for at in self.turns_at))


def _is_write(world: World, tool: str) -> bool:
    declared: Tool | None = world.tool(tool)
    return declared is not None and declared.effect == "write"


def successful_writes(world: World, run: ReferenceCalls) -> list[int]:
    """Indexes of the reference calls that changed the state through a write tool."""
    return [i for i, ((tool, _), error) in enumerate(zip(run.calls, run.errors, strict=True))
            if not error and _is_write(world, tool)]


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


def answer_checks(task: Task) -> list[AnswerCheck]:
    """The task's answer checks."""
    return [check for check in task.vcode.checks if isinstance(check, AnswerCheck)]


def perturb_answer(answer: str, task: Task | None = None) -> str:
    """The answer with the value its verifier checks replaced by a wrong one (else its last number)."""
    check = next(iter(answer_checks(task)), None) if task else None
    value = getattr(check, "value", None)
    if check is not None and check.mode != "number" and isinstance(value, str) and value and value in answer:
        return answer.replace(value, "unknown" if value != "unknown" else "known")
    numbers = list(re.finditer(r"-?\d+(?:\.\d+)?", answer))
    if numbers:
        last = numbers[-1]
        wrong = str(perturb(float(last.group()) if "." in last.group() else int(last.group())))
        return answer[:last.start()] + wrong + answer[last.end():]
    return "Sorry, that request was not possible today."


def null(run: ReferenceCalls) -> Attempt:
    """Do nothing, say nothing."""
    return run.placed((), None)


def shortcut(world: World, task: Task, run: ReferenceCalls) -> Attempt:
    """Jump straight to the last write."""
    writes = successful_writes(world, run)
    return run.placed((run.calls[writes[-1]],) if writes else (), task.answer)


def wrong_row(distractor: Task, distractor_run: ReferenceCalls) -> Attempt:
    """Another case's chain and answer."""
    return distractor_run.placed(distractor_run.calls, distractor.answer)


def unconfirmed(task: Task, run: ReferenceCalls) -> Attempt | None:
    """Every reference call made before the customer's scripted turns come; None for a single-turn task."""
    if not task.turns:
        return None
    return Attempt(run.calls, task.answer, tuple(len(run.calls) for _ in run.turns_at))


def wrong_value(world: World, task: Task, run: ReferenceCalls) -> Attempt:
    """The right calls with the checked answer wrong, or (answer unchecked) the last write's argument wrong."""
    calls = [(tool, dict(args)) for tool, args in run.calls]
    if task.answer is not None and answer_checks(task):
        return run.placed(tuple(calls), perturb_answer(task.answer, task))
    writes = successful_writes(world, run)
    if calls:
        index = writes[-1] if writes else len(calls) - 1
        tool_name, arguments = calls[index]
        tool = world.tool(tool_name)
        properties = tool.parameters.get("properties", {}) if tool else {}
        key_params = set(tool.anchors) if tool else set()
        names = [n for n in arguments if n not in key_params] or list(arguments)
        if names:
            arguments[names[0]] = perturb(arguments[names[0]], properties.get(names[0]))
    return run.placed(tuple(calls), task.answer)


def off_by_one(world: World, task: Task, run: ReferenceCalls) -> Attempt | None:
    """Every integer argument that names an anchor row, plus one; None when no call has one."""
    changed, calls = False, []
    for tool_name, arguments in run.calls:
        tool = world.tool(tool_name)
        keys = set(tool.anchors) if tool else set()
        moved = {name: value + 1 if name in keys and type(normalize_value(value)) is int else value
                 for name, value in arguments.items()}
        changed = changed or moved != arguments
        calls.append((tool_name, moved))
    return run.placed(tuple(calls), task.answer) if changed else None


def _without(run: ReferenceCalls, left_out: set[int], answer: str | None) -> Attempt:
    """The reference calls but those at ``left_out``, the customer's turns kept where they came."""
    kept = [i for i in range(len(run.calls)) if i not in left_out]
    turns_at = tuple(sum(1 for i in kept if i < at) for at in run.turns_at)
    return Attempt(tuple(run.calls[i] for i in kept), answer, turns_at)


def read_only(world: World, task: Task, run: ReferenceCalls) -> Attempt | None:
    """The reference calls without their successful writes; None when there is no write to leave out."""
    writes = set(successful_writes(world, run))
    return _without(run, writes, task.answer) if writes else None


def skip_identify(world: World, task: Task, run: ReferenceCalls) -> Attempt | None:
    """The reference calls without the declared identification; None when the world declares none or the chain
    makes none."""
    tool = world.procedures.identify
    calls = {i for i, (name, _) in enumerate(run.calls) if name == tool}
    return _without(run, calls, task.answer) if tool is not None and calls else None


def _forbidden_call(world: World, task: Task, check: ToolNotCalledCheck) -> Call | None:
    """The call a ``tool_not_called`` check forbids: its arguments, the task's anchor key for a key parameter left
    out, and a declared value (default, enum, examples) for any other required one; None for a reference value."""
    tool = world.tool(check.tool)
    if tool is None or tool.effect != "write" or any(isinstance(v, Ref) for v in check.arguments.values()):
        return None
    arguments: dict[str, Any] = dict(check.arguments)
    properties = tool.parameters.get("properties", {})
    for name in tool.parameters.get("required", []):
        target = tool.anchors.get(name, "")
        prop = properties.get(name, {}) if isinstance(properties.get(name), dict) else {}
        if name in arguments:
            continue
        if target.split(".")[0] == task.anchor.table:
            key = task.anchor.key
            arguments[name] = key.get(target.split(".")[1]) if isinstance(key, dict) else key
        elif "default" in prop or prop.get("enum") or prop.get("examples"):
            arguments[name] = prop["default"] if "default" in prop else (prop.get("enum") or prop["examples"])[0]
    return check.tool, arguments


def forbidden_write(world: World, task: Task, run: ReferenceCalls) -> Attempt | None:
    """The reference calls, then each write the verifier forbids, with the answer key; None when it forbids none."""
    calls = [call for check in task.vcode.checks if isinstance(check, ToolNotCalledCheck)
             if (call := _forbidden_call(world, task, check)) is not None]
    return run.placed(run.calls + tuple(calls), task.answer) if calls else None


def _number_alternatives(value: Any) -> list[str]:
    expected = to_decimal(value)
    if expected is None:
        return []
    exponent = expected.as_tuple().exponent
    step = Decimal(1) if expected == expected.to_integral_value() or not isinstance(exponent, int) \
        else Decimal(1).scaleb(exponent)
    return [_plain(expected + step), _plain(expected - step)]


def _plain(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else format(value, "f")


def alternatives(runtime: WorldRuntime, check: AnswerCheck, value: Any) -> list[str]:
    """Values of the same kind as the checked one that a committed answer must not also state (sorted)."""
    if check.mode == "number":
        return _number_alternatives(value)
    right = normalize_text(str(value))
    found: set[str] = set()
    if check.field is not None:
        table, column = check.field.split(".", 1)
        found.update(runtime.field_values(table, column).every())
    found.update(normalize_text(other) for other in check.others)
    return sorted(text for text in found if text and text != right)


def _resolved_checks(task: Task) -> list[tuple[AnswerCheck, Any]]:
    """Answer checks whose value is known before the run (literals or the answer key)."""
    out = []
    for check in answer_checks(task):
        value = check.value
        if isinstance(value, Ref):
            if value.ref != "answer_key":
                continue
            value = task.answer
        out.append((check, value))
    return out


def hedged(runtime: WorldRuntime, task: Task, run: ReferenceCalls) -> Attempt | None:
    """The answer key plus one conflicting value per checked answer; None when the answer is not checked.

    A checked answer with no conflicting value to name (a ``contains`` check without ``field`` or
    ``others``) gets ``"…"``, which no committal check can reject: such a task fails this probe.
    """
    checks = _resolved_checks(task)
    if task.answer is None or not checks:
        return None
    extra = [(alternatives(runtime, check, value) or ["…"])[0] for check, value in checks]
    return run.placed(run.calls, f"{task.answer} Or perhaps: {'; '.join(extra)}.")


def over_inclusive(runtime: WorldRuntime, task: Task, run: ReferenceCalls) -> Attempt | None:
    """The answer key plus every candidate value of each checked answer; None when the answer is not checked."""
    checks = _resolved_checks(task)
    if task.answer is None or not checks:
        return None
    listed = [value for check, right in checks for value in alternatives(runtime, check, right)[:MAX_LISTED_VALUES]]
    return run.placed(run.calls, f"{task.answer} It could also be one of: {', '.join(listed) or '…'}.")


def attempt(name: str, runtime: WorldRuntime, task: Task, run: ReferenceCalls,
            distractor: tuple[Task, ReferenceCalls] | None) -> Attempt | None:
    """Probe ``name``'s attempt on this case (None: not applicable here)."""
    world = runtime.world
    if name == "null":
        return null(run)
    if name == "shortcut":
        return shortcut(world, task, run)
    if name == "wrong_row":
        return wrong_row(*distractor) if distractor is not None else None
    if name == "wrong_value":
        return wrong_value(world, task, run)
    if name == "off_by_one":
        return off_by_one(world, task, run)
    if name == "read_only":
        return read_only(world, task, run)
    if name == "hedged":
        return hedged(runtime, task, run)
    if name == "over_inclusive":
        return over_inclusive(runtime, task, run)
    if name == "unconfirmed":
        return unconfirmed(task, run)
    if name == "skip_identify":
        return skip_identify(world, task, run)
    if name == "forbidden_write":
        return forbidden_write(world, task, run)
    raise ValueError(f"unknown probe {name!r}")


def attempts(runtime: WorldRuntime, task: Task, run: ReferenceCalls,
             distractor: tuple[Task, ReferenceCalls] | None) -> dict[str, Attempt | None]:
    """Every probe's attempt on this case (None: not applicable here)."""
    return {name: attempt(name, runtime, task, run, distractor) for name in PROBES}


def as_messages(attempt: Attempt, prompt: Sequence[dict[str, Any]],
                turns: Sequence[UserTurn] = ()) -> list[dict[str, Any]]:
    """The attempt as a conversation in the kit's row format: one assistant turn per call, the scripted customer
    turns where the attempt puts them (each after an assistant turn asking for it), then the answer."""
    from world_format.conversation import Conversation

    conversation = Conversation.resume(list(prompt))
    for kind, index in interleaved(len(attempt.calls), attempt.turns_at[:len(turns)]):
        if kind == "turn":
            conversation.ask(turns[index])
        else:
            conversation.tool_calls([attempt.calls[index]])
    conversation.answer(attempt.answer or "")
    return conversation.messages
