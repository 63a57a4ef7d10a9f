"""The job's budgets: active minutes and model calls, summed over every stage and every resume.

Evaluations and the replay cannot be interrupted mid-episode, so before each stage the runner asks
:meth:`JobBudget.short_for` whether the stage's worst case (every episode running to its turn cap)
fits the model calls left. GRPO receives what is left, less the worst case of its own evaluations
and the replay, as its own ``max_model_calls`` and enforces it at step boundaries; the time left is
its ``max_minutes``. The time budget may be overrun by at most the evaluation or replay running when
it ran out. After a stage, :func:`sft_calls` and :func:`rl_calls` count what it spent.
"""

from __future__ import annotations

import time

from trainers.config import TrainConfig
from trainers.eval_record import GRPOReport, SFTReport

from .config import CompanyBudgets, CompanyConfig

BUDGETS = ("max_minutes", "max_model_calls")
"""The budgets a job can run out of (``outcome.budget`` names one)."""


def evaluations_worst_case(stage: TrainConfig, eval_cases: int) -> int:
    """Model calls of the two evaluations a training stage runs, if every episode hits the turn cap."""
    return 2 * min(eval_cases, stage.eval_limit or eval_cases) * stage.turn_cap


def rl_step_worst_case(rl: TrainConfig) -> int:
    """Model calls of one GRPO step: every prompt's group of attempts running to the turn cap."""
    return max(1, rl.batch_size // rl.group_size) * rl.group_size * rl.turn_cap


def replay_worst_case(config: CompanyConfig) -> int:
    """Model calls of the replay: one episode of the RL export, at the RL turn cap."""
    return config.rl.turn_cap


def stage_worst_case(stage: str, config: CompanyConfig, eval_cases: int) -> int:
    """Model calls ``stage`` may need at most (the RL stage also keeps the replay's share in reserve)."""
    if stage == "sft":
        return evaluations_worst_case(config.sft, eval_cases)
    if stage == "rl":
        return (evaluations_worst_case(config.rl, eval_cases) + rl_step_worst_case(config.rl)
                + replay_worst_case(config))
    return replay_worst_case(config) if stage == "replay" else 0


class JobBudget:
    """What the job has spent (over earlier runs and this one) against its :class:`CompanyBudgets`."""

    def __init__(self, limits: CompanyBudgets, active_seconds: float, model_calls: int) -> None:
        self.limits = limits
        self.active_before = active_seconds
        self.model_calls = model_calls
        self.started = time.monotonic()

    def active_seconds(self) -> float:
        """Active seconds of the job so far (earlier runs plus this one)."""
        return self.active_before + time.monotonic() - self.started

    def out_of_time(self) -> bool:
        """Whether the active minutes are spent."""
        return self.active_seconds() >= self.limits.max_minutes * 60

    def minutes_left(self) -> float:
        """Active minutes left."""
        return self.limits.max_minutes - self.active_seconds() / 60

    def calls_left(self) -> int:
        """Model calls left."""
        return self.limits.max_model_calls - self.model_calls

    def spend(self, model_calls: int) -> None:
        """Count a stage's model calls."""
        self.model_calls += model_calls

    def short_for(self, stage: str, config: CompanyConfig, eval_cases: int) -> tuple[int, int] | None:
        """(worst case, calls left) when ``stage``'s worst case no longer fits the model calls left, else None."""
        need, remaining = stage_worst_case(stage, config, eval_cases), self.calls_left()
        return None if remaining >= need else (need, remaining)

    def rollout_allowance(self, config: CompanyConfig, eval_cases: int) -> int:
        """GRPO's own ``max_model_calls``: what is left after its two evaluations and the replay."""
        return self.calls_left() - evaluations_worst_case(config.rl, eval_cases) - replay_worst_case(config)

    def limit(self, budget: str) -> str:
        """The limit of one of :data:`BUDGETS`, in words."""
        if budget == "max_minutes":
            return f"{self.limits.max_minutes:g} active minutes"
        return f"{self.limits.max_model_calls} model calls"


def sft_calls(report: SFTReport) -> tuple[int, bool]:
    """(model calls, exact) of the SFT stage: the report counts both evaluations' turns."""
    return report.model_calls, True


def rl_calls(report: GRPOReport) -> tuple[int, bool]:
    """(model calls, exact) of the RL stage: its rollouts plus its evaluations, both reported."""
    return report.model_calls + report.eval_model_calls, True
