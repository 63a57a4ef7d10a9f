"""The verdict on a whole episode: the task's verifier, then the world's procedures over all the agent did.

VCode (:mod:`world_format.vcode`) judges the final state, the calls and the answer; the procedure checker
(:mod:`world_format.procedure_check`) judges how the agent got there — identification first, no other customer's
rows read or named, no undeclared tool, every confirmed write asked about and answered "yes", no refused write
attempted. A violation fails the episode with the violation as the reason, even where the verifier alone would
pass it. Held-out evaluation, ``blobkit eval --trajectories``, replay, the gate's probes and the GRPO reward all
judge with :func:`judge`.
"""

from __future__ import annotations

from .confirmation import seed_lookup
from .events import episode_events
from .models import Task
from .procedure_check import ProcedureChecker
from .runtime import Episode
from .vcode import Verdict, evaluate


def violations(episode: Episode, answer: str | None, request: str = "") -> list[tuple[str, str]]:
    """Every (kind, what happened) procedure violation of the episode (the customer opened with ``request``)."""
    checker = ProcedureChecker.of(episode.runtime)
    return checker.violations(episode_events(episode, answer, request), seed_lookup(episode.runtime))


def judge(task: Task, episode: Episode, answer: str | None, *, credit: bool = False) -> Verdict:
    """The task's VCode verdict on the episode, failed with ``procedure: KIND: detail`` on its first procedure
    violation (a verifier error stays an error: the case cannot be judged). With ``credit`` the verdict carries the
    share of the verifier's checks that pass (:func:`~world_format.vcode.evaluate`), 0.0 after a procedure
    violation: a policy break earns nothing for the checks it met."""
    verdict = evaluate(task.vcode, episode, answer, task.answer, credit=credit)
    if verdict.outcome == "error":
        return verdict
    found = violations(episode, answer, task.instruction)
    if found:
        kind, detail = found[0]
        return Verdict("fail", f"procedure: {kind}: {detail}", verdict.checks, 0.0 if credit else None)
    return verdict
