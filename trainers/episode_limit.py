"""How many assistant turns an episode may take: derived from the kit unless set, never below what a case needs.

A case's reference conversation takes one assistant turn per reference call, one per scripted customer turn (the
question before it) and the final answer. A turn cap below that for some case means no model can pass it, and a
rate over such cases says nothing; so the cap a run uses (``TrainConfig.max_turns``, the cap of every evaluation
episode, GRPO rollout and replay) is, unless set, the longest case's turns plus :data:`EPISODE_SLACK`, and a set
cap below what a case needs is refused (ConfigError) unless ``short_episodes`` accepts it — a smoke run —, with
the cases it cuts counted in ``plan.json``'s ``episode_limit``.
"""

from __future__ import annotations

from world_format.kit import Kit, KitCase

from .config import TrainConfig
from .errors import ConfigError
from .plan_record import EpisodeLimit

EPISODE_SLACK = 2
"""Turns a derived cap adds to the longest case's: room for a look-up the reference does not need, or one retry."""


def case_turns(case: KitCase) -> int:
    """Assistant turns the case's reference conversation takes: its calls, its customer turns and the answer."""
    return len(case.task.reference) + len(case.task.turns) + 1


def longest_case(kit: Kit) -> tuple[KitCase | None, int]:
    """(the case of ``kit`` whose reference takes the most assistant turns, those turns) over both sides — GRPO
    rolls out training cases, evaluation held-out ones; (None, 1) for a kit without cases."""
    longest = max(kit.cases("train") + kit.cases("eval"), key=case_turns, default=None)
    return longest, case_turns(longest) if longest is not None else 1


def derived_cap(longest_case_turns: int) -> int:
    """The turn cap derived from a kit whose longest case takes ``longest_case_turns`` assistant turns."""
    return longest_case_turns + EPISODE_SLACK


def episode_limit(config: TrainConfig, kit: Kit) -> tuple[TrainConfig, EpisodeLimit]:
    """``config`` with ``max_turns`` resolved against ``kit``'s cases (both sides: GRPO rolls out training cases,
    evaluation held-out ones), and the record plan.json keeps: the cap, whether it was derived, the turns the
    longest case needs and which, and how many cases the cap cuts. ConfigError for a set cap below what a case
    needs, unless ``config.short_episodes``."""
    cases = kit.cases("train") + kit.cases("eval")
    longest, needed = longest_case(kit)
    derived = config.max_turns is None
    limit = derived_cap(needed) if config.max_turns is None else config.max_turns
    cut = sum(1 for case in cases if case_turns(case) > limit)
    if cut and not config.short_episodes:
        assert longest is not None
        raise ConfigError(f"--max-turns {limit} is below the {needed} assistant turns case {longest.case_id} needs "
                          f"({len(longest.task.reference)} calls, {len(longest.task.turns)} customer turn(s) and the "
                          f"answer): {cut} of the kit's {len(cases)} cases could never pass. Leave --max-turns unset "
                          f"(derived from the kit: {derived_cap(needed)}), or pass --short-episodes for a smoke "
                          "run that accepts it")
    record = EpisodeLimit(max_turns=limit, derived=derived, longest_case_turns=needed,
                          longest_case=longest.case_id if longest is not None else None, cases_over_limit=cut,
                          slack=EPISODE_SLACK if derived else None)
    return config.model_copy(update={"max_turns": limit}), record
