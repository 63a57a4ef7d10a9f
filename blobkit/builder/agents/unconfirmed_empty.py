"""``unconfirmed-empty``: an empty turn where the confirmation question goes, then the write."""

from __future__ import annotations

from ..probes import Attempt
from .base import CaseRun, WrongAgent
from .unconfirmed import instead_of_asking


def plan(case: CaseRun) -> Attempt | None:
    """The reference calls with an empty turn instead of each confirmation question."""
    return instead_of_asking(case, lambda turn: "")


AGENT = WrongAgent("unconfirmed-empty", "the right calls; an empty turn instead of the confirmation question, then "
                   "the write", "turns that confirm a write", plan, policy_skip=True)
