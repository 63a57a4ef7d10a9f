"""Why held-out episodes failed: each failed episode sorted into one kind, counted per evaluation.

A failed episode gets the first kind that applies, in this order (the verifier's own reason decides where it can;
``world_format.vcode`` and ``world_format.judge`` write those reasons):

* ``verifier_error``: the verifier could not judge the episode (``outcome`` ``error``);
* ``turn_limit``: the episode ended without a final answer (the turn cap came first);
* ``procedure``: a declared procedure was broken (the customer not identified first, a confirmed write made
  before the customer said yes; the reason starts ``procedure:``), except naming another customer's row, which is
  an argument copied wrong (``wrong_arguments``);
* ``answer_missing_value``: the answer does not state the checked value (an ``answer check`` reason, not
  ``also states``);
* ``answer_states_other``: the answer states the checked value and also another one it must not;
* ``wrong_calls``: the tools called, in order, are not the reference chain's (a call missing, extra or out of
  order);
* ``wrong_arguments``: the reference chain's tools in its order, with an argument wrong (an identifier copied a
  character wrong, another row's key), so a trace or state check failed.

Shapes: :func:`failure_kind` takes one :class:`~trainers.evaluation.EpisodeResult`-like object (``verdict``,
``answer``, ``trace`` of events with ``tool``, ``reference``: the reference chain's tool names) and returns a kind
or None for a pass; :func:`count_failures` returns :class:`FailureKinds`, the counts eval.json records under each
evaluation's ``failures``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal, Protocol

from world_format.vcode import Verdict

from .record import Record

FailureKind = Literal["verifier_error", "turn_limit", "procedure", "answer_missing_value", "answer_states_other",
                      "wrong_calls", "wrong_arguments"]
"""The kinds, in the order they are tried."""
ANOTHER_CUSTOMER = "procedure: another_customer:"
"""The reason :func:`world_format.judge.judge` gives a call that names another customer's row."""


class _Event(Protocol):
    @property
    def tool(self) -> str: ...


class Judged(Protocol):
    """What the classification reads of an episode."""

    @property
    def verdict(self) -> Verdict: ...
    @property
    def answer(self) -> str | None: ...
    @property
    def trace(self) -> Sequence[_Event]: ...
    @property
    def reference(self) -> tuple[str, ...]: ...


class FailureKinds(Record):
    """Failed episodes of one evaluation, by kind (:mod:`trainers.failure_kinds`); they sum to the failed cases."""

    verifier_error: int
    """The verifier could not judge."""
    turn_limit: int
    """No final answer before the turn cap."""
    procedure: int
    """A declared procedure broken (identify first, confirm before a write)."""
    answer_missing_value: int
    """The answer does not state the checked value."""
    answer_states_other: int
    """The answer also states a value it must not."""
    wrong_calls: int
    """The tools called, in order, differ from the reference chain's."""
    wrong_arguments: int
    """The reference chain's tools with a wrong argument."""

    def text(self) -> str:
        """``failed: 5 wrong_arguments, 2 answer_missing_value`` (the kinds that occur, most first), or ``none
        failed``."""
        found = sorted(((n, k) for k, n in self.model_dump().items() if n), key=lambda item: (-item[0], item[1]))
        return "failed: " + ", ".join(f"{n} {kind}" for n, kind in found) if found else "none failed"


def failure_kind(result: Judged) -> FailureKind | None:
    """The episode's failure kind, or None when it passed."""
    verdict = result.verdict
    if verdict.passed:
        return None
    if verdict.outcome == "error":
        return "verifier_error"
    if result.answer is None:
        return "turn_limit"
    reason = verdict.reason
    if reason.startswith("procedure:"):
        return "wrong_arguments" if reason.startswith(ANOTHER_CUSTOMER) else "procedure"
    if reason.startswith("answer check"):
        return "answer_states_other" if "also states" in reason else "answer_missing_value"
    if tuple(event.tool for event in result.trace) != result.reference:
        return "wrong_calls"
    return "wrong_arguments"


def count_failures(results: Iterable[Judged]) -> FailureKinds:
    """Count the failed episodes of ``results`` by kind (passes are not counted)."""
    counts: Counter[str] = Counter(kind for kind in map(failure_kind, results) if kind is not None)
    return FailureKinds(**{name: counts.get(name, 0) for name in FailureKinds.model_fields})
