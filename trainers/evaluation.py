"""Episodes and evaluation: the model calls tools, the world executes them, VCode judges.

One episode (:func:`run_episode`) runs a case on an isolated copy of the seed: the model writes
an assistant turn; its tool calls are parsed (in the policy's tool format, never a default one), validated
against the declared schemas and executed, and each observation comes back as a ``tool`` message answering
its call id; a turn without a tool call goes to the scripted customer (:mod:`world_format.customer`: the "yes"
to a confirmation comes only to a question about the write), and once the script is used up it is the final
answer; the turn cap ends the episode otherwise. The verdict (:func:`world_format.judge.judge`: the case's
VCode, then the world's procedures over everything the agent did) judges the trace, the final state and the
answer. Held-out evaluation, GRPO rollouts (a rollout is
an episode sampled from the policy) and ``blobkit replay`` all run this same loop
(:func:`run_episodes`), which keeps up to ``policy.slots`` episodes in progress, each on its own
fork of the runtime, and asks the policy for the next turn of all of them at once
(:class:`~trainers.turns.TurnPolicy`), so a model can decode them as one batch.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal

from world_format.canonical import canonical_json
from world_format.conversation import Conversation, prompt_messages
from world_format.customer import Customer
from world_format.evidence import key_space
from world_format.judge import judge
from world_format.kit import KitCase
from world_format.models import Task, World
from world_format.runtime import ToolEvent, WorldRuntime
from world_format.vcode import Verdict

from .chat_format import parse_assistant_output
from .episode_decode import DEFAULT_SLOTS, ModelTurns
from .errors import ToolFormatError
from .eval_record import EvalRecord, RateRecord, Refusal
from .failure_kinds import count_failures
from .formats import FORMATS, ToolFormat, format_of
from .generation import generate_turn
from .intervals import rate_record
from .messages import assistant_text, file_call, raw_calls
from .scoring import Score, Scored, Side, conversation_key, score_verdicts, side_universe
from .turns import Generate, TurnPolicy, TurnRequest, as_turn_policy

CaseKind = Literal["read", "write", "refusal"]


def case_kind(task: Task, world: World) -> CaseKind:
    """What a case asks of the agent, read from its reference chain (never from template names).

    ``refusal``: a step is expected to fail (the agent must decline); ``write``: a step changes the
    state through a write tool; ``read``: neither.
    """
    if any(step.expect_error for step in task.reference):
        return "refusal"
    tools = {tool.name: tool for tool in world.tools}
    writes = any(step.tool in tools and tools[step.tool].effect == "write" for step in task.reference)
    return "write" if writes else "read"


@dataclass(frozen=True)
class EpisodeResult:
    """One episode: what the model did and what the verifier said."""

    case_id: str
    template: str
    kind: CaseKind
    verdict: Verdict
    answer: str | None
    """The final answer, or None when the turn cap ended the episode first."""
    turns: int
    """Model calls made (generated assistant turns)."""
    parse_failures: int
    """Malformed tool-call blocks the model wrote."""
    trace: tuple[ToolEvent, ...]
    messages: tuple[dict[str, Any], ...]
    """The whole conversation, in the kit's row format."""
    entity: str = ""
    """The connected entity the case concerns (:func:`case_entity`): cases of one entity are one independent unit."""
    reference: tuple[str, ...] = ()
    """The tool names of the case's reference chain, in order (what :mod:`trainers.failure_kinds` compares)."""

    @property
    def passed(self) -> bool:
        """Whether the verifier passed the episode (an error is never a pass)."""
        return self.verdict.passed

    @property
    def wrote(self) -> bool:
        """Whether a call changed the state successfully (a declined write never does)."""
        return any(not event.error and event.effect == "write" for event in self.trace)

    def to_json(self) -> dict[str, Any]:
        """The per-case record of eval_cases_*.json (and of ``blobkit replay --json``), with the whole conversation
        (``messages``, the kit's row format) so a reader sees what the customer and the agent said."""
        return {"case_id": self.case_id, "template": self.template, "verdict": self.verdict.to_json(),
                "passed": self.passed, "answer": self.answer, "turns": self.turns,
                "parse_failures": self.parse_failures, "trace": [event.to_json() for event in self.trace],
                "messages": list(self.messages)}


