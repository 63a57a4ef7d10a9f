"""Multi-process training: start the fit as N data-parallel ranks, relay a stop to them, fail loudly if one dies.

``blobkit train --target local-torch --processes N`` keeps the run skeleton in this process (start
evaluation, export, reload, end evaluation, report: rank 0's work) and runs only the fit in N ranks started by
torch's elastic launcher (``python -m torch.distributed.run --standalone``, what ``torchrun`` and
``accelerate launch`` use for data parallel), or by ``accelerate launch`` itself with the user's own
``accelerate config`` (``--launcher accelerate``: FSDP, DeepSpeed, several machines). Each rank runs
:mod:`trainers.rank_worker` on a spec written here: the resolved config, the plan, the rows. Rank 0 writes the
checkpoint and ``fit.json``; no other rank writes.

A stop from the caller (a cancellation, a job budget) is written to the spec's ``stop`` file, which every rank
reads at its step boundaries (:class:`~trainers.ranks.SyncedBudget` makes them agree), so all stop at the same
boundary and rank 0 still saves. The ranks run in their own session, so a terminal's Ctrl-C reaches this
process only (which relays it) rather than killing them mid-step. A rank that dies makes the launcher stop the
others and exit non-zero; a rank that hangs fails its collectives after
:data:`~trainers.ranks.DDP_TIMEOUT_SECONDS`; either way :class:`TrainerError` names the rank and points at
``OUT/launch.log``. Leaving this process any other way terminates the ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world_format.canonical import atomic_write_json, atomic_write_text, canonical_json
from world_format.kit import Kit

from .budget import Budget, Log
from .config import TrainConfig
from .errors import TrainerError
from .eval_record import TrainingReport
from .evaluation import EvalSummary
from .fit import FitResult, Trainer
from .plan_record import PlanRecord, WorldSection

LOG_MARK = "blobkit-rank0: "
"""Rank 0 prefixes its progress lines with this; they are relayed to the run's log."""
POLL_SECONDS = 0.5
"""How often the launcher's output and the caller's stop are checked."""
TERMINATE_GRACE_SECONDS = 30
"""How long the ranks get to exit after SIGTERM before SIGKILL, when this process leaves early."""


@dataclass(frozen=True)
class WorldPlan:
    """What plan.json records about the processes of a run (its ``world`` section)."""

    world_size: int | None
    """Ranks (None: left to the user's accelerate config)."""
    launcher: str
    """``in-process``, ``torchrun`` or ``accelerate``."""
    backend: str
    """``gloo`` (CPU), ``nccl`` (CUDA) or ``none`` (one process)."""
    per_rank_batch: int | None
    """Rows (SFT) or episodes (GRPO) each rank takes of a step's global batch."""
    needs: tuple[str, ...]
    """What the launch needs beyond the train extra."""
    why_not: str | None
    """What this machine lacks for it, else None."""

    def record(self) -> WorldSection:
        """The plan.json ``world`` section."""
        return WorldSection(world_size=self.world_size, launcher=self.launcher, backend=self.backend,
                            per_rank_batch=self.per_rank_batch,
                            how="data parallel: every rank takes per_rank_batch of the global --batch-size, "
                                "gradients are averaged, so steps, learning-rate schedule and seed are one "
                                "process's; rank 0 alone evaluates, exports and writes")


def world_plan(config: TrainConfig) -> WorldPlan:
    """The processes ``config`` asks for and whether this machine can start them."""
    import torch

    settings = config.local_torch
    if not settings.launched:
        return WorldPlan(1, "in-process", "none", config.batch_size, (), None)
    cuda = torch.cuda.device_count()
    backend = "nccl" if cuda else "gloo"
    size = settings.processes if settings.processes > 1 or settings.launcher == "torchrun" else None
    per_rank = config.batch_size // size if size else None
    why_not = None
    if not torch.distributed.is_available():
        why_not = "this torch build has no torch.distributed"
    elif cuda and size and size > cuda:
        why_not = f"--processes {size} needs {size} GPUs (one per rank); this machine has {cuda}"
    needs = ("torch.distributed (" + backend + ")",) + (("accelerate",) if settings.launcher == "accelerate" else ())
    return WorldPlan(size, settings.launcher, backend, per_rank, needs, why_not)


def launch_argv(config: TrainConfig, spec_dir: Path) -> list[str]:
    """The command that starts the ranks on ``spec_dir``."""
    settings = config.local_torch
    worker = ["-m", "trainers.rank_worker", str(spec_dir)]
    if settings.launcher == "accelerate":
        processes = ["--num_processes", str(settings.processes)] if settings.processes > 1 else []
        return [sys.executable, "-m", "accelerate.commands.launch", *processes, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(settings.processes), "--max-restarts", "0", *worker]


def fit_to_json(fit: FitResult) -> dict[str, Any]:
    """A :class:`~trainers.fit.FitResult` as JSON (what rank 0 leaves in ``fit.json``)."""
    return {**dataclasses.asdict(fit), "checkpoint": str(fit.checkpoint)}


