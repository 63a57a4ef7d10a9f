"""GRPO: the world is the environment, the task's VCode verdict is the reward; one loop for every local target.

Why our own loop rather than TRL's ``GRPOTrainer``: a reward here is a verdict on a whole
multi-turn episode (the tool calls made, the state they left behind, the final answer), executed
by the world's hardened executor on an isolated copy of the seed. TRL's ``environment_factory``
derives tool schemas from Python signatures (they would not be byte-identical to the kit's),
stringifies results, runs its own tool-call parser and counts budgets in completions rather than
model calls; its ``rollout_func`` would leave us writing the same loop plus glue. The loop below
is small, seeded and on-policy:

* each step draws ``batch_size // group_size`` training prompts; every prompt gets
  ``group_size`` sampled episodes (``run_episodes``: parse the chat template's tool-call format,
  validate against the declared JSON Schemas, execute, feed the observation back as a tool
  message, stop at a final answer or the turn cap), all of the step's episodes decoded together;
* reward = 1 if VCode passes the episode, else 0 (a verifier *error* is counted, never rewarded);
  no shaping terms by default. ``--reward checks`` gives a failed episode :data:`CHECK_CREDIT` times the share of
  its verifier's checks that pass (:func:`episode_reward`), so a group that fails every attempt still varies
  where its attempts met different checks; a pass still earns 1, more than any failure;
* advantage = reward - group mean (mean-centred, not divided by the group std, as in the Tinker
  cookbook / Dr. GRPO; with two attempts the std only rescales the step);
* loss = -sum(advantage * log p(token)) over the tokens the model generated, divided by the
  number of those tokens. Observation tokens are prompt tokens of the next turn and carry no loss.
  One optimizer update per step, on the samples just drawn, so the importance ratio is 1 and no
  clipping is needed. No KL term by default (beta = 0, TRL's default too); ``--kl-coef`` adds one towards the
  start policy on local-torch (:func:`trainers.grpo_torch.k3`). Steps whose groups all have zero reward variance
  carry no signal and apply no update (recorded).

Everything above is this module's, whatever the target. A target contributes a
:class:`GRPOBackend`, the two parts that differ: decoding turns (a seeded sampling :class:`Policy`
that keeps the exact token ids it produced, per episode) and the update (the loss above on those ids, gradients
clipped at 1.0, one AdamW step, the adapter saved in PEFT format). local-torch's is
:mod:`trainers.grpo_torch`, local-mlx's :mod:`trainers.grpo_mlx`; both start from the same
:class:`PolicySource`, and the start and end evaluations run on torch in the run skeleton.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from world_format.canonical import atomic_write_text, canonical_json
from world_format.kit import Kit, KitCase, Prompt
from world_format.vcode import Verdict

from .budget import Budget, Log
from .config import TrainConfig
from .errors import ConfigError, TargetUnavailableError, TrainerError
from .eval_record import Delta, GRPOReport, TrainingReport, read_report
from .evaluation import EpisodeResult, EvalSummary, run_episodes
from .export import verify_export
from .fit import FitResult
from .generation import Decoded
from .plan_record import PlanRecord
from .ranks import World, gather, init_process_group
from .report import paired
from .turns import TurnPolicy, TurnRequest

MAX_GRAD_NORM = 1.0
"""Gradient clipping of every GRPO update, on every target."""

CHECK_CREDIT = 0.5
"""Under ``--reward checks``, a failed episode earns this x the share of its checks met: less than half a pass."""

RewardKind = Literal["verdict", "checks"]


class Policy(TurnPolicy, Protocol):
    """A :class:`~trainers.turns.TurnPolicy` that keeps the token ids of every turn it wrote, per episode."""

    decoded: dict[int, list[Decoded]]
    """Episode key → its turns' ids, in order, from :meth:`begin` until the next :meth:`begin`."""


