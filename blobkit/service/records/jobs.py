"""Training jobs, recipes, attempts, progress and the worker's reports."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from blobkit.company.config import CompanyConfig
from blobkit.company.records import JobResults, ReplayOutcome
from trainers.targets.registry import TargetName

from .base import Record


class TrainingJobRequest(Record):
    """``POST …/training-jobs``. Unset fields take the seed's defaults for the launch (see each field)."""

    launch: Literal["manual", "worker"] = "manual"
    """``manual``: build a downloadable kit with the train commands filled in (201). ``worker``: queue a recipe a
    worker claims and runs (202)."""
    base_model: str = "Qwen/Qwen3-8B"
    """A catalog id (GET /api/v1/models) or ``tiny`` (the offline tiny model a worker builds from the kit)."""
    method: Literal["sft", "grpo"] = "grpo"
    """Manual kits: the training method the commands run (a worker job always runs SFT then GRPO)."""
    target: TargetName = "local-mlx"
    """Manual kits: where the commands train (a worker trains locally with torch)."""
    lora_rank: int = Field(16, ge=1, le=256)
    """LoRA rank."""
    steps: int | None = Field(None, ge=1, le=100000)
    """GRPO steps (default: 100 for a kit, 4 for a worker job)."""
    epochs: float | None = Field(None, gt=0, le=1000)
    """SFT epochs (default: 8 for a kit, 5 for a worker job)."""
    seed: int = Field(42, ge=0)
    """Seed for the build and for training."""
    group_size: int | None = Field(None, ge=2, le=64)
    """Worker jobs: GRPO attempts per group (default 2)."""
    max_minutes: float | None = Field(None, gt=0, le=10080)
    """Worker jobs: budget of active minutes over every attempt (default 30)."""
    max_model_calls: int | None = Field(None, ge=1, le=10_000_000)
    """Worker jobs: budget of model calls (generated assistant turns) over every attempt (default 200)."""
    max_attempts: int = Field(3, ge=1, le=20)
    """Worker jobs: attempts (claims) before a failing job is marked failed."""
    train_cases_per_task: int | None = Field(None, ge=1, le=10000)
    """Training cases minted per task (default: the company build's for the base)."""
    eval_cases_per_task: int | None = Field(None, ge=1, le=1000)
    """Held-out cases minted per task (default: the company build's, 6)."""


class KitRef(Record):
    """A kit archive held by the service."""

    name: str
    """The archive's file name (``<world>-train-kit.tar.zst``), as the commands name it."""
    download_url: str
    """Where to GET it (with X-API-Key); the response carries X-Content-SHA256."""
    sha256: str
    """sha256 of the archive."""
    bytes: int
    """Its size."""


class Commands(Record):
    """The exact ``blobkit train`` lines for the downloaded kit, with the job's config filled in."""

    dry_run: str
    """Writes plan.json only."""
    train: str
    """Trains, evaluates held-out cases, exports."""
    runpod: str
    """The same on RunPod GPUs (needs RUNPOD_API_KEY; spends money only with --confirm-spend)."""


class SourcePin(Record):
    """The world a recipe trains on, pinned."""

    sha256: str
    """sha256 of the uploaded source bytes."""
    bytes: int
    """Their size."""
    form: Literal["world.json", "package"]
    """world.json, or a packaged world as .tar.zst."""
    world_id: str
    """The world's identity id."""


class BasePin(Record):
    """The base model a recipe trains, pinned as far as the server can."""

    id: str
    """Catalog id, or ``tiny``."""
    source: Literal["hub", "tiny"]
    """``hub`` (a catalog id; a worker may resolve it offline from a registry package), or ``tiny`` (built by the
    worker from the kit's text with ``config.tiny``: the same kit and config give the same weights)."""
    revision: str | None
    """The hub revision (catalog); None for tiny."""


class EvalPlan(Record):
    """Which held-out cases are evaluated, and what that costs at most."""

    held_out_cases_in_kit: int
    """Held-out cases the pinned kit holds."""
    cases_evaluated: int
    """Cases each evaluation runs (the first ones of the kit when fewer than all: the model-call budget)."""
    evaluations: list[str]
    """The models evaluated on those cases, in order."""
    max_turns: int
    """Turn cap of an episode."""
    worst_case_model_calls: int
    """Model calls of every evaluation, the GRPO steps and the replay if every episode ran to the cap."""
    replay: str
    """The replay check."""


