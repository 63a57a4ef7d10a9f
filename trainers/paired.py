"""Two methods on the same held-out cases: the paired difference, its 95 % interval, and McNemar's exact test.

Two pass rates over the same cases are not two independent samples: most cases pass or fail under both
methods, and only the cases where they disagree (the *discordant* pairs) carry evidence of a difference.
:func:`compare` pairs the verdicts case by case and reports:

* the four cells of the paired table (both passed, only the earlier method, only the later, neither);
* the difference of pass rates (later minus earlier) with a 95 % **paired bootstrap** interval: the
  independent entities are resampled with replacement (cases about one customer are correlated, so the unit
  resampled is the entity with all its cases, a cluster bootstrap), :data:`RESAMPLES` times from a seeded
  local RNG, and the interval is the 2.5th and 97.5th percentiles of the resampled differences (Efron and
  Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13; the same numbers on every machine);
* McNemar's **exact** two-sided p-value: under no difference each discordant pair is a fair coin, so the
  p-value is the binomial tail of the smaller discordant count, doubled and capped at 1 (McNemar,
  Psychometrika 12 (1947) 153-157; the exact form as in statsmodels' ``mcnemar(exact=True)``).

A difference is *shown* when its interval excludes 0 (``excludes_zero``); with a few dozen cases it rarely is.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from .errors import ScoreError
from .intervals import share

RESAMPLES = 10_000
"""Bootstrap resamples of the paired difference."""
SEED = 20_260_101
"""Seed of the bootstrap's local RNG (fixed: the same verdicts give the same interval everywhere)."""

Outcome = tuple[bool, str]
"""One case's verdict as the comparison reads it: (passed, the entity it concerns)."""


class PairedComparison(BaseModel):
    """Two methods' verdicts on the same cases, compared pair by pair."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    earlier: str
    """The method compared against (``base``, ``sft``)."""
    later: str
    """The method whose gain is measured (``sft``, ``rl``)."""
    cases: int
    """Cases both methods were judged on (each counted once)."""
    entities: int
    """Independent entities those cases concern (the unit the bootstrap resamples)."""
    both_passed: int
    """Cases both methods passed."""
    only_earlier: int
    """Cases only the earlier method passed (discordant)."""
    only_later: int
    """Cases only the later method passed (discordant)."""
    neither: int
    """Cases both methods failed."""
    difference: float
    """Later minus earlier pass rate over the cases, rounded to 4 places."""
    interval_95: tuple[float, float]
    """95 % paired (entity-cluster) bootstrap percentile interval of the difference, rounded to 4 places."""
    mcnemar_p: float
    """McNemar's exact two-sided p-value over the discordant pairs (1.0 when there are none), 4 places."""
    excludes_zero: bool
    """Whether the 95 % interval excludes 0: the data show a difference in its direction."""
    method: str
    """How the interval and the p-value were computed (resamples, seed)."""

    def text(self) -> str:
        """``sft - base: +0.152 (95 % CI +0.06 to +0.24, paired over 66 cases, 33 entities; McNemar p 0.002)``."""
        low, high = self.interval_95
        difference = share(self.only_later - self.only_earlier, self.cases)
        return (f"{self.later} - {self.earlier}: {difference:+.3f} (95 % CI {low:+.2f} to {high:+.2f}, paired "
                f"over {self.cases} cases, {self.entities} entities; McNemar p {self.mcnemar_p:.3g})")


def mcnemar_exact(only_earlier: int, only_later: int) -> float:
    """McNemar's exact two-sided p-value for the discordant counts (the binomial test of the smaller at p = 1/2)."""
    n = only_earlier + only_later
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_earlier, only_later) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def _percentile(sorted_values: list[float], share: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    position = share * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def bootstrap_interval(clusters: list[tuple[int, int]], resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, float]:
    """95 % percentile interval of sum(differences) / sum(cases) over clusters resampled with replacement.

    ``clusters``: per entity, (its cases, later passes minus earlier passes among them). (0, 0) for none.
    """
    if not clusters:
        return 0.0, 0.0
    rng = random.Random(seed)
    count = len(clusters)
    draws = []
    for _ in range(resamples):
        cases = gained = 0
        for _ in range(count):
            n, d = clusters[rng.randrange(count)]
            cases += n
            gained += d
        draws.append(gained / cases)
    draws.sort()
    return round(_percentile(draws, 0.025), 4), round(_percentile(draws, 0.975), 4)


def compare(earlier: Mapping[str, Outcome], later: Mapping[str, Outcome], *, earlier_name: str,
            later_name: str, resamples: int = RESAMPLES, seed: int = SEED) -> PairedComparison:
    """Pair two methods' verdicts by case id (``{case_id: (passed, entity)}``, one verdict per case each).

    Raises ScoreError when the two do not cover the same cases (naming one case only one of them has) or a
    case is given two different entities: a paired difference is over the same cases or it is not paired.
    """
    missing = sorted(set(earlier) ^ set(later))
    if missing:
        side = earlier_name if missing[0] in earlier else later_name
        raise ScoreError(f"{earlier_name} and {later_name} were not judged on the same cases: {len(missing)} case(s) "
                         f"only {side} has (first: {missing[0]}); compare them on the same held-out cases")
    cells = {"both": 0, "earlier": 0, "later": 0, "neither": 0}
    clusters: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case_id in sorted(earlier):
        (a, entity), (b, other) = earlier[case_id], later[case_id]
        if entity != other:
            raise ScoreError(f"case {case_id} concerns {entity!r} for {earlier_name} but {other!r} for {later_name}")
        cells["both" if a and b else "earlier" if a else "later" if b else "neither"] += 1
        clusters[entity][0] += 1
        clusters[entity][1] += int(b) - int(a)
    cases = len(earlier)
    low, high = bootstrap_interval([(n, d) for _, (n, d) in sorted(clusters.items())], resamples, seed)
    return PairedComparison(
        earlier=earlier_name, later=later_name, cases=cases, entities=len(clusters), both_passed=cells["both"],
        only_earlier=cells["earlier"], only_later=cells["later"], neither=cells["neither"],
        difference=round((cells["later"] - cells["earlier"]) / cases, 4) if cases else 0.0,
        interval_95=(low, high), mcnemar_p=round(mcnemar_exact(cells["earlier"], cells["later"]), 4),
        excludes_zero=low > 0 or high < 0,
        method=(f"paired bootstrap over entities ({resamples} resamples, seed {seed}), percentile interval; "
                "McNemar exact test over the discordant cases"))
