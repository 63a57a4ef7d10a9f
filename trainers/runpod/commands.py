"""What the pod is told to run: its start command, its bootstrap program and the steps of the job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.config import TrainConfig

from .settings import RunPodSettings

POD_COMMAND = "python3 -c \"import os; exec(os.environ['BLOBKIT_POD_PROGRAM'])\""
"""The container command (``args`` of the create request): run the bootstrap carried in the env."""
POD_PROGRAM = Path(__file__).with_name("pod_program.py").read_text(encoding="utf-8")
"""The pod's bootstrap (stdlib only): the text of :mod:`trainers.runpod.pod_program`, carried in
``BLOBKIT_POD_PROGRAM`` and run by :data:`POD_COMMAND`."""


def train_budget_minutes(config: TrainConfig, settings: RunPodSettings) -> float:
    """The ``--max-minutes`` training gets on the pod: most of what the pod's watchdog allows."""
    max_seconds = config.max_hours * 3600
    budget = (max_seconds - settings.pod_margin(max_seconds)) * 0.85 / 60
    return max(0.01, round(min(budget, config.max_minutes) if config.max_minutes else budget, 2))


def pod_train_args(config: TrainConfig, plan_record: Mapping[str, Any], settings: RunPodSettings) -> list[str]:
    """The ``blobkit train`` arguments the pod runs (paths relative to the unpacked bundle)."""
    local_base = (plan_record.get("base") or {}).get("source") == "local"
    args = ["train", "--kit", "kit", "--base", "base" if local_base else config.base, "--method", "grpo",
            "--target", "local-torch", "--out", "out", "--init-adapter", "init_adapter",
            "--lora-rank", str(config.lora_rank), "--steps", str(config.steps), "--seed", str(config.seed),
            "--lr", repr(config.learning_rate), "--batch-size", str(config.batch_size),
            "--max-length", str(config.max_length), "--max-turns", str(config.max_turns),
            "--max-new-tokens", str(config.max_new_tokens), "--group-size", str(config.group_size),
            "--temperature", repr(config.temperature),
            "--max-minutes", repr(train_budget_minutes(config, settings)), "--json"]
    if config.eval_limit is not None:
        args += ["--eval-limit", str(config.eval_limit)]
    if config.max_model_calls is not None:
        args += ["--max-model-calls", str(config.max_model_calls)]
    if config.full:
        args.append("--full")
    if config.data is not None:
        args += ["--data", "data/rows.jsonl"]
    return args


def pod_steps(config: TrainConfig, plan_record: Mapping[str, Any], settings: RunPodSettings) -> list[dict[str, Any]]:
    """The commands the pod runs in the unpacked bundle, in order (``{python}`` is the pod's Python)."""
    steps = []
    if settings.install:
        steps.append({"name": "install", "argv": ["{python}", "-m", "pip", "install", "--quiet", "./src[train]"]})
    steps.append({"name": "train", "argv": ["{python}", "-m", "blobkit.cli", *pod_train_args(config, plan_record,
                                                                                             settings)]})
    steps.append({"name": "pack", "argv": ["{python}", "-m", "trainers.runpod", "pack-results", "out",
                                           "results.tar.zst", "results.json"]})
    return steps
