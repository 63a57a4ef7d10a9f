"""plan.json as typed records: what :func:`trainers.plan.plan` returns and writes, one definition for every reader.

:class:`PlanBasis` is the part every target shares (config, base, tool format, rows, tokens, steps, turn cap,
rollout budget); a target adds :class:`PlanSections` (its estimates and launch) and :class:`TargetInfo`;
:class:`PlanRecord` is all of it, as plan.json holds it. The records are strict (an unknown key is an error), and
:meth:`PlanRecord.to_json` gives exactly the JSON the planner wrote before these records existed: a section that
does not apply is absent, not null (each record's ``_omitted`` names those fields, :class:`~trainers.record.Record`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from world_format.canonical import atomic_write_json

from .config import TrainConfig
from .memory_estimate import MemoryEstimate
from .record import Record


class BaseRecord(Record):
    """Where the base comes from (:meth:`trainers.catalog.ResolvedBase.record`); also in checkpoints and exports."""

    _omitted = frozenset({"id", "sha256", "origin"})
    source: Literal["hub", "local", "registry"]
    """``hub`` (a catalog id), ``local`` (a directory), ``registry`` (a registry package converted here)."""
    name_or_path: str
    """The hub id, or the directory the weights are in."""
    revision: str | None
    """The hub revision, ``local``, or ``package==version`` of a registry base."""
    id: str | None = None
    """The catalog id (absent for a directory outside the catalog)."""
    sha256: str | None = None
    """Fingerprint of the weights on disk (:mod:`trainers.base_identity`); absent for a hub base."""
    origin: dict[str, str] | None = None
    """A registry base's package, version, file and its sha256."""


class ProbeRecord(Record):
    """What the base's own chat template did with the probe conversation (:mod:`trainers.formats.probe`)."""

    renders_tools: bool
    """The tool list reached the prompt."""
    renders_tool_calls: bool
    """Assistant tool calls reached the text."""
    renders_tool_results: bool
    """Tool results reached the text."""
    error: str | None
    """Why rendering failed, if it did."""


class ChosenFormat(Record):
    """The tool format chosen for the base, once its tokenizer is loaded (:class:`trainers.formats.Choice`)."""

    name: str
    """The format (``blobkit``, ``native``, ``hermes``…)."""
    reason: str
    """Why this one."""
    probe: ProbeRecord | None
    """What the base's template did with the probe (None when the format was requested)."""
    source: str
    """Where the format's template comes from."""


class PendingFormat(Record):
    """The tool format asked for, when the base's tokenizer is not on this machine (chosen when it is loaded)."""

    name: str
    """The requested ``--tool-format``."""
    reason: str
    """Why it is not chosen yet."""


class Tokenized(Record):
    """Token counts of the rows under the chosen tool format."""

    tokenized: Literal[True]
    """The base's tokenizer is here and counted the rows."""
    tokens: int
    """Tokens in all rows."""
    max_row_tokens: int
    """The longest row."""
    mean_row_tokens: float
    """Mean tokens per row, to 1 place."""
    shared_prefix_tokens: int
    """Tokens every row starts with (system prompt and tool list)."""
    shared_prefix_share: float
    """shared_prefix_tokens / mean_row_tokens, to 4 places."""
    rows_over_max_length: list[int]
    """1-based rows longer than ``max_length`` (a plan with any is refused)."""


class NotTokenized(Record):
    """The rows could not be counted here."""

    tokenized: Literal[False]
    """The base's tokenizer is not on this machine."""
    reason: str
    """Why not."""


class EpisodeLimit(Record):
    """The turn cap resolved against the kit (:func:`trainers.episode_limit.episode_limit`)."""

    max_turns: int
    """The cap every episode runs under."""
    derived: bool
    """Whether it was derived from the kit (no ``--max-turns``)."""
    longest_case_turns: int
    """Assistant turns the kit's longest case needs."""
    longest_case: str | None
    """That case's id (None for a kit without cases)."""
    cases_over_limit: int
    """Cases the cap cuts (they cannot pass; only with ``--short-episodes``)."""
    slack: int | None
    """Turns added to the longest case when derived, else None."""


