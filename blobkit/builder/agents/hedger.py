"""``hedger``: the answer plus a conflicting value."""

from __future__ import annotations

from ..probes import Attempt, alternatives, resolved_checks
from .base import CaseRun, WrongAgent


def plan(case: CaseRun) -> Attempt | None:
    """The answer key plus one conflicting value per checked answer; None when the answer is not checked.

    A checked answer with no conflicting value to name (a ``contains`` check without ``field`` or ``others``) gets
    ``"…"``, which no committal check can reject: such a task fails this probe.
    """
    task = case.task
    checks = resolved_checks(task)
    if task.answer is None or not checks:
        return None
    extra = [(alternatives(case.runtime, check, value) or ["…"])[0] for check, value in checks]
    return case.run.placed(case.run.calls, f"{task.answer} Or perhaps: {'; '.join(extra)}.")


AGENT = WrongAgent("hedger", "the right calls; the answer key plus a conflicting value", "cases with a checked answer",
                   plan)
