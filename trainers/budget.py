"""Budgets and cancellation, enforced the same way by every method and target, at step boundaries.

A training step is never interrupted: before each step the trainer asks :meth:`Budget.exhausted`
whether the next step may start. The first reason it gets (a cancellation, ``max_model_calls``,
``max_minutes``) ends the run at that boundary; the model trained so far is still exported and
evaluated, and the reason is recorded as ``stopped_by``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Log = Callable[[str], None]
"""Where a trainer writes its progress lines (the CLI sends them to stderr)."""
Stop = Callable[[], str | None]
"""Polled at step boundaries: a reason to stop (a cancellation, an outer budget), or None to go on."""


@dataclass
class Budget:
    """Model-call, wall-clock and caller-supplied stop conditions of one training run."""

    max_model_calls: int | None
    """Most model calls (generated turns of rollouts) training may make; None: no limit."""
    max_minutes: float | None
    """Most minutes of training; None: no limit."""
    stop: Stop | None
    """The caller's own stop condition (cancellation, a job-level budget)."""
    started: float = field(default_factory=time.monotonic)
    model_calls: int = 0
    """Model calls made so far (the trainer adds its own)."""
    stopped_by: str | None = None
    """The first reason :meth:`exhausted` gave, kept for the record."""

    def exhausted(self, next_step_calls: int = 0) -> str | None:
        """Why the next step must not start (it could pass a budget), or None; the reason is kept."""
        reason = self.stop() if self.stop is not None else None
        if not reason and self.max_model_calls is not None and \
                self.model_calls + next_step_calls > self.max_model_calls:
            reason = "max_model_calls"
        if not reason and self.max_minutes is not None and self.minutes() >= self.max_minutes:
            reason = "max_minutes"
        if reason and self.stopped_by is None:
            self.stopped_by = reason
        return reason or None

    def minutes(self) -> float:
        """Minutes since the budget started."""
        return (time.monotonic() - self.started) / 60

    def step_stop(self) -> str | None:
        """:meth:`exhausted` for a step that makes no model calls (an SFT optimizer step)."""
        return self.exhausted(0)
