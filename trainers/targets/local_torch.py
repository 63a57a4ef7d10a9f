"""The ``local-torch`` target: SFT (TRL) and GRPO (our loop) with torch in this process, CPU or one CUDA device.

It refuses nothing beyond the rules every target shares, needs the ``train`` extra (torch, transformers, peft,
TRL), and is the only target with a CPU-minutes estimate in its plan (:func:`trainers.plan.cpu_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import LocalTarget

if TYPE_CHECKING:
    from trainers.budget import Log, Stop
    from trainers.catalog import ResolvedBase
    from trainers.config import TrainConfig
    from trainers.eval_record import TrainingReport
    from trainers.fit import Trainer
    from trainers.grpo import GRPOBackend, PolicySource
    from trainers.plan_record import PlanBasis, PlanRecord, TargetPlan
    from world_format.kit import Kit

PACKAGES = ("torch", "transformers", "peft", "trl")
"""What local-torch imports (blobkit's ``train`` extra)."""


class LocalTorchSettings(BaseModel):
    """``TrainConfig.local_torch``: how many processes train, and who starts them."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    processes: int = Field(1, ge=1, le=64)
    """local-torch: data-parallel processes (ranks). 1 trains in this process; N starts N ranks (DDP: gloo on a
    CPU, nccl on GPUs, one GPU per rank) with the same global batch, learning-rate schedule and seed; rank 0
    alone evaluates, exports and writes. --batch-size must split evenly over them."""
    launcher: Literal["torchrun", "accelerate"] = "torchrun"
    """local-torch: what starts the ranks: torchrun (torch's elastic launcher, which accelerate launch uses for data
    parallel too) or accelerate (accelerate launch with your own `accelerate config`: FSDP, DeepSpeed, several
    machines; its num_processes unless --processes is given)."""

    generator: Literal["transformers", "vllm"] = "transformers"
    """local-torch: what writes GRPO's rollout turns: transformers (the default, CPU or GPU) or vllm (the vllm
    extra, CUDA only: batched generation with the current adapter loaded after each update; one process)."""

    @property
    def launched(self) -> bool:
        """Whether the fit runs in launched ranks rather than in this process."""
        return self.processes > 1 or self.launcher == "accelerate"


def _vllm_missing() -> list[str]:
    """What --generator vllm lacks here (vLLM, a CUDA GPU)."""
    import torch

    from trainers.vllm_turns import INSTALL

    return ([] if find_spec("vllm") else [f"vllm ({INSTALL})"]) + \
        ([] if torch.cuda.is_available() else ["a CUDA GPU (for --generator vllm)"])


class LocalTorch(LocalTarget):
    """SFT and GRPO with torch here."""

    name: ClassVar[str] = "local-torch"

    def refusal(self, config: TrainConfig) -> str | None:
        """A global batch that splits evenly over the processes."""
        processes = config.local_torch.processes
        if config.local_torch.generator == "vllm" and (config.method != "grpo" or config.local_torch.launched):
            return ("--generator vllm writes GRPO rollouts in one process: use it with --method grpo and without "
                    "--processes / --launcher accelerate")
        if config.method == "rft" and config.local_torch.launched:
            return ("--method rft samples and trains in one process: drop --processes / --launcher accelerate")
        if config.shared_prefix and config.local_torch.launched:
            return ("--shared-prefix runs its own loss in one process; over --processes the forward goes through "
                    "DDP: drop one of them")
        if config.decision_weight != 1 and config.local_torch.launched:
            return ("--decision-weight runs its own loss in one process; over --processes the forward goes through "
                    "DDP: drop one of them")
        if config.batch_size % processes:
            return (f"--batch-size {config.batch_size} does not split over --processes {processes}: give a "
                    f"multiple of {processes} (every rank takes the same share of the global batch)")
        return None

    def plan(self, config: TrainConfig, kit: Kit, base: ResolvedBase, record: PlanBasis,
             row_tokens: Sequence[int]) -> TargetPlan:
        """Needs the train extra; adds the CPU-minutes estimate (``cost``) when the rows were tokenized, SFT's
        memory estimate (``memory``; ConfigError with what would fit when it does not), and the world."""
        from trainers.plan import cpu_cost, sft_memory, trained_tokens
        from trainers.plan_record import PlanSections, TargetPlan, Tokenized

        missing = [name for name in PACKAGES if find_spec(name) is None]
        tokens = record.tokens if isinstance(record.tokens, Tokenized) else None
        cost = cpu_cost(base, config, trained_tokens(record, tokens, config)) if tokens else None
        memory = (sft_memory(base, config, list(row_tokens), tokens.shared_prefix_tokens)
                  if tokens and config.method == "sft" and row_tokens else None)
        from trainers.launch import world_plan

        world = world_plan(config)
        sections = PlanSections(cost=cost, memory=memory, world=world.record())
        if world.why_not:
            missing.append(world.why_not)
        if config.local_torch.generator == "vllm":
            missing += _vllm_missing()
        return TargetPlan(name=self.name, needs=("the train extra: " + ", ".join(PACKAGES), *world.needs),
                          runs_here=not missing, why_not=f"missing: {'; '.join(missing)}" if missing else None,
                          sections=sections)

    def run(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
            log: Log, stop: Stop | None) -> TrainingReport:
        """The run skeleton here; with --processes N (or --launcher accelerate) its fit runs in launched ranks
        (:mod:`trainers.launch`), each building this target's :meth:`trainer`."""
        if not config.local_torch.launched:
            return super().run(config, kit, rows, plan_record, log, stop)
        from trainers.launch import LaunchedTrainer
        from trainers.run import run_skeleton

        trainer = LaunchedTrainer(self.trainer(config, kit, rows, plan_record), config, kit, rows, plan_record)
        return run_skeleton(config, kit, trainer, log, stop)

    def sft_trainer(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                    plan_record: PlanRecord) -> Trainer:
        """TRL's SFTTrainer (:mod:`trainers.sft_torch`)."""
        from trainers.sft_torch import TorchSFTTrainer

        return TorchSFTTrainer(config, kit, rows, plan_record)

    def grpo_backend(self, config: TrainConfig, source: PolicySource) -> GRPOBackend:
        """Decoding and the update with torch (:mod:`trainers.grpo_torch`)."""
        from trainers.grpo_torch import TorchGRPOBackend

        return TorchGRPOBackend(config, source)