def fit_from_json(value: dict[str, Any]) -> FitResult:
    """The :class:`~trainers.fit.FitResult` :func:`fit_to_json` wrote."""
    return FitResult(**{**value, "checkpoint": Path(value["checkpoint"]),
                        "history": [(int(step), float(v)) for step, v in value["history"]]})


def _failure(code: int, log_path: Path) -> TrainerError:
    """The error of a launch that exited ``code``: which rank failed first and how, from the launcher's log (its
    "Root Cause" section) and the last error a rank printed."""
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    cause = text[text.rfind("Root Cause"):] if "Root Cause" in text else text
    found = re.search(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", cause)
    if found:
        rank, exit_code = found.group(1), int(found.group(2))
        how = f"was killed by {signal.Signals(-exit_code).name}" if exit_code < 0 else f"exited with code {exit_code}"
        what = f"rank {rank} {how}"
    else:
        what = f"the launcher exited with code {code}"
    errors = re.findall(r"^(?:\[rank\d+\]: )?(\w*(?:Error|Exception): .*)$", text, flags=re.MULTILINE)
    said = f"; it said: {errors[-1][:400]}" if errors else ""
    return TrainerError(f"multi-process training failed: {what}{said}; every rank was stopped and nothing was "
                        f"exported (the ranks' output: {log_path})")


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the ranks' session, then SIGKILL it after the grace period."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(TERMINATE_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def _relay(log_path: Path, offset: int, log: Log) -> int:
    """Rank 0's progress lines written since ``offset`` to ``log``; the new offset."""
    if not log_path.is_file():
        return offset
    with log_path.open("rb") as handle:
        handle.seek(offset)
        chunk = handle.read()
    complete = chunk[: chunk.rfind(b"\n") + 1]
    for line in complete.decode("utf-8", errors="replace").splitlines():
        if LOG_MARK in line:
            log(line.split(LOG_MARK, 1)[1])
    return offset + len(complete)


def launch_fit(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
               budget: Budget, log: Log) -> FitResult:
    """Run the fit of ``config`` in launched ranks; rank 0's :class:`~trainers.fit.FitResult`.

    ``budget.stop`` (the caller's stop) is polled every :data:`POLL_SECONDS` and relayed to the ranks; their own
    budgets enforce ``max_minutes`` and ``max_model_calls``. TrainerError when a rank fails.
    """
    config.out.mkdir(parents=True, exist_ok=True)
    log_path = config.out / "launch.log"
    with tempfile.TemporaryDirectory(prefix="launch-", dir=config.out) as scratch:
        spec_dir = Path(scratch)
        atomic_write_text(spec_dir / "rows.jsonl", "".join(canonical_json(row) + "\n" for row in rows))
        atomic_write_json(spec_dir / "spec.json", {"config": config.as_json(), "plan": plan_record.to_json(),
                                                   "kit": str(kit.root), "rows": "rows.jsonl"})
        argv = launch_argv(config, spec_dir)
        log(f"starting {config.local_torch.processes} training processes: {' '.join(argv[1:4])} ... "
            f"(output in {log_path})")
        environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log_path.open("wb") as output:
            process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=environ,
                                       start_new_session=True)
        offset, relayed = 0, False
        try:
            while process.poll() is None:
                time.sleep(POLL_SECONDS)
                offset = _relay(log_path, offset, log)
                reason = budget.stop() if budget.stop is not None and not relayed else None
                if reason:
                    atomic_write_text(spec_dir / "stop", reason)
                    relayed = True
                    log(f"stopping every rank at the next step boundary: {reason}")
        finally:
            _terminate(process)
        _relay(log_path, offset, log)
        if process.returncode != 0 or not (spec_dir / "fit.json").is_file():
            raise _failure(process.returncode, log_path)
        fit = fit_from_json(json.loads((spec_dir / "fit.json").read_text(encoding="utf-8")))
    if fit.stopped_by and budget.stopped_by is None:
        budget.stopped_by = fit.stopped_by
    return fit


class LaunchedTrainer:
    """A :class:`~trainers.fit.Trainer` whose fit runs in launched ranks (:func:`launch_fit`); the start policy and
    the report are the wrapped trainer's, in this process."""

    def __init__(self, trainer: Trainer, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: PlanRecord) -> None:
        self.trainer, self.config, self.kit, self.rows, self.plan_record = trainer, config, kit, rows, plan_record
        self.start_label, self.end_label = trainer.start_label, trainer.end_label

    def start_policy(self) -> tuple[Any, Any]:
        """The wrapped trainer's start policy."""
        return self.trainer.start_policy()

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """The fit in the ranks."""
        return launch_fit(self.config, self.kit, self.rows, self.plan_record, budget, log)

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> TrainingReport:
        """The wrapped trainer's report."""
        return self.trainer.report(start, end, fit)
