"""The ``runpod`` target: GRPO on a rented GPU pod behind the spend gate, returning a verified export.

Its settings are ``TrainConfig.runpod`` (:class:`RunPodTargetSettings`: GPU type and count, the pod's hour
limit); the machinery (client, bundle, store, pod, results) is :mod:`trainers.runpod`. SFT runs locally first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .base import Target

if TYPE_CHECKING:
    from trainers.budget import Log, Stop
    from trainers.catalog import ResolvedBase
    from trainers.config import TrainConfig
    from trainers.eval_record import TrainingReport
    from trainers.plan_record import PlanBasis, PlanRecord, TargetPlan
    from world_format.kit import Kit


class RunPodTargetSettings(BaseModel):
    """``TrainConfig.runpod``: the pod a runpod run rents."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_hours: float = Field(2.0, gt=0)
    """runpod: the pod terminates itself (and the host terminates it) after this many hours."""
    gpu_type: str = "NVIDIA GeForce RTX 4090"
    """runpod: GPU type id from RunPod's catalog."""
    gpu_count: int = Field(1, ge=1, le=8)
    """runpod: GPUs per pod. With N > 1 the pod trains N data-parallel ranks, one per GPU (the local-torch
    --processes path: torch's elastic launcher, as accelerate launch uses); the spend gate's price and maximum cost
    count every GPU."""


class RunPod(Target):
    """GRPO on a RunPod pod, warm-started from a local SFT export."""

    name: ClassVar[str] = "runpod"

    def refusal(self, config: TrainConfig) -> str | None:
        """GRPO only, with a batch that splits over the GPUs."""
        if config.method != "grpo":
            return ("runpod runs GRPO only: train SFT locally first (--target local-torch or local-mlx), then pass "
                    "its export with --init-adapter to --method grpo --target runpod")
        gpus = config.runpod.gpu_count
        if config.batch_size % gpus:
            return (f"--batch-size {config.batch_size} does not split over --gpus {gpus}: give a multiple of {gpus} "
                    "(the pod trains one rank per GPU)")
        return None

    def preflight_skips(self, config: TrainConfig) -> frozenset[str]:
        """A hub base is downloaded on the pod, not here; a local base is bundled, so it is checked here."""
        from pathlib import Path

        return frozenset() if Path(config.base).is_dir() else frozenset({"base"})

    def plan(self, config: TrainConfig, kit: Kit, base: ResolvedBase, record: PlanBasis,
             row_tokens: Sequence[int]) -> TargetPlan:
        """Needs a key, a store, a confirmation and an SFT export; adds the launch with its price (``runpod``)."""
        from trainers.plan_record import PlanSections, TargetPlan
        from trainers.runpod import RunPodSettings, launch_plan, missing_for_launch

        missing = missing_for_launch(config, RunPodSettings.from_env(os.environ), os.environ)
        sections = PlanSections() if self.refusal(config) else PlanSections(runpod=launch_plan(config, kit, record))
        return TargetPlan(name=self.name, needs=("RUNPOD_API_KEY", "--confirm-spend", "--init-adapter",
                                                 "BLOBKIT_RUNPOD_STORE_URL"), runs_here=not missing,
                          why_not="missing: " + ", ".join(missing) if missing else None, sections=sections)

    def gate(self, config: TrainConfig, environ: Mapping[str, str]) -> None:
        """The spend gate with the catalog price, before anything is written."""
        from trainers.runpod import gate_spend

        gate_spend(config, environ)

    def run(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
            log: Log, stop: Stop | None) -> TrainingReport:
        """Ship the bundle, run GRPO on the pod, collect the verified results, terminate the pod."""
        from trainers.runpod import train_runpod

        return train_runpod(config, kit, rows, plan_record.base, plan_record.runpod, log, stop)