def case_entity(case: KitCase) -> str:
    """The case's entity as the kit records it; a kit built before entity splits names only its anchor row."""
    return case.entity or f"{case.anchor.get('table')}:{canonical_json(case.anchor.get('key'))}"


def reference_tools(case: KitCase) -> tuple[str, ...]:
    """The tool names of the case's reference chain, in order."""
    return tuple(step.tool for step in case.task.reference)


def policy_format(policy: Any) -> ToolFormat:
    """The tool format a policy's turns are parsed in: its ``tool_format`` attribute (the model policies and
    samplers set it from their tokenizer, :func:`trainers.formats.format_of`; wrap a plain function in
    :class:`trainers.turns.PerTurn` with one). ToolFormatError when it has none: parsing a model's calls in a
    format it does not write would score it 0 without a word."""
    fmt = getattr(policy, "tool_format", None)
    if not isinstance(fmt, ToolFormat):
        raise ToolFormatError(f"the policy {type(policy).__name__} carries no tool format: give it the format its "
                              f"turns are written in ({', '.join(FORMATS)}), e.g. PerTurn(generate, "
                              "get_format('hermes'))")
    return fmt


class _Run:
    """One episode in progress: its conversation, its isolated state, and what the model did so far."""

    def __init__(self, key: int, case: KitCase, runtime: WorldRuntime, max_turns: int, fmt: ToolFormat,
                 credit: bool = False) -> None:
        if case.prompt is None:
            raise ValueError(f"case {case.case_id} has no prompt (only held-out and RL cases carry one)")
        self.key, self.case, self.runtime, self.max_turns, self.fmt = key, case, runtime, max_turns, fmt
        self.credit = credit
        self.conversation = Conversation.resume(case.prompt.messages)
        self.tools = case.prompt.tools
        self.parse_failures, self.turns = 0, 0
        self.answer: str | None = None
        self.stack = ExitStack()
        self.episode = self.stack.enter_context(runtime.episode())
        self.customer = Customer(self.episode, case.task.turns)

    def request(self) -> TurnRequest:
        """What the policy is asked for this turn."""
        return TurnRequest(self.key, self.conversation.messages, self.tools)

    def advance(self, text: str) -> bool:
        """Apply one generated assistant turn; True when the episode is over (a final answer or the turn cap)."""
        self.turns += 1
        conversation, parsed = self.conversation, parse_assistant_output(text, self.fmt)
        if parsed.parse_errors:
            self.parse_failures += len(parsed.parse_errors)
            conversation.unparsed(parsed.content, parsed.parse_errors)
        elif not parsed.tool_calls:
            conversation.answer(parsed.content)
            reply = self.customer.reply(parsed.content)  # the agent asked: the scripted customer answers
            if reply is None:
                self.answer = parsed.content
                return True
            conversation.user(reply)
        else:
            if parsed.content:
                self.episode.say(parsed.content, "remark")
            calls = [(call["name"], call["arguments"]) for call in parsed.tool_calls]
            for ident, (name, arguments) in zip(conversation.tool_calls(calls, parsed.content), calls, strict=True):
                conversation.observation(ident, name, self.episode.call(name, arguments).observation)
        return self.turns >= self.max_turns

    def finish(self) -> EpisodeResult:
        """The verifier's verdict on the episode; its changes to the state are rolled back."""
        with self.stack:
            verdict = judge(self.case.task, self.episode, self.answer, credit=self.credit)
            trace = tuple(self.episode.trace)
        case = self.case
        return EpisodeResult(case.case_id, case.template, case_kind(case.task, self.runtime.world), verdict,
                             self.answer, self.turns, self.parse_failures, trace, tuple(self.conversation.messages),
                             case_entity(case), reference_tools(case))