class SerialPolicy:
    """A :class:`Policy` that writes one turn at a time: subclasses give :meth:`turn`."""

    slots = 1

    def __init__(self) -> None:
        self.decoded: dict[int, list[Decoded]] = {}

    def turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, Decoded]:
        """The text and the token ids of the next assistant turn after ``messages``."""
        raise NotImplementedError

    def begin(self) -> None:
        """Forget the turns of the previous run."""
        self.decoded = {}

    def next_turns(self, requests: Sequence[TurnRequest]) -> list[str]:
        """Each request's turn from :meth:`turn`, recorded under its episode."""
        texts = []
        for request in requests:
            text, decoded = self.turn(request.messages, request.tools)
            self.decoded.setdefault(request.key, []).append(decoded)
            texts.append(text)
        return texts

    def end(self, key: int) -> None:
        """Nothing kept per episode but its records."""

    def done(self) -> None:
        """Nothing kept per run but the records."""


@dataclass
class Rollout:
    """One sampled episode (a trajectory): its turns' token ids, the episode and the reward."""

    case_id: str
    turns: list[Decoded]
    episode: EpisodeResult
    reward: float
    verifier_error: bool


@dataclass(frozen=True)
class PolicySource:
    """Where the RL policy starts, the same for every target: a model, the adapter GRPO continues, a tokenizer."""

    base: dict[str, Any]
    """The model the RL adapter sits on (source, name_or_path, revision): the plan's base, the base of a LoRA
    export, or a full export itself. It is also the ``base`` of the exported RL adapter."""
    adapter: Path | None
    """The PEFT adapter of a LoRA export that GRPO continues training, or None: a fresh, seeded LoRA."""
    tokenizer: str
    """Where the tokenizer (and its chat template) is read from: the export's, else the base's."""

    @property
    def revision(self) -> str | None:
        """The revision to load a hub base at (None for a local directory)."""
        return None if self.base["source"] in ("local", "registry") else self.base.get("revision")


def policy_source(config: TrainConfig, plan_record: PlanRecord) -> PolicySource:
    """The start of the RL policy: ``--init-adapter`` (verified against its manifest) or the plan's base."""
    if config.init_adapter is None:
        base = plan_record.base.to_json()
        return PolicySource(base, None, base["name_or_path"])
    manifest = verify_export(config.init_adapter)
    if manifest["kind"] == "full":
        path = str(Path(config.init_adapter).resolve())
        return PolicySource({"source": "local", "name_or_path": path, "revision": None}, None, path)
    return PolicySource(manifest["base"], Path(config.init_adapter), str(config.init_adapter))


@dataclass(frozen=True)
class UpdateFigures:
    """What one optimizer update reports for the step's record."""

    loss: float
    """The step's loss: the policy-gradient loss (plus the KL term with ``kl_coef``) over every rank's tokens."""
    kl: float | None
    """Mean k3 estimate of KL(policy || start) per generated token the loss covers, before the update; None
    without ``kl_coef``."""


class GRPOBackend(Protocol):
    """What one target supplies to the GRPO loop."""

    def start_policy(self) -> tuple[Any, Any]:
        """(torch model, tokenizer) of the policy before any update, for the start evaluation."""
        ...

    def sampler(self) -> Policy:
        """The seeded sampling policy of the run (at ``config.temperature``), keeping every turn's token ids."""
        ...

    def update(self, rollouts: list[Rollout], weights: list[float]) -> UpdateFigures:
        """One optimizer step on -sum(w * log p(generated tokens)) / n_tokens, clipped; return its figures."""
        ...

    def save(self, checkpoint: Path) -> None:
        """Write the trained adapter as a PEFT checkpoint (safetensors, canonical config) with the tokenizer."""
        ...