class TurnTokens(Record):
    """The token cap of a generated assistant turn, resolved against the training rows
    (:func:`trainers.turn_tokens.turn_tokens`)."""

    max_new_tokens: int
    """The cap every generated turn runs under (evaluation, rollouts, pass^k, replay)."""
    derived: bool
    """Whether it was derived from the rows (no ``--max-new-tokens``)."""
    longest_turn_tokens: int
    """Tokens the rows' longest assistant turn takes under the base's chat template, its end token included."""
    longest_turn_row: int | None
    """That turn's row, 1-based (None without rows)."""
    turns_over_limit: int
    """Training turns longer than the cap (they would be cut; only with ``--short-episodes``)."""
    slack: float | None
    """Share of the longest turn added when derived, else None."""


class RolloutBudget(Record):
    """The most model calls GRPO's planned steps (or RFT's sampling) may make."""

    max_model_calls: int
    """steps x per_step."""
    per_step: int
    """The worst case of one step."""
    how: str
    """How per_step is counted."""
    limit: int | None
    """``--max-model-calls`` (None: no limit)."""


class CpuCost(Record):
    """Estimated minutes of SFT on this machine's CPU (:func:`trainers.plan.cpu_cost`)."""

    estimated: Literal[True]
    """An estimate was made."""
    trained_tokens: int
    """Tokens SFT trains on (rows and grounding examples, times epochs)."""
    tokens_per_second: float
    """The measured rate, scaled to the base's size."""
    minutes: float | None
    """trained_tokens / tokens_per_second, in minutes, to 1 place."""
    base_parameters: int
    """Parameters of the base."""
    how: str
    """How the figure was made, and how rough it is."""


class NotEstimated(Record):
    """An estimate that was not made, and why."""

    estimated: Literal[False]
    """No estimate."""
    reason: str
    """Why not."""


class UnifiedMemory(Record):
    """local-mlx's unified-memory estimate for Apple silicon (:func:`trainers.memory.unified_memory_estimate`)."""

    _omitted = frozenset({"parts_gb"})
    estimate_gb: float
    """GB the run holds."""
    mac_memory_gb: int
    """The Mac it suggests (GB of unified memory)."""
    how: str
    """How it was estimated."""
    parts_gb: dict[str, float] | None = None
    """The estimate's parts, for a base on disk."""


class Transfer(Record):
    """How a RunPod run's files travel."""

    store: str | None
    """The transfer store (redacted), when one is configured."""
    to_pod: str
    """What goes to the pod, and how it is checked."""
    from_pod: str
    """What comes back, and how it is checked."""


class RunPodLaunch(Record):
    """The RunPod launch (:func:`trainers.runpod.price.launch_plan`): GPU, image, commands, limits, price."""

    api: str
    """RunPod's API."""
    gpu_type: str
    """The GPU."""
    gpu_count: int
    """GPUs in the pod."""
    cloud: str
    """RunPod's cloud (SECURE or COMMUNITY)."""
    image: str
    """The container image."""
    disk_gb: int
    """The pod's disk."""
    start_command: str
    """The container command."""
    pod_steps: list[list[str]]
    """The commands the pod runs, in order."""
    train_command: str
    """Its training step."""
    config_file: str
    """The config the pod trains with, and what it changes."""
    pod_config: TrainConfig
    """That config."""
    max_hours: float
    """``--max-hours``."""
    boot_timeout_seconds: float
    """How long the pod may take to boot."""
    pod_self_terminates_after_seconds: float
    """When the pod's watchdog ends it."""
    price_per_gpu_usd: float | None
    """List price of one GPU-hour (None: unknown)."""
    hourly_price_usd: float | None
    """Price of one pod-hour."""
    price_source: str
    """Where the price comes from, or why it is unknown."""
    estimated_max_cost_usd: float | None
    """GPU time at list price for the whole ``--max-hours``."""
    cost_note: str
    """What the cost leaves out."""
    transfer: Transfer
    """How the files travel."""
    kit_sha256: str
    """The kit shipped."""
    missing: list[str]
    """What still stands between this config and a launch (empty: it can launch)."""


class WorldSection(Record):
    """local-torch's processes (:meth:`trainers.launch.WorldPlan.record`)."""

    world_size: int | None
    """Ranks (None: left to the user's accelerate config)."""
    launcher: str
    """``in-process``, ``torchrun`` or ``accelerate``."""
    backend: str
    """``gloo``, ``nccl`` or ``none``."""
    per_rank_batch: int | None
    """Rows or episodes each rank takes of a step's global batch."""
    how: str
    """How the ranks share the work."""


