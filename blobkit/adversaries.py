"""Ready-made adversarial agents: each wrong agent of the registry written out as trajectories anyone can score.

``blobkit adversary --agent hedger`` writes, for every case of a kit where the agent applies, the
conversation that agent would have (its tool calls, then its answer) in the kit's row format;
``blobkit eval --trajectories`` re-executes those calls on an isolated copy of the seed and lets
each case's verifier judge them, exactly as it judges a trained model. On an admitted case every
adversary must fail, and the ``reference`` agent (the case's own chain and answer key) must pass.
The agents are the gate's (:data:`blobkit.builder.agents.AGENTS`), under the same names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainers.evaluation import case_prompt
from world_format.chain import final_answer
from world_format.kit import Kit, KitCase
from world_format.runtime import WorldRuntime

from .builder.agents import AGENTS, BY_NAME, NAMES, REFERENCE, CaseRun
from .builder.gate import attempt_messages, run_reference
from .builder.probes import Attempt
from .errors import ConfigError

AGENT_NAMES: tuple[str, ...] = (REFERENCE, *NAMES)
"""Every agent ``blobkit adversary`` writes: the reference, then the wrong agents in the gate's order."""


def _agent_attempt(agent: str, runtime: WorldRuntime, case: KitCase) -> Attempt | None:
    reference = run_reference(runtime, case.task)
    if agent == REFERENCE:
        return Attempt(reference.calls.calls, final_answer(case.task)[0], reference.calls.turns_at)
    other = (case.distractor, run_reference(runtime, case.distractor).calls) if case.distractor else None
    return BY_NAME[agent].plan(CaseRun(runtime, case.task, reference.calls, other))


def trajectories(kit: Kit, agent: str, sides: tuple[str, ...] = ("train", "eval")) -> Iterator[dict[str, Any]]:
    """``{"case_id", "agent", "messages"}`` for every case of ``sides`` where ``agent`` applies; ConfigError for an
    agent the registry does not have."""
    if agent not in AGENT_NAMES:
        raise ConfigError(f"unknown agent {agent!r}; agents: {', '.join(AGENT_NAMES)}")
    runtime = kit.world().runtime()
    try:
        for side in sides:
            for case in kit.cases(side):  # type: ignore[arg-type]
                planned = _agent_attempt(agent, runtime, case)
                if planned is not None:
                    prompt, _ = case_prompt(case, runtime.world)
                    yield {"case_id": case.case_id, "agent": agent,
                           "messages": attempt_messages(runtime, case.task, planned, prompt)}
    finally:
        runtime.close()


def stored_pass_rates(kit: Kit) -> dict[str, dict[str, int]]:
    """Per wrong agent: cases where it applies and how many it passes, from the gate's per-case verdicts
    (which ``blobkit verify`` re-runs, and ``blobkit eval`` can score from outside)."""
    rates: dict[str, dict[str, int]] = {}
    cases = kit.cases("train") + kit.cases("eval")
    for agent in AGENTS:
        applicable = [case.probes.get(agent.name) for case in cases
                      if case.probes.get(agent.name, "n/a") != "n/a"]
        rates[agent.name] = {"cases": len(applicable), "passed": sum(1 for outcome in applicable if outcome != "fail")}
    return rates


def reference_pass_rate(kit: Kit) -> dict[str, int]:
    """The reference agent (each case's own chain and answer key) re-run on every case of the kit and judged as the
    gate judges it (a clean run, the verifier's pass, no procedure violation): ``{"cases", "passed"}``; every case of
    a sound kit passes."""
    runtime = kit.world().runtime()
    try:
        cases = kit.cases("train") + kit.cases("eval")
        passed = 0
        for case in cases:
            run = run_reference(runtime, case.task)
            passed += run.clean and run.outcome.verdict.passed and not run.violations
    finally:
        runtime.close()
    return {"cases": len(cases), "passed": passed}