def rl_cases(kit: Kit, rows: list[dict[str, Any]]) -> list[KitCase]:
    """Training prompts for RL: each SFT row's system + user messages and tools, with its case's task.

    Built from the SFT rows themselves, so the tool schemas the model sees in RL are the very
    objects it saw in SFT. Renamed replays (rows with ``metadata.renaming``) are left out: their prompt names
    renamed values that only their renamed copy of the seed holds, and RL episodes run on the kit's seed.
    """
    cases = [case.model_copy(update={"prompt": Prompt(messages=row["messages"][:2], tools=row["tools"])})
             for row, case in rl_rows(kit, rows)]
    if not cases:
        raise ConfigError("no SFT row matches a training case of the kit: nothing to run RL on")
    return cases


def rl_rows(kit: Kit, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], KitCase]]:
    """Each SFT row of a training case of the kit with that case, in the rows' order: the rows RL prompts come from
    (:func:`rl_cases`; renamed replays left out)."""
    tasks = {case.case_id: case for case in kit.cases("train")}
    pairs = []
    for row in rows:
        metadata = row.get("metadata") or {}
        case_id = metadata.get("case_id")
        if case_id in tasks and "renaming" not in metadata:
            pairs.append((row, tasks[case_id]))
    return pairs


def assert_same_tools(rows: list[dict[str, Any]], cases: list[KitCase]) -> None:
    """The tool schemas of every RL and evaluation prompt must be byte-identical to the SFT rows'."""
    seen = {canonical_json(row["tools"]) for row in rows}
    for case in cases:
        if case.prompt is None or canonical_json(case.prompt.tools) not in seen:
            raise TrainerError(f"case {case.case_id}: its tool schemas differ from those in the SFT rows")


def rollouts(policy: Policy, runtime: Any, cases: Sequence[KitCase], max_turns: int,
             reward: RewardKind = "verdict") -> list[Rollout]:
    """Run one episode per case (decoded together, each on an isolated copy of the seed) and score each with
    :func:`episode_reward`. A verifier error is recorded on the rollout and rewarded 0, never 1."""
    episodes = run_episodes(policy, runtime, cases, max_turns, credit=reward == "checks")
    out = []
    for key, (case, episode) in enumerate(zip(cases, episodes, strict=True)):
        error = episode.verdict.outcome == "error"
        out.append(Rollout(case.case_id, list(policy.decoded.get(key, [])), episode,
                           episode_reward(episode.verdict, reward), error))
    return out


def episode_reward(verdict: Verdict, reward: RewardKind) -> float:
    """1.0 for a pass. A failure earns 0.0 under ``verdict``, and :data:`CHECK_CREDIT` x the share of the
    verifier's checks that pass under ``checks`` (:attr:`~world_format.vcode.Verdict.credit`: 0 after a procedure
    violation), so below 0.5 and never a pass's 1. A verifier error earns 0.0 either way."""
    if verdict.passed:
        return 1.0
    if reward == "checks" and verdict.outcome == "fail" and verdict.credit is not None:
        return CHECK_CREDIT * verdict.credit
    return 0.0


def rollout(policy: Policy, runtime: Any, case: KitCase, max_turns: int, reward: RewardKind = "verdict") -> Rollout:
    """One episode of ``case``, scored (:func:`rollouts`)."""
    return rollouts(policy, runtime, [case], max_turns, reward)[0]


def advantages(rewards: list[float], group_size: int) -> list[float]:
    """Reward minus its group's mean (groups are consecutive runs of ``group_size``)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        out.extend(r - mean for r in group)
    return out


def scored_turns(rollouts: list[Rollout], weights: list[float]) -> tuple[list[tuple[Decoded, float]], int]:
    """The turns the loss covers, each with its rollout's advantage, and the number of generated tokens in them.

    Rollouts with a zero advantage and turns that generated nothing carry no loss; the count is the
    loss's denominator on every target.
    """
    turns = [(turn, weight) for item, weight in zip(rollouts, weights, strict=True) if weight
             for turn in item.turns if turn.new_ids]
    return turns, sum(len(turn.new_ids) for turn, _ in turns)


def step_model_calls(config: TrainConfig) -> int:
    """The most model calls one step can make: prompts per step x group size x turn cap x (1 + resample rounds)."""
    return (max(1, config.batch_size // config.group_size) * config.group_size * config.turn_cap
            * (1 + config.resample_rounds))


@dataclass(frozen=True)
class RolloutFigures:
    """What a step's record needs of one rollout, small enough to gather from every rank."""

    index: int
    """Position of the episode in the step (groups are consecutive runs of ``group_size``)."""
    reward: float
    parse_failures: int
    turns: int
    verifier_error: bool
    model_calls: int
    """Turns the model generated."""
    passed: bool
    """Whether the verifier passed the episode (under ``--reward checks`` the reward alone does not say)."""


