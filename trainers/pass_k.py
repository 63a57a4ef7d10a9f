"""pass^k beside pass@1: each held-out case attempted k times at a temperature above 0; all k must pass.

pass@1 (greedy decoding, one attempt per case) says how often the agent gets a case right once; an agent a
company deploys meets the same request again and again, and a case it passes one time in two is not solved.
pass^k (Yao et al., tau-bench, arXiv 2406.12045, section 4) counts a case only when **all** k sampled attempts
pass; pass@k (any attempt passes) and the mean pass rate of the sampled attempts come with it. With exactly k
attempts per case the estimators are the plain shares (tau-bench's unbiased C(c, k) / C(n, k) with n = k).

Each attempt is a whole held-out evaluation (:func:`trainers.evaluation.run_episodes`) with a sampling policy
seeded ``seed + attempt``, so the same model and seed give the same attempts on a machine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .budget import Log
from .errors import ScoreError
from .intervals import share, wilson_interval

if TYPE_CHECKING:
    from world_format.kit import KitCase
    from world_format.runtime import WorldRuntime

    from .evaluation import EpisodeResult


class PassK(BaseModel):
    """k sampled attempts at every case: how many cases pass every time, at least once, and on average."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    k: int
    """Attempts per case."""
    temperature: float
    """Sampling temperature of the attempts (above 0)."""
    seed: int
    """Attempt i samples with a generator seeded ``seed + i``."""
    decoding: str
    """How the attempts' tool calls were decoded (``free`` or ``constrained``)."""
    cases: int
    """Distinct cases attempted."""
    entities: int
    """Independent entities those cases concern."""
    all_passed: int
    """Cases whose k attempts all passed."""
    any_passed: int
    """Cases with at least one passing attempt."""
    pass_hat_k: float
    """all_passed / cases (pass^k), 4 places."""
    interval_95: tuple[float, float]
    """95 % Wilson interval of pass^k over cases."""
    pass_at_k: float
    """any_passed / cases (pass@k), 4 places."""
    sampled_pass_rate: float
    """Passing attempts / (k x cases): the mean pass rate of one sampled attempt, 4 places."""
    sampled_passes: int | None = None
    """Passing attempts, of k x cases (None in a record written before it was kept)."""

    def text(self) -> str:
        """``pass^3 0.400 (26/66 cases; 95 % CI 0.29-0.52), pass@3 0.712, sampled 0.561 at temperature 0.7``."""
        low, high = self.interval_95
        passes = self.sampled_passes
        sampled = self.sampled_pass_rate if passes is None else share(passes, self.k * self.cases)
        return (f"pass^{self.k} {share(self.all_passed, self.cases):.3f} ({self.all_passed}/{self.cases} cases; 95 % "
                f"CI {low:.2f}-{high:.2f}), pass@{self.k} {share(self.any_passed, self.cases):.3f}, sampled "
                f"{sampled:.3f} at "
                f"temperature {self.temperature:g} ({self.decoding} decoding)")


def pass_k_attempts(model: Any, tokenizer: Any, runtime: WorldRuntime, cases: Sequence[KitCase], config: Any,
                    world: Any = None, log: Log | None = None) -> list[list[EpisodeResult]]:
    """``config.pass_k`` sampled evaluations of a loaded model on ``cases`` at ``config.pass_k_temperature``
    (episodes decoded ``config.episode_batch`` at a time, as the greedy evaluation, with ``config.decoding``;
    ``world`` names the row-naming parameters constrained decoding restricts), seeded from ``config.seed``;
    ``log`` gets a line per finished attempt. One list of episode results per attempt, in case order."""
    from .episode_decode import ModelTurns
    from .evaluation import turn_constraint
    from .formats import format_of

    fmt = format_of(tokenizer)
    constraint = turn_constraint(config.decoding, tokenizer, fmt, world)

    def policy_for(generator: Any) -> ModelTurns:
        return ModelTurns(model, tokenizer, config.token_cap, temperature=config.pass_k_temperature,
                          generator=generator, slots=config.episode_batch, tool_format=fmt, constraint=constraint)

    return sampled_attempts(policy_for, runtime, cases, config.turn_cap, k=config.pass_k, seed=config.seed, log=log)


def pass_k_record(attempts: Sequence[Sequence[EpisodeResult]], *, temperature: float, seed: int,
                  decoding: str = "free") -> PassK:
    """The record of ``attempts`` (one list of episode results per attempt, each over the same cases).

    ScoreError when there are no attempts or the attempts do not cover the same cases.
    """
    if not attempts:
        raise ScoreError("pass^k needs at least one attempt")
    by_case: dict[str, list[EpisodeResult]] = {}
    for results in attempts:
        seen: dict[str, EpisodeResult] = {}
        for result in results:
            seen.setdefault(result.case_id, result)
        if by_case and set(seen) != set(by_case):
            raise ScoreError("the attempts of pass^k do not cover the same cases")
        for case_id, result in seen.items():
            by_case.setdefault(case_id, []).append(result)
    k, cases = len(attempts), len(by_case)
    every = sum(1 for results in by_case.values() if all(r.passed for r in results))
    some = sum(1 for results in by_case.values() if any(r.passed for r in results))
    passes = sum(r.passed for results in by_case.values() for r in results)
    return PassK(k=k, temperature=temperature, seed=seed, decoding=decoding, cases=cases,
                 entities=len({results[0].entity for results in by_case.values()}), all_passed=every,
                 any_passed=some, pass_hat_k=round(every / cases, 4) if cases else 0.0,
                 interval_95=wilson_interval(every, cases), pass_at_k=round(some / cases, 4) if cases else 0.0,
                 sampled_pass_rate=round(passes / (k * cases), 4) if cases else 0.0, sampled_passes=passes)


def sampled_attempts(policy_for: Any, runtime: WorldRuntime, cases: Sequence[KitCase], max_turns: int, *, k: int,
                     seed: int, log: Log | None = None) -> list[list[EpisodeResult]]:
    """k evaluations of ``cases``, attempt i with the sampling policy ``policy_for(generator)`` where ``generator``
    is a ``torch.Generator`` seeded ``seed + i``; ``log`` gets one line as each attempt ends (its passes and
    seconds)."""
    import torch

    from .evaluation import run_episodes

    out = []
    for attempt in range(k):
        generator, started = torch.Generator().manual_seed(seed + attempt), time.monotonic()
        out.append(run_episodes(policy_for(generator), runtime, cases, max_turns))
        if log is not None:
            log(f"pass^{k} attempt {attempt + 1}/{k}: {sum(r.passed for r in out[-1])} of {len(cases)} cases "
                f"passed ({time.monotonic() - started:.0f} s)")
    return out


def evaluate_pass_k(model: Any, tokenizer: Any, runtime: WorldRuntime, cases: Sequence[KitCase], config: Any,
                    world: Any = None, log: Log | None = None) -> PassK:
    """pass^k of a loaded model on ``cases``: the record of :func:`pass_k_attempts`."""
    attempts = pass_k_attempts(model, tokenizer, runtime, cases, config, world, log)
    return pass_k_record(attempts, temperature=config.pass_k_temperature, seed=config.seed,
                         decoding=config.decoding)
