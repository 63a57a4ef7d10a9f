"""The discrimination gate: a case is admitted only if its verifier tells right from wrong.

Every probe runs on an isolated episode of the seed. The reference chain must run clean and
pass; every applicable wrong agent of the registry (:mod:`blobkit.builder.agents`) must *fail* (an
``error`` verdict is a rejection too: a verifier that cannot judge cannot admit); removing any successful write from
the chain must change the final state hash. The gate runs on every case (each minted instance
and each family row), and on a task's prototype it also replays the chain a second time, which
must give the same state and observations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from world_format.chain import final_answer, interleaved, observation_hash, run_chain
from world_format.control import control_strings_in
from world_format.conversation import Conversation
from world_format.customer import Customer
from world_format.evidence import Evidence, KeySpace, key_space, ungrounded_arguments
from world_format.judge import judge, violations
from world_format.models import ArgRef, Step, Task, UserTurn
from world_format.procedure_check import ProcedureChecker
from world_format.result_columns import sql_reads
from world_format.runtime import WorldRuntime
from world_format.vcode import Verdict, evaluate

from .agents import BY_NAME, NAMES, attempts
from .probes import Attempt, ReferenceCalls, answer_checks, successful_writes

NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class ProbeOutcome:
    """A verdict and the state hash the probe ended in."""

    verdict: Verdict
    state_hash: str

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"outcome": self.verdict.outcome, "reason": self.verdict.reason, "state_hash": self.state_hash}


def play(runtime: WorldRuntime, task: Task, attempt: Attempt,
         conversation: Conversation | None = None) -> ProbeOutcome:
    """Execute an attempt's literal calls, turning to the scripted customer (:mod:`world_format.customer`) where
    the attempt does, then judge the episode (:func:`world_format.judge.judge`). An answer given while the customer
    still has a scripted turn to give is one more turn to the customer, as in an episode, and no final answer.
    With ``conversation``, every turn is recorded there (calls, observations, questions, replies, the answer)."""
    with runtime.episode() as episode:
        customer = Customer(episode, task.turns)
        for kind, index in interleaved(len(attempt.calls), attempt.turns_at):
            if kind == "turn":
                asked = attempt.question(index, customer.pending[0] if customer.pending else None)
                reply = customer.reply(asked)
                if conversation is not None:
                    conversation.answer(asked)
                    if reply is not None:
                        conversation.user(reply)
                continue
            event = episode.call(*attempt.calls[index])
            if conversation is not None:
                [ident] = conversation.tool_calls([(event.tool, event.arguments)])
                conversation.observation(ident, event.tool, event.observation)
        answer = attempt.answer
        if answer is not None and not customer.done:
            customer.reply(answer)
            answer = None
        if conversation is not None:
            conversation.answer(attempt.answer or "")
        return ProbeOutcome(judge(task, episode, answer), episode.state_hash())


def run_attempt(runtime: WorldRuntime, task: Task, attempt: Attempt) -> ProbeOutcome:
    """Execute and judge an attempt (:func:`play`)."""
    return play(runtime, task, attempt)


def attempt_messages(runtime: WorldRuntime, task: Task, attempt: Attempt,
                     prompt: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempt as the conversation it makes, in the kit's row format, after ``prompt`` (:func:`play`)."""
    conversation = Conversation.resume(list(prompt))
    play(runtime, task, attempt, conversation)
    return conversation.messages


KEY_SPACE_MEMO = "gate.key_space"
"""Where :func:`_key_space` keeps the world's key space in :attr:`WorldRuntime.memo`."""


@dataclass(frozen=True)
class ReferenceRun:
    """The reference chain as executed: resolved calls, observation hashes, verdict, state."""

    calls: ReferenceCalls
    observation_hashes: tuple[str, ...]
    clean: bool
    problem: str
    outcome: ProbeOutcome
    observations: tuple[Any, ...] = ()
    violations: tuple[tuple[str, str], ...] = ()
    """The procedure violations of the run (:mod:`world_format.procedure_check`), in order."""