class TargetInfo(Record):
    """plan.json's ``target``: what the target needs and whether this machine has it."""

    name: str
    """The target's name (``--target``)."""
    needs: tuple[str, ...]
    """What the target needs to run, in words (a package, a platform, a key, a confirmation)."""
    runs_here: bool
    """Whether this machine (and environment) has everything in ``needs``."""
    why_not: str | None = None
    """What is missing here when ``runs_here`` is false, else None."""


class PlanBasis(Record):
    """The part of a plan every target shares; what :meth:`trainers.targets.base.Target.plan` is given."""

    _omitted = frozenset({"rollout_budget", "turn_tokens"})
    config: TrainConfig
    """The run's config, its turn cap resolved (and its token cap, when the rows were tokenized here)."""
    base: BaseRecord
    """Where the base comes from."""
    tool_format: ChosenFormat | PendingFormat
    """The tool format, chosen (tokenizer here) or pending."""
    kit_sha256: str
    """The kit's sha256."""
    data: str
    """The rows' file."""
    data_sha256: str
    """Its sha256."""
    rows: int
    """Training rows."""
    grounding_examples: int
    """Extra SFT examples repeating the grounding prefixes (0 for GRPO)."""
    tokens: Tokenized | NotTokenized
    """Token counts, when the tokenizer is here."""
    estimated_optimizer_steps: int
    """SFT: batches per epoch times epochs; GRPO: its steps; RFT: the most (every sampled episode kept)."""
    vram_estimate_gb: int | float | None
    """The catalog's VRAM figure for the method (None outside the catalog)."""
    episode_limit: EpisodeLimit
    """The turn cap and what it cuts."""
    turn_tokens: TurnTokens | None = None
    """The token cap of a generated turn and what it cuts (None when the base's tokenizer is not here: the run
    resolves it where the base is)."""
    rollout_budget: RolloutBudget | None = None
    """GRPO and RFT only: the most model calls its steps (RFT: its sampling) may make."""


class PlanSections(Record):
    """The sections a target adds at the plan's top level (each absent when the target gives none)."""

    _omitted = frozenset({"cost", "memory", "unified_memory", "runpod", "world"})
    cost: CpuCost | NotEstimated | None = None
    """local-torch's CPU minutes (or why not); NotEstimated for any tokenized plan whose target gives none."""
    memory: MemoryEstimate | NotEstimated | None = None
    """local-torch's memory estimate for SFT (:mod:`trainers.memory_estimate`)."""
    unified_memory: UnifiedMemory | None = None
    """local-mlx's unified-memory estimate."""
    runpod: RunPodLaunch | None = None
    """runpod's launch with its price."""
    world: WorldSection | None = None
    """local-torch's processes."""


class TargetPlan(TargetInfo):
    """A target's part of a plan: what it needs, whether this machine has it, and the plan.json sections it adds."""

    sections: PlanSections = PlanSections()
    """plan.json sections the target adds beside the rest of the plan: ``cost`` (local-torch's CPU estimate),
    ``memory`` and ``world`` (local-torch's), ``unified_memory`` (local-mlx's), ``runpod`` (the launch, its price
    and maximum cost)."""

    def record(self) -> TargetInfo:
        """plan.json's ``target`` section (the sections go at the plan's top level)."""
        return TargetInfo(name=self.name, needs=self.needs, runs_here=self.runs_here, why_not=self.why_not)


class PlanRecord(PlanBasis, PlanSections):
    """plan.json: everything :func:`trainers.plan.plan` checked and estimated before anything trains."""

    _omitted = PlanBasis._omitted | PlanSections._omitted | {"unsupported"}
    target: TargetInfo
    """What the target needs and whether this machine has it."""
    unsupported: str | None = None
    """Why the method/target cannot run this config (a dry run records it; a run refuses)."""

    @classmethod
    def read(cls, path: Path) -> PlanRecord:
        """A plan.json as written (ValidationError naming the field when it is not one)."""
        return cls.model_validate_json(Path(path).read_bytes())

    def write(self, path: Path) -> None:
        """Write canonical plan.json (atomically)."""
        atomic_write_json(path, self.to_json())