def rollout_figures(indices: Sequence[int], group: Sequence[Rollout]) -> list[RolloutFigures]:
    """The figures of ``group``, the episodes at ``indices`` of the step."""
    return [RolloutFigures(i, r.reward, r.episode.parse_failures, r.episode.turns, r.verifier_error, len(r.turns),
                           r.episode.passed)
            for i, r in zip(indices, group, strict=True)]


def _step_record(step: int, figures: list[RolloutFigures], group_size: int, update: UpdateFigures | None,
                 seconds: float) -> dict[str, Any]:
    rewards = [r.reward for r in figures]
    groups = len(range(0, len(rewards), group_size))
    return {
        "step": step, "episodes": len(figures), "reward_mean": round(sum(rewards) / len(rewards), 4),
        "pass_rate": round(sum(r.passed for r in figures) / len(figures), 4),
        "zero_variance_groups": round(tied_groups(rewards, group_size) / groups, 4),
        "tool_call_parse_failures": sum(r.parse_failures for r in figures),
        "episode_turns_mean": round(sum(r.turns for r in figures) / len(figures), 3),
        "verifier_errors": sum(r.verifier_error for r in figures),
        "optimizer_update": update is not None, "loss": round(update.loss, 6) if update else 0.0,
        "kl": round(update.kl, 6) if update and update.kl is not None else None,
        "model_calls": sum(r.model_calls for r in figures),
        "seconds": round(seconds, 2),
    }


@dataclass(frozen=True)
class StepDraw:
    """The episodes of one GRPO step (:func:`draw_groups`)."""

    prompts: list[KitCase]
    """Every prompt drawn, in order: the step's groups are consecutive runs of ``group_size`` episodes of these."""
    rounds: int
    """Resampling rounds run after the first draw (0 when no group tied, or none may be replaced)."""
    mine: list[int]
    """Indices (in the step) of this rank's episodes."""
    rollouts: list[Rollout]
    """This rank's rollouts, aligned with :attr:`mine`."""
    figures: list[RolloutFigures]
    """Every rank's rollout figures, by index."""


def tied_groups(rewards: Sequence[float], group_size: int) -> int:
    """Groups (consecutive runs of ``group_size``) whose rewards are all equal: zero advantage, no signal."""
    return sum(1 for i in range(0, len(rewards), group_size) if len(set(rewards[i:i + group_size])) == 1)