def run_reference(runtime: WorldRuntime, task: Task, steps: Sequence[Step] | None = None,
                  turns: Sequence[UserTurn] | None = None) -> ReferenceRun:
    """Run (a variant of) the reference chain and judge it with the answer a reference run gives."""
    answer, _ = final_answer(task)
    turns = task.turns if turns is None else turns
    with runtime.episode() as episode:
        result = run_chain(episode, steps if steps is not None else task.reference, turns)
        verdict = evaluate(task.vcode, episode, answer, task.answer)
        outcome = ProbeOutcome(verdict, episode.state_hash())
        found = tuple(violations(episode, answer, task.instruction))
    calls = ReferenceCalls(tuple((event.tool, event.arguments) for event in result.events),
                           tuple(event.error for event in result.events), tuple(episode.turns))
    return ReferenceRun(calls, tuple(observation_hash(event.observation) for event in result.events),
                        result.clean, result.problem, outcome, tuple(event.observation for event in result.events),
                        found)


def _control_reasons(task: Task) -> list[str]:
    """A case whose natural-language text carries a chat control string is left out (see world_format.control)."""
    answer, _ = final_answer(task)
    texts = [("instruction", task.instruction), ("answer key", answer)]
    texts += [("checked answer", str(c.value)) for c in answer_checks(task) if isinstance(c.value, str)]
    texts += [(f"scripted turn {i}", text) for i, turn in enumerate(task.turns) for text in (turn.assistant, turn.user)]
    for what, text in texts:
        found = control_strings_in(text)
        if found:
            return [f"control_string: the {what} carries {found[0]!r}, which a chat template would read as control "
                    "syntax"]
    return []


def _reference_reasons(reference: ReferenceRun) -> list[str]:
    reasons = []
    if not reference.clean:
        reasons.append(f"reference: {reference.problem}")
    if not reference.outcome.verdict.passed:
        verdict = reference.outcome.verdict
        reasons.append(f"reference: verifier says {verdict.outcome}: {verdict.reason}")
    return reasons


def _key_space(runtime: WorldRuntime) -> KeySpace:
    """The runtime's world's :class:`~world_format.evidence.KeySpace`, made once per runtime and its forks."""
    found = runtime.memo.get(KEY_SPACE_MEMO)
    if not isinstance(found, KeySpace):
        found = runtime.memo[KEY_SPACE_MEMO] = key_space(runtime.world, sql_reads(runtime).sources)
    return found


def _grounding_reasons(runtime: WorldRuntime, task: Task, reference: ReferenceRun) -> list[str]:
    """A reference call that names a row before the customer or an observation gave it teaches an agent to guess:
    each row-naming argument must be in the evidence (:mod:`world_format.evidence`) of the instruction, the
    customer's turns before the call and the observations of the calls before it."""
    keys, evidence = _key_space(runtime), Evidence()
    evidence.add_text(task.instruction, phrases=True)
    for index, (tool, arguments) in enumerate(reference.calls.calls):
        for turn in task.turns:
            if turn.after_step == index:
                evidence.add_text(turn.user, phrases=True)
        missing = ungrounded_arguments(evidence, keys.parameters.get(tool, {}), arguments)
        if missing:
            return [f"grounding: step {index} ({tool}) gives {', '.join(missing)}, which neither the customer nor "
                    "an earlier observation stated: an agent could only guess it"]
        if index < len(reference.observations):
            evidence.add_observation(reference.observations[index], keys.sources.get(tool, {}))
    return []


def _write_removal(runtime: WorldRuntime, task: Task, reference: ReferenceRun) -> tuple[list[dict[str, Any]],
                                                                                          list[str]]:
    removal, reasons = [], []
    for index in successful_writes(runtime.world, reference.calls):
        steps = [step for i, step in enumerate(task.reference) if i != index]
        turns = [t.model_copy(update={"after_step": t.after_step - (t.after_step > index)}) for t in task.turns]
        without = run_reference(runtime, task, _renumber(steps, index), turns)
        changed = without.outcome.state_hash != reference.outcome.state_hash
        removal.append({"step": index, "state_hash": without.outcome.state_hash, "changed": changed})
        if not changed:
            reasons.append(f"write_removal: removing step {index} leaves the final state unchanged")
    return removal, reasons