class Recipe(Record):
    """A worker job: immutable; its identity is the sha256 of its canonical JSON."""

    format: Literal["blobkit-recipe/1"] = "blobkit-recipe/1"
    """Recipe format version."""
    env_id: str
    """The environment."""
    source: SourcePin
    """The world."""
    base_model: BasePin
    """The base."""
    kit: KitRef
    """The kit the server built from the source with ``config.build``; a worker's own build must match its sha256."""
    config: CompanyConfig
    """The resolved company config: the build, the SFT and GRPO TrainConfigs, the tiny model, the budgets."""
    evaluation: EvalPlan
    """The evaluation plan."""
    max_attempts: int
    """Claims before a failing job is marked failed."""


class ArtifactPin(Record):
    """A file pinned by sha256."""

    path: str
    """Where it is, relative to its store."""
    sha256: str
    """Its sha256."""
    bytes: int
    """Its size."""


class CheckpointPin(Record):
    """A completed stage of an attempt, as the worker's job store checkpointed it."""

    stage: str
    """The stage (qualify, kit, sft, rl, evaluate, export, replay)."""
    completed_at: str | None
    """When it completed (ISO 8601)."""
    artifacts: dict[str, ArtifactPin]
    """Its artifacts, pinned."""


class Usage(Record):
    """What an attempt (or a whole job) spent."""

    active_minutes: float = 0.0
    """Active minutes."""
    model_calls: int = 0
    """Model calls (generated assistant turns)."""
    optimizer_updates: int = 0
    """Optimizer updates."""
    tokens: int = 0
    """Training tokens."""


class ProgressEvent(Record):
    """One progress event of an attempt, in order."""

    seq: int
    """Order within the attempt, from 1."""
    at: float
    """Unix time."""
    stage: str
    """The stage it belongs to."""
    level: Literal["info", "warning", "error"]
    """Severity."""
    message: str
    """What happened."""


class Progress(Record):
    """Where a running job is, against its budget."""

    stage: str | None = None
    """The stage running now (or last)."""
    stages_completed: list[str] = []
    """Stages checkpointed so far."""
    step: int | None = None
    """Training step within the stage, when the trainer reported one."""
    steps: int | None = None
    """Steps the stage plans."""
    loss: float | None = None
    """Last reported SFT loss."""
    reward: float | None = None
    """Last reported GRPO mean reward."""
    model_calls: int = 0
    """Model calls so far."""
    max_model_calls: int | None = None
    """The budget."""
    active_minutes: float = 0.0
    """Active minutes so far."""
    max_minutes: float | None = None
    """The budget."""


class Check(Record):
    """One check of a job: passed, failed or not run."""

    name: str
    """The check."""
    status: Literal["passed", "failed", "not_run"]
    """Its state."""
    detail: str | None = None
    """One line of why."""


class Outcome(Record):
    """How an attempt or a job ended."""

    status: Literal["succeeded", "failed", "cancelled", "lost"]
    """The ending."""
    message: str
    """One line."""
    stage: str | None = None
    """The stage it ended in."""
    stopped_by: str | None = None
    """A budget or a cancel, when one stopped it."""


class Attempt(Record):
    """One claim of a job by a worker."""

    attempt_id: str
    """``att_…``."""
    number: int
    """1 for the first claim, and so on."""
    worker_id: str
    """The worker that claimed it."""
    status: Literal["running", "succeeded", "failed", "cancelled", "lost"]
    """``lost``: its lease expired without a heartbeat."""
    claimed_at: float
    """Unix time of the claim."""
    heartbeat_at: float
    """Last heartbeat."""
    lease_expires_at: float
    """When the lease ends unless renewed."""
    ended_at: float | None
    """When it ended."""
    progress: Progress
    """Last reported progress."""
    usage: Usage
    """What it spent."""
    checkpoints: list[CheckpointPin]
    """Stages completed (by this attempt or before it, in the worker's job store)."""
    stages_reused: list[str]
    """Stages an earlier attempt had completed, which this one did not redo."""
    outcome: Outcome | None
    """How it ended."""
    events: list[ProgressEvent] = []
    """Its progress events, in order (left out of job lists)."""


class Artifact(Record):
    """Evidence uploaded for a job, pinned by sha256 (checked on arrival)."""

    name: str
    """Its name (eval.json, eval_cases_rl.json, training.png, export-manifest.json, results.json…)."""
    sha256: str
    """sha256."""
    bytes: int
    """Size."""
    attempt_id: str
    """The attempt that uploaded it."""
    download_url: str
    """Where to GET it."""