def run_episodes(policy: TurnPolicy | Generate, runtime: WorldRuntime, cases: Sequence[KitCase], max_turns: int,
                 progress: Callable[[int, int], None] | None = None, *, credit: bool = False) -> list[EpisodeResult]:
    """Run every case on an isolated copy of the seed, up to ``policy.slots`` at a time; results in case order.

    Each round asks the policy for the next turn of every episode in progress (in case order); a finished
    episode's slot goes to the next case. Episodes side by side run on forks of ``runtime``. A policy given as
    a plain ``(messages, tools) -> text`` function runs one episode at a time. ``progress(index, total)`` is
    called as each case starts. Each turn is parsed in the policy's tool format (:func:`policy_format`). With
    ``credit`` each verdict carries the share of its checks that pass (:func:`world_format.judge.judge`). Raises
    ValueError for a case without a prompt.
    """
    fmt = policy_format(policy)
    turn_policy = as_turn_policy(policy)
    for case in cases:
        if case.prompt is None:
            raise ValueError(f"case {case.case_id} has no prompt (only held-out and RL cases carry one)")
    forks = [runtime.fork() for _ in range(min(turn_policy.slots, len(cases)) - 1)]
    free = [runtime, *forks]
    queue, live, results = deque(enumerate(cases)), dict[int, _Run](), dict[int, EpisodeResult]()
    turn_policy.begin()
    try:
        while queue or live:
            while queue and free:
                key, case = queue.popleft()
                if progress:
                    progress(key, len(cases))
                live[key] = _Run(key, case, free.pop(0), max_turns, fmt, credit)
            order = sorted(live)
            texts = turn_policy.next_turns([live[key].request() for key in order])
            for key, text in zip(order, texts, strict=True):
                if live[key].advance(text):
                    run = live.pop(key)
                    results[key] = run.finish()
                    turn_policy.end(key)
                    free.append(run.runtime)
    finally:
        for run in live.values():
            run.stack.close()
        turn_policy.done()
        for fork in forks:
            fork.close()
    return [results[index] for index in range(len(cases))]


def run_episode(policy: TurnPolicy | Generate, runtime: WorldRuntime, case: KitCase, max_turns: int) -> EpisodeResult:
    """Run one case on an isolated copy of the seed; return the trace and the verdict (:func:`run_episodes`)."""
    return run_episodes(policy, runtime, [case], max_turns)[0]


def case_prompt(case: KitCase, world: World) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tools a case starts from: its stored prompt, or (training cases) the world's own."""
    if case.prompt is not None:
        return case.prompt.messages, case.prompt.tools
    return prompt_messages(world.system_prompt(), case.task.instruction), world.function_specs()


def replay_trajectory(runtime: WorldRuntime, case: KitCase, messages: Sequence[dict[str, Any]],
                      max_turns: int | None = None) -> EpisodeResult:
    """Score an agent's recorded conversation: its assistant turns are re-executed on an isolated copy of the seed.

    Only the assistant messages are read: each turn's ``tool_calls`` run in order (the world's real
    observations are fed back; any ``tool`` and ``user`` messages in ``messages`` are ignored); a turn
    without a tool call goes to the scripted customer (:mod:`world_format.customer`), and once the script
    is used up, it is the final answer; the verdict is :func:`world_format.judge.judge`'s. Messages are read in
    every shape a client sends (content parts, OpenAI's JSON-string arguments, :mod:`trainers.messages`); a call
    or a content that cannot be read counts as a parse failure and returns an error observation, as a malformed
    call from a model would.
    """
    prompt, _ = case_prompt(case, runtime.world)
    conversation = Conversation.resume(prompt)
    turns = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"][: max_turns]
    parse_failures, answer, used = 0, None, 0
    with runtime.episode() as episode:
        customer = Customer(episode, case.task.turns)
        for message in turns:
            used += 1
            raw = raw_calls(message)
            content, unreadable = assistant_text(message)
            if unreadable:  # never an empty answer: a turn the scorer cannot read is a parse failure
                parse_failures += 1
                conversation.unparsed("", [unreadable])
                continue
            if not raw:
                conversation.answer(content)
                reply = customer.reply(content)  # a turn without calls asks; the scripted customer answers
                if reply is not None:
                    conversation.user(reply)
                    continue
                answer = content
                break
            if content:
                episode.say(content, "remark")
            read = [file_call(call) for call in raw] if isinstance(raw, list) else [raw]
            errors = [r for r in read if isinstance(r, str)]
            if errors:
                parse_failures += len(errors)
                conversation.unparsed(content, errors)
                continue
            calls = [r for r in read if not isinstance(r, str)]
            for ident, (name, arguments) in zip(conversation.tool_calls(calls, content), calls, strict=True):
                conversation.observation(ident, name, episode.call(name, arguments).observation)
        verdict = judge(case.task, episode, answer)
        trace = tuple(episode.trace)
    return EpisodeResult(case.case_id, case.template, case_kind(case.task, runtime.world), verdict, answer, used,
                         parse_failures, trace, tuple(conversation.messages), case_entity(case), reference_tools(case))