def _procedure_reasons(checker: ProcedureChecker, reference: ReferenceRun, matrix: dict[str, Any]) -> list[str]:
    """The reference run held to the world's declared procedures (recorded only where the world declares some)."""
    if not checker.declared:
        return []
    matrix["procedures"] = [f"{kind}: {detail}" for kind, detail in reference.violations]
    return [f"procedure: {text}" for text in matrix["procedures"]]


def gate_task(runtime: WorldRuntime, task: Task, distractor: Task | None, *, checker: ProcedureChecker,
              replay: bool = True) -> dict[str, Any]:
    """Run every probe on one case; return its probe matrix with ``admitted`` and the reasons it is not.

    A probe that is not applicable to the case is recorded as None; the wrong-row probe is
    required (a case without another row of the same shape cannot be told from it). ``replay``
    adds the second reference run that checks the chain is deterministic. ``checker`` holds the
    reference run to the world's declared procedures: a reference that breaks one is no case.
    """
    reference = run_reference(runtime, task)
    matrix: dict[str, Any] = {"reference": reference.outcome.to_json()}
    reasons = (_control_reasons(task) + _reference_reasons(reference) + _procedure_reasons(checker, reference, matrix)
               + _grounding_reasons(runtime, task, reference))
    other = (distractor, run_reference(runtime, distractor).calls) if distractor is not None else None
    for name, attempt in attempts(runtime, task, reference.calls, other).items():
        if attempt is None:
            matrix[name] = None
            if BY_NAME[name].required:
                reasons.append(f"{name}: {BY_NAME[name].required}")
            continue
        outcome = run_attempt(runtime, task, attempt)
        matrix[name] = outcome.to_json()
        if outcome.verdict.outcome != "fail":
            reasons.append(f"{name}: expected fail, verifier said {outcome.verdict.outcome}")
    matrix["write_removal"], removal_reasons = _write_removal(runtime, task, reference)
    reasons += removal_reasons
    if replay:
        again = run_reference(runtime, task)
        deterministic = (again.outcome.state_hash == reference.outcome.state_hash
                         and again.observation_hashes == reference.observation_hashes)
        matrix["deterministic"] = deterministic
        if not deterministic:
            reasons.append("replay: the reference chain gives different results on a second run")
    matrix["admitted"] = not reasons
    matrix["rejected_because"] = reasons
    return matrix


def verdicts(matrix: dict[str, Any]) -> dict[str, str]:
    """A case's compact probe record: each probe's outcome (or "n/a") and whether every write mattered."""
    compact = {name: matrix[name]["outcome"] if matrix.get(name) else NOT_APPLICABLE for name in NAMES}
    removal = matrix.get("write_removal") or []
    compact["write_removal"] = ("changed" if all(r["changed"] for r in removal) else "unchanged") if removal \
        else NOT_APPLICABLE
    return compact


def first_failed_probe(matrix: dict[str, Any]) -> str:
    """The name of the first probe (or check) a rejected case failed, for the left-out counts."""
    reason = matrix["rejected_because"][0]
    return reason.split(":", 1)[0]


def _shifted(value: Any, removed: int) -> Any:
    """An argument after step ``removed`` is gone: later $from references shift down; references to it break."""
    if isinstance(value, ArgRef) and value.from_step > removed:
        return value.model_copy(update={"from_step": value.from_step - 1})
    if isinstance(value, ArgRef) and value.from_step == removed:
        return value.model_copy(update={"from_step": 10_000})
    if isinstance(value, list):
        return [_shifted(item, removed) for item in value]
    if isinstance(value, dict):
        return {key: _shifted(item, removed) for key, item in value.items()}
    return value


def _renumber(steps: list[Step], removed: int) -> list[Step]:
    """Steps after removing one: $from references past it shift down; references to it stay broken."""
    return [step.model_copy(update={"arguments": {name: _shifted(value, removed)
                                                  for name, value in step.arguments.items()}}) for step in steps]
