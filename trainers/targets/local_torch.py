"""The ``local-torch`` target: SFT (TRL) and GRPO (our loop) with torch in this process, CPU or one CUDA device.

It refuses nothing beyond the rules every target shares, needs the ``train`` extra (torch, transformers, peft,
TRL), and is the only target with a CPU-minutes estimate in its plan (:func:`trainers.plan.cpu_cost`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, ClassVar

from .base import LocalTarget, TargetPlan

if TYPE_CHECKING:
    from trainers.catalog import ResolvedBase
    from trainers.config import TrainConfig
    from trainers.fit import Trainer
    from trainers.grpo import GRPOBackend, PolicySource
    from world_format.kit import Kit

PACKAGES = ("torch", "transformers", "peft", "trl")
"""What local-torch imports (blobkit's ``train`` extra)."""


class LocalTorch(LocalTarget):
    """SFT and GRPO with torch here."""

    name: ClassVar[str] = "local-torch"

    def plan(self, config: TrainConfig, kit: Kit, base: ResolvedBase, record: Mapping[str, Any]) -> TargetPlan:
        """Needs the train extra; adds the CPU-minutes estimate (``cost``) when the rows were tokenized."""
        from trainers.plan import cpu_cost, trained_tokens

        missing = [name for name in PACKAGES if find_spec(name) is None]
        sections = {"cost": cpu_cost(base, config, trained_tokens(record, config))} if record["tokens"].get(
            "tokenized") else {}
        return TargetPlan(name=self.name, needs=("the train extra: " + ", ".join(PACKAGES),), runs_here=not missing,
                          why_not=f"not installed: {', '.join(missing)} (pip install 'blobkit[train]')"
                          if missing else None, sections=sections)

    def sft_trainer(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                    plan_record: dict[str, Any]) -> Trainer:
        """TRL's SFTTrainer (:mod:`trainers.sft_torch`)."""
        from trainers.sft_torch import TorchSFTTrainer

        return TorchSFTTrainer(config, kit, rows, plan_record)

    def grpo_backend(self, config: TrainConfig, source: PolicySource) -> GRPOBackend:
        """Decoding and the update with torch (:mod:`trainers.grpo_torch`)."""
        from trainers.grpo_torch import TorchGRPOBackend

        return TorchGRPOBackend(config, source)
