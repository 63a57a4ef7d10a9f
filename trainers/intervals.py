"""Pass rates with their size: case count, independent entities and a 95 % Wilson score interval.

A pass rate over a few dozen held-out cases is a rough estimate; every rate blobkit reports carries
how many cases it is over, how many independent entities those cases concern (cases about one
customer are not independent), and the interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

Z95 = 1.959963984540054
"""The standard normal quantile for a two-sided 95 % interval."""


def wilson_interval(passed: int, cases: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``passed`` successes in ``cases`` trials, rounded to 4 places ((0, 1) for none).

    E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA 22 (1927)
    209-212; the formula as in https://en.wikipedia.org/wiki/Binomial_proportion_confidence_interval#Wilson_score_interval
    (statsmodels' ``proportion_confint(method="wilson")`` gives the same numbers). Unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or ``cases`` passes.
    """
    if cases <= 0:
        return 0.0, 1.0
    p = passed / cases
    denominator = 1 + z * z / cases
    centre = (p + z * z / (2 * cases)) / denominator
    half = z * math.sqrt(p * (1 - p) / cases + z * z / (4 * cases * cases)) / denominator
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def share(part: int, whole: int) -> float:
    """``part / whole`` unrounded (0.0 for an empty whole): what a printed rate is formatted from, so a rate shows
    the fraction itself (186/220 prints 0.845), not the 4-place value the records keep rounded a second time."""
    return part / whole if whole else 0.0


def rate_record(outcomes: Iterable[tuple[bool, str]]) -> dict[str, Any]:
    """The pass rate of (passed, entity) outcomes, with its case count, passes, independent entities and the 95 %
    Wilson interval over cases (cases of one entity are correlated, so read it with ``entities`` beside it)."""
    listed = list(outcomes)
    passed = sum(1 for ok, _ in listed if ok)
    low, high = wilson_interval(passed, len(listed))
    return {"pass_rate": round(passed / len(listed), 4) if listed else 0.0, "cases": len(listed), "passed": passed,
            "entities": len({entity for _, entity in listed}), "interval_95": [low, high]}


def rate_text(record: dict[str, Any]) -> str:
    """``0.625 (30/48 cases, 12 entities; 95 % CI 0.48-0.75)``: a rate as the CLI prints it."""
    passed = record.get("passed", round(record["pass_rate"] * record["cases"]))
    low, high = record.get("interval_95") or wilson_interval(passed, record["cases"])
    entities = f", {record['entities']} entities" if "entities" in record else ""
    rate = share(passed, record["cases"]) if "passed" in record else record["pass_rate"]
    return (f"{rate:.3f} ({passed}/{record['cases']} cases{entities}; "
            f"95 % CI {low:.2f}-{high:.2f})")
