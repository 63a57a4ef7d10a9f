"""The ``local-mlx`` target: LoRA SFT and GRPO with mlx / mlx-lm (Apple silicon, or the ``mlx[cpu]`` wheels).

It trains LoRA adapters only, without packing; its plan carries the unified-memory estimate
(:func:`trainers.memory.unified_memory_estimate`). Evaluations run on torch in the run skeleton.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, ClassVar

from .base import LocalTarget

if TYPE_CHECKING:
    from trainers.catalog import ResolvedBase
    from trainers.config import TrainConfig
    from trainers.fit import Trainer
    from trainers.grpo import GRPOBackend, PolicySource
    from trainers.plan_record import PlanBasis, PlanRecord, TargetPlan
    from world_format.kit import Kit

PACKAGES = ("mlx", "mlx_lm", "torch", "transformers")
"""What local-mlx imports: mlx for training, torch and transformers for the evaluations."""


class LocalMLX(LocalTarget):
    """LoRA SFT and GRPO with mlx here."""

    name: ClassVar[str] = "local-mlx"

    def refusal(self, config: TrainConfig) -> str | None:
        """LoRA only; SFT without packing or a shared prefix; GRPO without constrained decoding or a KL term."""
        if config.method == "rft":
            return "--method rft samples and trains with torch: use --target local-torch"
        if config.method == "sft" and (config.full or config.packing):
            return ("local-mlx trains LoRA adapters without packing; drop --full/--packing or use "
                    "--target local-torch")
        if config.shared_prefix and config.method == "sft":
            return ("--shared-prefix runs SFT's shared prefix once per padded batch on local-torch; drop --packing "
                    "(packed rows share no prefix) or --shared-prefix, or use --target local-torch")
        if config.decision_weight != 1 and config.method == "sft":
            return "--decision-weight weighs torch's SFT loss: use --target local-torch"
        if config.decoding != "free" and config.method == "grpo":
            return (f"--decoding {config.decoding} masks torch logits; GRPO on local-mlx samples with mlx: use "
                    "--decoding free there (its evaluations can still be constrained with blobkit eval --model "
                    "--decoding)")
        if config.kl_coef and config.method == "grpo":
            return "--kl-coef scores tokens under the start policy in torch: use --target local-torch"
        if config.full:
            return ("GRPO on local-mlx trains a LoRA adapter; drop --full (to start from a fully trained SFT "
                    "model, pass its export with --init-adapter: GRPO trains an adapter on top of it)")
        return None

    def plan(self, config: TrainConfig, kit: Kit, base: ResolvedBase, record: PlanBasis,
             row_tokens: Sequence[int]) -> TargetPlan:
        """Needs mlx and mlx-lm; adds the unified-memory estimate (``unified_memory``)."""
        from trainers.memory import unified_memory_estimate
        from trainers.plan_record import PlanSections, TargetPlan

        missing = [name for name in PACKAGES if find_spec(name) is None]
        return TargetPlan(name=self.name, needs=("mlx and mlx-lm (Apple silicon, or mlx[cpu] on Linux)",
                                                 "torch and transformers (the evaluations)"),
                          runs_here=not missing, why_not=f"not installed: {', '.join(missing)} (pip install "
                          "'blobkit[mlx,train]')" if missing else None,
                          sections=PlanSections(unified_memory=unified_memory_estimate(base, config)))

    def sft_trainer(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                    plan_record: PlanRecord) -> Trainer:
        """mlx-lm's LoRA layers in our loop (:mod:`trainers.sft_mlx`)."""
        from trainers.sft_mlx import MLXSFTTrainer

        return MLXSFTTrainer(config, kit, rows, plan_record)

    def grpo_backend(self, config: TrainConfig, source: PolicySource) -> GRPOBackend:
        """Decoding and the update with mlx (:mod:`trainers.grpo_mlx`)."""
        from trainers.grpo_mlx import MLXGRPOBackend

        return MLXGRPOBackend(config, source)
