"""What the pod is told to run: its start command, its bootstrap program, the steps of the job and its config.

The pod trains with the run's own :class:`~trainers.config.TrainConfig`, resolved on the host and
shipped in the bundle as ``config.json`` (:func:`pod_config`): ``blobkit train --config config.json``
on the pod, never a re-built list of training flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.config import TrainConfig
from trainers.plan_record import BaseRecord
from trainers.targets.local_torch import LocalTorchSettings

from .settings import RunPodSettings

POD_COMMAND = "python3 -c \"import os; exec(os.environ['BLOBKIT_POD_PROGRAM'])\""
"""The container command (``args`` of the create request): run the bootstrap carried in the env."""
POD_PROGRAM = Path(__file__).with_name("pod_program.py").read_text(encoding="utf-8")
"""The pod's bootstrap (stdlib only): the text of :mod:`trainers.runpod.pod_program`, carried in
``BLOBKIT_POD_PROGRAM`` and run by :data:`POD_COMMAND`."""


CONFIG_FILE = "config.json"
"""The pod's resolved TrainConfig, at the top of the unpacked bundle."""
TRAIN_ARGV = ("{python}", "-m", "blobkit.cli", "train", "--config", CONFIG_FILE, "--json")
"""The pod's training step: ``blobkit train`` on the shipped config."""


def train_budget_minutes(config: TrainConfig, settings: RunPodSettings) -> float:
    """The ``--max-minutes`` training gets on the pod: most of what the pod's watchdog allows."""
    max_seconds = config.runpod.max_hours * 3600
    budget = (max_seconds - settings.pod_margin(max_seconds)) * 0.85 / 60
    return max(0.01, round(min(budget, config.max_minutes) if config.max_minutes else budget, 2))


def pod_config(config: TrainConfig, base: BaseRecord, settings: RunPodSettings) -> TrainConfig:
    """The run's config as the pod trains with it: paths inside the unpacked bundle, GRPO on local-torch with one
    rank per GPU (``--processes`` = ``--gpus``), and the training budget the pod allows as ``max_minutes``.
    Shipped as :data:`CONFIG_FILE` in the bundle."""
    local_base = base.source in ("local", "registry")
    return config.model_copy(update={
        "kit": Path("kit"), "init_adapter": Path("init_adapter"), "base": "base" if local_base else config.base,
        "data": Path("data/rows.jsonl") if config.data is not None else None, "out": Path("out"),
        "method": "grpo", "target": "local-torch", "dry_run": False, "confirm_spend": False,
        "local_torch": LocalTorchSettings(processes=config.runpod.gpu_count),
        "max_minutes": train_budget_minutes(config, settings)})


def pod_steps(settings: RunPodSettings) -> list[dict[str, Any]]:
    """The commands the pod runs in the unpacked bundle, in order (``{python}`` is the pod's Python)."""
    steps = []
    if settings.install:
        steps.append({"name": "install", "argv": ["{python}", "-m", "pip", "install", "--quiet", "./src[train]"]})
    steps.append({"name": "train", "argv": list(TRAIN_ARGV)})
    steps.append({"name": "pack", "argv": ["{python}", "-m", "trainers.runpod", "pack-results", "out",
                                           "results.tar.zst", "results.json"]})
    return steps