@dataclass(frozen=True)
class GreedyPolicy:
    """A greedy policy over a loaded model (a :data:`Generate`), in ``tool_format`` (its end tokens, its parser)."""

    model: Any
    tokenizer: Any
    max_new_tokens: int
    tool_format: ToolFormat

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return generate_turn(self.model, self.tokenizer, messages, tools, max_new_tokens=self.max_new_tokens,
                             fmt=self.tool_format)


def model_generator(model: Any, tokenizer: Any, max_new_tokens: int, tool_format: ToolFormat | None = None) -> Generate:
    """A greedy policy over a loaded model; ``tool_format`` None: the one ``tokenizer`` carries
    (:func:`trainers.formats.format_of`)."""
    return GreedyPolicy(model, tokenizer, max_new_tokens, tool_format or format_of(tokenizer))


def model_policy(model: Any, tokenizer: Any, max_new_tokens: int, slots: int = DEFAULT_SLOTS, *,
                 decoding: str = "free", world: World | None = None) -> ModelTurns:
    """The greedy policy over a loaded model: ``slots`` episodes decoded together, a KV cache kept per episode
    across its turns and the shared prefix prefilled once (:mod:`trainers.episode_decode`), in the tool format
    its tokenizer carries (:func:`trainers.formats.format_of`). ``decoding`` "constrained" or "grounded" masks each
    turn to the grammar of :mod:`trainers.constrained` (``world`` says which parameters name rows; ConfigError
    without it)."""
    fmt = format_of(tokenizer)
    return ModelTurns(model, tokenizer, max_new_tokens, slots=slots, tool_format=fmt,
                      constraint=turn_constraint(decoding, tokenizer, fmt, world))


def turn_constraint(decoding: str, tokenizer: Any, fmt: ToolFormat, world: World | None) -> Any:
    """The :class:`trainers.constrained.ToolCallConstraint` ``decoding`` asks for, or None for free decoding."""
    if decoding == "free":
        return None
    from .constrained import ToolCallConstraint
    from .errors import ConfigError

    if decoding not in ("constrained", "grounded") or world is None:
        raise ConfigError(f"decoding {decoding!r} needs 'free', or 'constrained' or 'grounded' with the world whose "
                          "tools it constrains")
    return ToolCallConstraint(tokenizer, fmt, key_space(world), grounded=decoding == "grounded")


