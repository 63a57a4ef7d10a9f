"""What a trainer's progress line says: ``step N/M``, ``loss X`` (SFT) and ``reward X`` (GRPO).

The trainers log lines like ``step 10/24: loss 1.2345`` and ``GRPO step 1/4: reward 0.25, …``; the worker reads
the latest of them into a job's :class:`~.records.Progress`, and the Train panel reads all of them into the
per-step chart. One reading, here.
"""

from __future__ import annotations

import re

from .records import Record

STEP = re.compile(r"step (\d+)/(\d+)")
LOSS = re.compile(r"loss (-?[0-9.]+)")
REWARD = re.compile(r"reward (-?[0-9.]+)")


class StepLine(Record):
    """One progress line's numbers."""

    step: int
    """The step reached."""
    steps: int
    """Steps planned."""
    loss: float | None = None
    """The SFT loss it reports."""
    reward: float | None = None
    """The GRPO mean reward it reports."""


def _number(pattern: re.Pattern[str], message: str) -> float | None:
    found = pattern.search(message)
    if found is None:
        return None
    try:
        return float(found.group(1).rstrip("."))
    except ValueError:
        return None


def step_line(message: str) -> StepLine | None:
    """The numbers of a progress line, or None when it names no step."""
    step = STEP.search(message)
    if step is None:
        return None
    return StepLine(step=int(step.group(1)), steps=int(step.group(2)), loss=_number(LOSS, message),
                    reward=_number(REWARD, message))
