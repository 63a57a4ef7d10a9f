"""From a training request to what is pinned: the build, the ``blobkit train`` commands, or a worker recipe.

Defaults are the seed's. A kit (``launch: manual``): ``Qwen/Qwen3-8B``, GRPO on local-mlx, LoRA rank 16, 100
GRPO steps or 8 SFT epochs, seed 42, built with the builder's defaults. A worker job: the company recipe for the
base (:meth:`blobkit.company.CompanyConfig.for_base`) with 5 SFT epochs, 4 GRPO steps, 2 attempts per group and
budgets of 30 active minutes and 200 model calls; its evaluation plan evaluates as many held-out cases as the
model-call budget pays for in the worst case (every episode at the turn cap), all of them when it can.
"""

from __future__ import annotations

import shlex
from typing import Any

from blobkit.builder import BuildConfig
from blobkit.company import CompanyConfig
from blobkit.company.budget import evaluations_worst_case, replay_worst_case, rl_step_worst_case
from blobkit.company.config import with_turn_caps
from blobkit.errors import ConfigError
from world_format.canonical import canonical_json, sha256_hex

from .catalog import TINY, check_base
from .records import BasePin, Commands, EvalPlan, KitRef, Recipe, SourcePin, TrainingJobRequest

KIT_STEPS, KIT_EPOCHS = 100, 8
WORKER_EPOCHS, WORKER_STEPS, WORKER_GROUP = 5, 4, 2
WORKER_MINUTES, WORKER_MODEL_CALLS = 30.0, 200
REPLAY = "one held-out case replayed by the RL export, reloaded in a fresh process"


def kit_build(request: TrainingJobRequest) -> BuildConfig:
    """The build of a kit request: the builder's defaults, with the request's seed and case counts."""
    values: dict[str, Any] = {"seed": request.seed}
    for name in ("train_cases_per_task", "eval_cases_per_task"):
        if getattr(request, name) is not None:
            values[name] = getattr(request, name)
    return BuildConfig(**values)


def _flag_values(request: TrainingJobRequest) -> list[str]:
    amount = (["--steps", str(request.steps or KIT_STEPS)] if request.method == "grpo"
              else ["--epochs", f"{request.epochs or KIT_EPOCHS:g}"])
    return ["--base", request.base_model, "--method", request.method, "--lora-rank", str(request.lora_rank), *amount,
            "--seed", str(request.seed)]


def kit_commands(request: TrainingJobRequest, kit_name: str, job_id: str) -> Commands:
    """The exact ``blobkit train`` lines for the downloaded kit (run in the folder it was saved to)."""
    check_base(request.base_model)
    head = ["blobkit", "train", "--world", kit_name]
    base = [*head, *_flag_values(request), "--target", request.target, "--out", f"out/{job_id}"]
    sft_out = f"out/{job_id}-sft"
    sft = [*head, "--base", request.base_model, "--method", "sft", "--target", "local-torch", "--lora-rank",
           str(request.lora_rank), "--epochs", f"{request.epochs or KIT_EPOCHS:g}", "--seed", str(request.seed),
           "--out", sft_out]
    runpod = [*head, "--base", request.base_model, "--method", "grpo", "--target", "runpod", "--lora-rank",
              str(request.lora_rank), "--steps", str(request.steps or KIT_STEPS), "--seed", str(request.seed),
              "--init-adapter", f"{sft_out}/export", "--out", f"out/{job_id}-runpod", "--confirm-spend"]
    return Commands(dry_run=shlex.join([*base, "--dry-run"]), train=shlex.join(base),
                    runpod=f"{shlex.join(sft)} && {shlex.join(runpod)}")


def worker_config(request: TrainingJobRequest, eval_limit: int | None = None) -> CompanyConfig:
    """The company recipe of a worker request (``eval_limit`` caps the held-out cases each evaluation runs)."""
    training: dict[str, Any] = {"lora_rank": request.lora_rank, "seed": request.seed}
    if eval_limit is not None:
        training["eval_limit"] = eval_limit
    build: dict[str, Any] = {"seed": request.seed}
    for name in ("train_cases_per_task", "eval_cases_per_task"):
        if getattr(request, name) is not None:
            build[name] = getattr(request, name)
    try:
        return CompanyConfig.for_base(
            request.base_model, build=build,
            sft={**training, "epochs": request.epochs or WORKER_EPOCHS},
            rl={**training, "steps": request.steps or WORKER_STEPS, "group_size": request.group_size or WORKER_GROUP},
            budgets={"max_minutes": request.max_minutes or WORKER_MINUTES,
                     "max_model_calls": request.max_model_calls or WORKER_MODEL_CALLS})
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ConfigError(f"the worker recipe is invalid: {exc}") from None


def worst_case(config: CompanyConfig, cases: int) -> int:
    """Model calls of a job evaluating ``cases`` held-out cases, if every episode runs to its turn cap."""
    return (evaluations_worst_case(config.sft, cases) + evaluations_worst_case(config.rl, cases)
            + config.rl.steps * rl_step_worst_case(config.rl) + replay_worst_case(config))


def cases_affordable(config: CompanyConfig, in_kit: int) -> int:
    """The most held-out cases (up to ``in_kit``) whose worst case fits the model-call budget."""
    budget = config.budgets.max_model_calls
    return max((n for n in range(in_kit + 1) if worst_case(config, n) <= budget), default=0)


def eval_plan(request: TrainingJobRequest, in_kit: int, longest_case_turns: int) -> tuple[CompanyConfig, EvalPlan]:
    """The worker config with its evaluation plan, its turn caps derived from a kit of ``in_kit`` held-out cases
    whose longest case takes ``longest_case_turns`` assistant turns; ConfigError when the budget cannot pay for
    one case."""
    config = with_turn_caps(worker_config(request), longest_case_turns)
    cases = cases_affordable(config, in_kit)
    if cases == 0:
        raise ConfigError(f"max_model_calls {config.budgets.max_model_calls} cannot pay for evaluating even one "
                          f"held-out case (the worst case of one is {worst_case(config, 1)} model calls); raise it")
    if cases < in_kit:
        config = with_turn_caps(worker_config(request, eval_limit=cases), longest_case_turns)
    plan = EvalPlan(held_out_cases_in_kit=in_kit, cases_evaluated=cases, evaluations=["base", "sft", "rl"],
                    max_turns=max(config.sft.turn_cap, config.rl.turn_cap),
                    worst_case_model_calls=worst_case(config, cases), replay=REPLAY)
    return config, plan


def base_pin(base_model: str) -> BasePin:
    """The recipe's base: the catalog entry's revision, or tiny."""
    check_base(base_model)
    if base_model == TINY:
        return BasePin(id=TINY, source="tiny", revision=None)
    from trainers.catalog import CATALOG

    entry = next(e for e in CATALOG if e.id == base_model)
    return BasePin(id=base_model, source="hub", revision=entry.revision)


def recipe_sha256(recipe: Recipe) -> str:
    """A recipe's identity: the sha256 of its canonical JSON."""
    return sha256_hex(canonical_json(recipe.model_dump(mode="json")).encode("utf-8"))


def make_recipe(env_id: str, source: SourcePin, base_model: str, kit: KitRef, config: CompanyConfig, plan: EvalPlan,
                max_attempts: int) -> Recipe:
    """The immutable recipe of a worker job."""
    return Recipe(env_id=env_id, source=source, base_model=base_pin(base_model), kit=kit, config=config,
                  evaluation=plan, max_attempts=max_attempts)