class TrainingJob(Record):
    """A training job: a downloadable kit (``launch: manual``) or a worker job (``launch: worker``)."""

    job_id: str
    """``tj_…``."""
    env_id: str
    """Its environment."""
    status: Literal["kit_ready", "queued", "running", "succeeded", "failed", "cancelled"]
    """``kit_ready``: a kit to train by hand (never a trained-agent result)."""
    launch: Literal["manual", "worker"]
    """How it is trained."""
    created_at: float
    """Unix time."""
    updated_at: float
    """Unix time of the last change."""
    base_model: str
    """The base."""
    tasks_count: int
    """Tasks admitted into the kit."""
    tasks_minted: int
    """Tasks minted."""
    tasks_rejected: int
    """Candidates the gate rejected."""
    tasks_persisted: bool
    """Whether tasks were written back into the world (never)."""
    sft_rows: int
    """Executed SFT rows in the kit."""
    sft_source: str
    """Where the rows come from (``reference_chain_replay``)."""
    train_cases: int
    """Training cases."""
    eval_cases: int
    """Held-out cases."""
    kit: KitRef
    """The kit archive."""
    commands: Commands | None = None
    """Manual kits: the train commands."""
    recipe_sha256: str | None = None
    """Worker jobs: the recipe's identity."""
    recipe: Recipe | None = None
    """Worker jobs: the recipe."""
    progress: Progress | None = None
    """Worker jobs: the latest attempt's progress."""
    usage: Usage | None = None
    """Worker jobs: summed over attempts."""
    results: JobResults | None = None
    """Measured results (held-out pass rates with cases, entities and intervals; RL - SFT; coverage)."""
    replay: ReplayOutcome | None = None
    """The replay verdict."""
    checks: list[Check] = []
    """Every check (``post_trained_agent`` is never passed for a kit)."""
    attempts: list[Attempt] = []
    """Every attempt, in order."""
    artifacts: list[Artifact] = []
    """Uploaded evidence."""
    cancel_requested: str | None = None
    """A pending or honoured cancel's reason."""
    outcome: Outcome | None = None
    """How it ended."""
    worker_command: str | None = None
    """Worker jobs: how to start a worker that claims it."""


class TrainingJobList(Record):
    """``GET …/training-jobs``."""

    jobs: list[TrainingJob]
    """Kits and worker jobs of the environment, oldest first (without attempts' events)."""




class WorkerCreate(Record):
    """``POST /api/v1/workers``."""

    name: str = Field("worker", min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._-]+$")
    """A name for people."""


class WorkerConnection(Record):
    """A new worker connection: its token is shown once."""

    worker_id: str
    """``wrk_…``."""
    name: str
    """Its name."""
    token: str
    """A worker key (tml-…), shown once; the store keeps only a salted hash."""
    command: str
    """The command to run on the company machine."""


class WorkerHello(Record):
    """What a worker says when it connects and while it waits."""

    bases: list[str] = Field(default_factory=list, max_length=64)
    """Bases it can run (catalog ids, ``tiny``)."""
    name: str | None = Field(None, max_length=80)
    """Its host name, for people."""


class Claim(Record):
    """A claimed job: the attempt and the recipe to run."""

    job_id: str
    """The job."""
    attempt: Attempt
    """The new attempt."""
    recipe: Recipe
    """What to run."""
    recipe_sha256: str
    """Its identity."""
    lease_seconds: float
    """Heartbeat before this many seconds pass, or the lease is lost."""
    source_url: str
    """Where to GET the world source (X-Content-SHA256)."""


class AttemptReport(Record):
    """A worker's heartbeat: progress, usage, new events and checkpoints."""

    progress: Progress
    """Where it is."""
    usage: Usage
    """What it spent in this attempt."""
    events: list[ProgressEvent] = Field(default_factory=list, max_length=10000)
    """Events since the last report."""
    checkpoints: list[CheckpointPin] = Field(default_factory=list, max_length=64)
    """Every stage completed so far."""
    stages_reused: list[str] = Field(default_factory=list, max_length=64)
    """Stages an earlier attempt had completed."""


class LeaseState(Record):
    """The answer to a heartbeat."""

    lease_expires_at: float
    """The renewed lease's end."""
    cancel_requested: str | None
    """Set when the job is to stop at the next safe point."""


class AttemptFinish(Record):
    """How the worker's run of the job ended."""

    status: Literal["succeeded", "failed", "cancelled"]
    """The local job's final status."""
    message: str
    """One line."""
    stage: str | None = None
    """The stage it ended in."""
    stopped_by: str | None = None
    """A budget or a cancel."""
    budget_exhausted: bool = False
    """Whether a budget ran out (then the job is not retried: budgets cover every attempt)."""
    usage: Usage
    """What the attempt spent."""
    results: JobResults
    """Measured results."""
    replay: ReplayOutcome | None = None
    """The replay verdict."""
    checks: list[Check]
    """Every check."""
    checkpoints: list[CheckpointPin]
    """Every completed stage."""