def draw_groups(sampler: Policy, runtime: Any, cases: Sequence[KitCase], order: random.Random, *, prompts: int,
                group_size: int, turn_cap: int, resample_rounds: int, world: World,
                reward: RewardKind = "verdict") -> StepDraw:
    """Draw ``prompts`` training prompts (seeded ``order``) and roll out ``group_size`` episodes of each; then, for
    up to ``resample_rounds`` rounds, one fresh prompt (not drawn yet this step) for every group of the last round
    whose rewards tied, rolled out the same way. Tied groups stay in the step with zero advantage, so the update
    covers the groups that varied: at most ``prompts`` of them. Every rank draws the same prompts and gathers every
    rank's figures before deciding a round, so all ranks run the same rounds. A step makes at most
    ``prompts x group_size x turn_cap x (1 + resample_rounds)`` model calls (:func:`step_model_calls`). Episodes
    are scored by ``reward`` (:func:`episode_reward`)."""
    batch = order.sample(list(cases), min(prompts, len(cases)))
    drawn, rounds = list(batch), 0
    mine: list[int] = []
    mine_rollouts: list[Rollout] = []
    figures: list[RolloutFigures] = []
    while True:
        episodes = [case for case in batch for _ in range(group_size)]
        offset = len(figures)
        local = list(range(world.rank, len(episodes), world.size))
        group = rollouts(sampler, runtime, [episodes[i] for i in local], turn_cap, reward)
        indices = [offset + i for i in local]
        mine.extend(indices)
        mine_rollouts.extend(group)
        latest = sorted((f for part in gather(rollout_figures(indices, group)) for f in part), key=lambda f: f.index)
        figures.extend(latest)
        tied = tied_groups([f.reward for f in latest], group_size)
        if not tied or rounds == resample_rounds:
            return StepDraw(drawn, rounds, mine, mine_rollouts, figures)
        taken = {id(case) for case in drawn}  # by identity: two cases may compare equal
        fresh = [case for case in cases if id(case) not in taken]
        if not fresh:
            return StepDraw(drawn, rounds, mine, mine_rollouts, figures)
        batch = order.sample(fresh, min(tied, len(fresh)))
        drawn.extend(batch)
        rounds += 1


def backend_for(config: TrainConfig, source: PolicySource) -> GRPOBackend:
    """The target's half of GRPO (:meth:`trainers.targets.base.LocalTarget.grpo_backend`; runpod's pod runs
    local-torch). TargetUnavailableError for a target that does not train in this process."""
    from .targets.base import LocalTarget
    from .targets.registry import target_for

    target = target_for(config.target)
    if not isinstance(target, LocalTarget):
        raise TargetUnavailableError(f"{config.target} does not run GRPO in this process")
    return target.grpo_backend(config, source)