@dataclass(frozen=True)
class EvalSummary:
    """Pass rate and what went wrong, over a set of episodes, as a claim about the kit's cases
    (:func:`trainers.scoring.score_verdicts`: each case counted once, the coverage of its side stated)."""

    results: tuple[EpisodeResult, ...]
    universe: Mapping[str, Side] | None = None
    """Every case id the episodes could have covered, with its side (a held-out evaluation: all of the kit's
    held-out cases); None: exactly the episodes' own cases, as held-out cases."""

    def score(self) -> Score:
        """The episodes' verdicts as one score; ScoreError for a case judged on two different conversations."""
        verdicts = [Scored(r.case_id, r.passed, r.entity, conversation_key(r.messages), f"episode {index}")
                    for index, r in enumerate(self.results)]
        universe: Mapping[str, Side] = self.universe if self.universe is not None else \
            dict.fromkeys((r.case_id for r in self.results), "eval")
        return score_verdicts(verdicts, universe)

    def distinct(self) -> list[EpisodeResult]:
        """The first episode of each case (a repeat of a case on the same conversation counts once)."""
        seen: dict[str, EpisodeResult] = {}
        for result in self.results:
            seen.setdefault(result.case_id, result)
        return list(seen.values())

    def outcomes(self) -> dict[str, tuple[bool, str]]:
        """``{case_id: (passed, entity)}`` of the distinct cases: what :func:`trainers.paired.compare` pairs."""
        return {r.case_id: (r.passed, r.entity) for r in self.distinct()}

    @property
    def pass_rate(self) -> float:
        """Share of distinct cases the verifier passed (0.0 for none), rounded to 4 places."""
        return self.score().pass_rate

    @property
    def model_calls(self) -> int:
        """Generated assistant turns over all episodes."""
        return sum(r.turns for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """The summary as eval.json records it (:meth:`record` as JSON)."""
        return self.record().to_json()

    def record(self) -> EvalRecord:
        """The summary as eval.json records it (:class:`~trainers.eval_record.EvalRecord`).

        Every rate carries its case count, passes, independent entities and 95 % Wilson interval
        (:func:`trainers.intervals.rate_record`), over distinct cases; ``side``, ``cases_in_side``,
        ``coverage`` and ``partial`` say how much of the side the cases cover (:mod:`trainers.scoring`).
        ``refusal.false_acceptance``: refusal cases that failed; ``refusal.false_rejection``: write cases that
        failed without any successful write (the agent declined or never wrote).
        """
        score, results = self.score(), self.distinct()
        coverage = score.sides["train"] if score.side == "train" else score.sides["eval"]
        by_template: dict[str, list[tuple[bool, str]]] = defaultdict(list)
        for result in results:
            by_template[result.template].append((result.passed, result.entity))
        failed = Counter(r.kind for r in results if not r.passed)
        declined = sum(1 for r in results if r.kind == "write" and not r.passed and not r.wrote)
        return EvalRecord(
            pass_rate=score.pass_rate, cases=score.cases, passed=score.passed, entities=score.entities,
            interval_95=(score.interval_95[0], score.interval_95[1]),
            interval_method="Wilson score, 95 %, over cases",
            side=score.side, cases_in_side=coverage.cases_in_kit, coverage=coverage.coverage,
            partial=score.partial, duplicates=score.duplicates,
            per_template={t: RateRecord.model_validate(rate_record(v)) for t, v in sorted(by_template.items())},
            tool_call_parse_failures=sum(r.parse_failures for r in self.results),
            refusal=Refusal(false_acceptance=failed.get("refusal", 0), false_rejection=declined),
            verifier_errors=sum(1 for r in results if r.verdict.outcome == "error"),
            model_calls=self.model_calls, failures=count_failures(results))


def evaluate_cases(policy: TurnPolicy | Generate, runtime: WorldRuntime, cases: Sequence[KitCase], max_turns: int,
                   progress: Callable[[int, int], None] | None = None, *,
                   universe: Sequence[KitCase] | None = None) -> EvalSummary:
    """Run every case (:func:`run_episodes`); return the summary (which holds the per-case results).

    ``universe``: the cases ``cases`` are drawn from (the kit's whole held-out side), so the summary states its
    coverage; None: ``cases`` themselves."""
    results = tuple(run_episodes(policy, runtime, cases, max_turns, progress))
    return EvalSummary(results, side_universe(universe) if universe is not None else None)
