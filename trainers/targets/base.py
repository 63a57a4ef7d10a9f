"""What a training target is: the :class:`Target` interface every place a run is planned or started asks.

A target says where a run happens. It answers three questions and does one thing:

* :meth:`Target.refusal` — can this method/option combination run on it at all (else why not, with what can);
* :meth:`Target.plan` — what it needs, whether this machine has it, and what it costs (the plan.json sections);
* :meth:`Target.gate` — is spending allowed (a paid target refuses before anything is written);
* :meth:`Target.run` — train: the run skeleton's fit and export here (:class:`LocalTarget`), or a remote round
  trip that returns a verified export.

The CLI, :mod:`trainers.plan`, :mod:`trainers.run` and the company pipeline ask the target
(:func:`trainers.targets.registry.target_for`); none compares a target's name. A new target is one module
holding its :class:`Target` subclass (and its settings model, a nested section of ``TrainConfig``) plus
one line in :mod:`trainers.targets.registry`; a target whose plan adds a section of a new kind also types it in
:class:`trainers.plan_record.PlanSections` (plan.json is one strict record, so an untyped section is refused).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from trainers.budget import Log, Stop
    from trainers.catalog import ResolvedBase
    from trainers.config import TrainConfig
    from trainers.eval_record import TrainingReport
    from trainers.fit import Trainer
    from trainers.grpo import GRPOBackend, PolicySource
    from trainers.plan_record import PlanBasis, PlanRecord, TargetPlan
    from world_format.kit import Kit


class Target(ABC):
    """One place training can run. Subclasses set :attr:`name` and implement the four methods."""

    name: ClassVar[str]
    """``--target`` value (the registry's key)."""

    def refusal(self, config: TrainConfig) -> str | None:
        """Why ``config`` cannot run on this target (with what can), or None when it can. No I/O."""
        return None

    def preflight_skips(self, config: TrainConfig) -> frozenset[str]:
        """Names of :data:`trainers.preflight.CHECKS` that do not apply on this machine (the target makes them
        where it runs); none by default."""
        return frozenset()

    @abstractmethod
    def plan(self, config: TrainConfig, kit: Kit, base: ResolvedBase, record: PlanBasis,
             row_tokens: Sequence[int]) -> TargetPlan:
        """Needs, whether they are met here, and the cost sections, for a plan whose common part is ``record``
        (rows, tokens, base…); ``row_tokens`` is each row's token count (empty when the tokenizer is not here).
        Asked whether or not :meth:`refusal` refuses (a dry run records both); ConfigError when the run cannot
        fit."""

    def gate(self, config: TrainConfig, environ: Mapping[str, str]) -> None:
        """Refuse (SpendGateError) before anything is written when the run would spend money unconfirmed."""
        return None

    @abstractmethod
    def run(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
            log: Log, stop: Stop | None) -> TrainingReport:
        """Train a planned run; return (and write) its eval.json record with a verified export in ``OUT/export``."""


class LocalTarget(Target):
    """A target that trains in this process: the run skeleton (:func:`trainers.run.run_skeleton`) with the
    target's :meth:`trainer` (SFT) and :meth:`grpo_backend` (GRPO's decoding and update)."""

    @abstractmethod
    def sft_trainer(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                    plan_record: PlanRecord) -> Trainer:
        """The SFT :class:`~trainers.fit.Trainer` of this target."""

    @abstractmethod
    def grpo_backend(self, config: TrainConfig, source: PolicySource) -> GRPOBackend:
        """The target's half of GRPO (:class:`~trainers.grpo.GRPOBackend`)."""

    def trainer(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                plan_record: PlanRecord) -> Trainer:
        """The :class:`~trainers.fit.Trainer` of ``config.method`` on this target."""
        if config.method == "grpo":
            from trainers.grpo import GRPOTrainer

            return GRPOTrainer(config, kit, rows, plan_record)
        if config.method == "rft":  # local-torch only: the other targets refuse it
            from trainers.rft import RFTTrainer

            return RFTTrainer(config, kit, rows, plan_record)
        return self.sft_trainer(config, kit, rows, plan_record)

    def run(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
            log: Log, stop: Stop | None) -> TrainingReport:
        """The run skeleton here, with this target's trainer; a token cap the plan left open (the base's tokenizer
        was not here then) is resolved against the rows first (:func:`trainers.turn_tokens.resolve_for_base`)."""
        from trainers.run import run_skeleton
        from trainers.turn_tokens import resolve_for_base

        if config.max_new_tokens is None:
            config = resolve_for_base(config, rows)
        return run_skeleton(config, kit, self.trainer(config, kit, rows, plan_record), log, stop)
