"""What a fit is and leaves behind: the :class:`Trainer` protocol the run skeleton drives (:mod:`trainers.run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from .budget import Budget, Log
from .eval_record import TrainingReport
from .evaluation import EvalSummary


@dataclass(frozen=True)
class FitResult:
    """What a fit leaves for the skeleton to export and report."""

    checkpoint: Path
    """Directory holding the trained weights (safetensors) and the tokenizer."""
    kind: Literal["lora", "full"]
    """A LoRA adapter or a whole model."""
    base: dict[str, Any]
    """The base an adapter applies to (source, name_or_path, revision), recorded in the export manifest."""
    optimizer_updates: int
    """Optimizer steps applied."""
    train_seconds: float
    """Seconds spent fitting."""
    history: list[tuple[int, float]]
    """Per step: the loss (SFT) or the mean reward (GRPO)."""
    stopped_by: str | None = None
    """Which budget or cancellation ended the fit early, else None."""
    details: dict[str, Any] = field(default_factory=dict)
    """Method-specific figures for the report (GRPO: steps, model calls, zero-variance groups)."""


class Trainer(Protocol):
    """One method on one target, as the skeleton drives it."""

    start_label: str
    """Name of the start policy in the report: "base" (SFT) or "sft" / "base" (GRPO)."""
    end_label: str
    """Name of the trained policy in the report: "sft" or "rl"."""

    def start_policy(self) -> tuple[Any, Any]:
        """(model, tokenizer) of the policy training starts from, for the start evaluation."""
        ...

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """Train, polling ``budget.exhausted`` before every step; leave the result in a checkpoint."""
        ...

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> TrainingReport:
        """The eval.json record of the run (the skeleton adds ``left_out``, ``eval_limit`` and decoding)."""
        ...