class GRPOTrainer:
    """GRPO for the run skeleton on any local target: the warm-start (or base) policy is both the start and the fit."""

    end_label = "rl"

    def __init__(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: PlanRecord) -> None:
        self.config, self.kit = config, kit
        self.cases = rl_cases(kit, rows)
        assert_same_tools(rows, self.cases + kit.cases("eval")[: config.eval_limit])
        self.source = policy_source(config, plan_record)
        self.backend = backend_for(config, self.source)
        self.start_label = "sft" if config.init_adapter is not None else "base"
        self.steps: list[dict[str, Any]] = []

    def start_policy(self) -> tuple[Any, Any]:
        """The policy GRPO will train, before any update (a torch model: evaluation always runs on torch)."""
        return self.backend.start_policy()

    def step(self, step: int, sampler: Policy, order: random.Random, runtime: Any) -> dict[str, Any]:
        """One GRPO step: sample a group of rollouts per prompt (tied groups replaced by fresh prompts for up to
        ``resample_rounds`` rounds, :func:`draw_groups`), one policy-gradient update when any group varies.

        Over several ranks every rank draws the same prompts (the same seeded ``order``), rolls out its share of
        the episodes (every size-th, from its rank), and the rewards are gathered before the advantages, so
        each rank weighs its rollouts by their whole group; the backend averages the update over the ranks.
        """
        config, started = self.config, time.monotonic()
        drawn = draw_groups(sampler, runtime, self.cases, order, prompts=max(1, config.batch_size // config.group_size),
                            group_size=config.group_size, turn_cap=config.turn_cap,
                            resample_rounds=config.resample_rounds, world=World.from_env(), reward=config.reward)
        weights = advantages([f.reward for f in drawn.figures], config.group_size)
        update = self.backend.update(drawn.rollouts, [weights[i] for i in drawn.mine]) if any(weights) else None
        record = _step_record(step, drawn.figures, config.group_size, update, time.monotonic() - started)
        return {**record, "prompts": len(drawn.prompts), "resample_rounds": drawn.rounds}

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """Up to ``steps`` steps, each started only when its worst case fits the budget; rl_steps.jsonl as it goes."""
        config, main = self.config, World.from_env().is_main
        init_process_group()
        step_calls = step_model_calls(config)
        sampler = self.backend.sampler()
        order, runtime = random.Random(config.seed), self.kit.world().runtime()
        try:
            if config.decoding != "free":
                _constrain(sampler, config.decoding, runtime.world)
            for step in range(1, config.steps + 1):
                if budget.exhausted(step_calls):
                    log(f"GRPO stopped before step {step}: {budget.stopped_by}")
                    break
                record = self.step(step, sampler, order, runtime)
                budget.model_calls += record["model_calls"]
                self.steps.append(record)
                if main:
                    atomic_write_text(config.out / "rl_steps.jsonl",
                                      "".join(canonical_json(s) + "\n" for s in self.steps))
                kl = "" if record["kl"] is None else f", KL {record['kl']:.4f}"
                log(f"GRPO step {step}/{config.steps}: reward {record['reward_mean']:.2f} (passed "
                    f"{record['pass_rate']:.2f}), zero-variance groups "
                    f"{record['zero_variance_groups']:.2f}, update {'yes' if record['optimizer_update'] else 'no'}, "
                    f"{record['model_calls']} model calls{kl}")
        finally:
            runtime.close()
        return self._checkpoint(budget)

    def _checkpoint(self, budget: Budget) -> FitResult:
        checkpoint = self.config.out / "checkpoint"
        if World.from_env().is_main:
            checkpoint.mkdir(parents=True, exist_ok=True)
            self.backend.save(checkpoint)
        zero_variance = [s["zero_variance_groups"] for s in self.steps]
        details = {"steps_completed": len(self.steps), "model_calls": budget.model_calls,
                   "active_seconds": round(budget.minutes() * 60, 1),
                   "zero_variance_group_fraction": round(sum(zero_variance) / len(zero_variance), 4)
                   if self.steps else None}
        return FitResult(checkpoint, "lora", self.source.base, sum(s["optimizer_update"] for s in self.steps),
                         budget.minutes() * 60, [(s["step"], s["reward_mean"]) for s in self.steps],
                         budget.stopped_by, details)

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> GRPOReport:
        """The start policy and RL on the same held-out cases, with the rollout figures."""
        config, label = self.config, self.start_label
        previous = previous_eval(config)
        carried = previous.base if previous is not None and label != "base" else None
        delta = Delta(pass_rate=round(end.pass_rate - start.pass_rate, 4), cases=len(end.results),
                      paired=paired(start, end, label, "rl"))
        return GRPOReport(
            **({"base": start.record(), "rl_minus_base": delta} if label == "base"
               else {"base": carried, "sft": start.record(), "rl_minus_sft": delta}),
            rl=end.record(), optimizer_updates=fit.optimizer_updates, steps_completed=fit.details["steps_completed"],
            steps_planned=config.steps, stopped_by=fit.stopped_by, model_calls=fit.details["model_calls"],
            eval_model_calls=start.model_calls + end.model_calls, active_seconds=fit.details["active_seconds"],
            zero_variance_group_fraction=fit.details["zero_variance_group_fraction"],
            reward_history=list(fit.history), kit_sha256=self.kit.sha256, group_size=config.group_size,
            shaping=None if config.reward == "verdict" else f"checks: failed episodes earn {CHECK_CREDIT} x the "
                                                             "share of their checks met")


def _constrain(sampler: Any, decoding: str, world: Any) -> None:
    """Mask the rollout turns of the torch sampler (:class:`~trainers.episode_decode.ModelTurns`) to the
    grammar of :mod:`trainers.constrained`; the config refuses constrained GRPO on local-mlx."""
    from .evaluation import turn_constraint

    sampler.constraint = turn_constraint(decoding, sampler.tokenizer, sampler.tool_format, world)


def previous_eval(config: TrainConfig) -> TrainingReport | None:
    """The SFT run's eval.json next to --init-adapter (for its base figures), if there is one it can read."""
    if config.init_adapter is None:
        return None
    try:
        return read_report(Path(config.init_adapter).resolve().parent / "eval.json")
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None
