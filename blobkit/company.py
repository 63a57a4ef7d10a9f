"""The company pipeline: inspect an export, then run it as a durable, budgeted, resumable job.

:func:`inspect_source` compiles and qualifies a source without training and says plainly whether
it can be trained. :func:`create_job` queues a job in a :class:`~blobkit.jobs.JobStore`;
:func:`run_job` runs (or resumes) it through the stages

``qualify`` → ``kit`` → ``sft`` → ``rl`` → ``evaluate`` → ``export`` → ``replay``

checkpointing each completed stage, so a resumed job never redoes a finished stage.

* ``qualify``: validate the source, mint and gate into a throwaway directory (:func:`inspect_source`).
* ``kit``: freeze independent training and held-out cases and build the kit in the job directory;
  with ``--base-model tiny`` also build the offline tiny model from the kit's text.
* ``sft``: ``trainers.pipeline.run_training`` with ``method="sft"`` (which evaluates the base and the
  reloaded SFT export on the held-out cases).
* ``rl``: ``run_training`` with ``method="grpo"`` warm-started from the SFT export (which evaluates
  SFT and RL on the same held-out cases and reports ``rl_minus_sft``).
* ``evaluate``: gather the measured base/SFT/RL results and held-out coverage; nothing is re-run or
  invented here, every number names the stage that measured it.
* ``export``: verify the RL export's checksums and copy it into the job directory.
* ``replay``: ``python -m blobkit.cli replay`` in a fresh process on one held-out case.

Budgets (active minutes, model calls) and cancellation (``jobs cancel``, Ctrl-C) are honoured
through the ``stop`` callable the trainers poll at every optimizer step, and at every stage
boundary. Before SFT and the replay, the runner checks that the stage's worst case (every episode
running to its turn cap) fits the model calls left, because evaluations cannot be interrupted; GRPO
receives what is left (less a reserve for the replay) as its own ``max_model_calls`` and enforces it
at step boundaries. The time budget may be overrun by at most the evaluation or replay running when
it ran out, which is not interrupted mid-episode.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blobkit.builder import BuildConfig, build_kit
from blobkit.errors import BlobkitError, KitError, NotTrainableError, SourceError
from blobkit.jobs import JobError, JobStore, worker_id
from world_format.canonical import canonical_json, file_sha256, fsync_dir, replace_dir, sha256_hex, staging_dir
from world_format.kit import Kit, open_kit

TINY = "tiny"
STAGES = ("qualify", "kit", "sft", "rl", "evaluate", "export", "replay")
CHECKS = ("source_valid", "trainable", "kit_leakage_free", "kit_reproducible", "sft_updates_applied",
          "sft_beats_base", "rl_updates_applied", "rl_beats_sft", "heldout_evaluated", "export_verified",
          "replay_passed")
BUDGETS = ("max_minutes", "max_model_calls")
POLL_S = 0.5
REPLAY_STDERR_TAIL = 2000
REPLAY_ANSWER_CHARS = 1000
Echo = Callable[[str], None]


class CompanyConfig(BaseModel):
    """Everything a company job decides besides its source and base model (recorded in the job identity)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    seed: int = 42
    """Seed for minting, the split, the tiny model and training."""
    max_tasks: int = Field(12, ge=1, le=12)
    """Most tasks in the kit."""
    train_cases: int = Field(48, ge=1)
    """Training cases per task."""
    eval_cases: int = Field(1, ge=1)
    """Held-out cases per task (one per task keeps three evaluations inside the model-call budget)."""
    sft_epochs: float = Field(5, gt=0)
    """SFT epochs."""
    rl_steps: int = Field(4, ge=1)
    """GRPO steps."""
    group_size: int = Field(2, ge=2)
    """GRPO attempts per prompt."""
    rl_prompts_per_step: int = Field(1, ge=1)
    """GRPO prompts per step (each sampled ``group_size`` times)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of GRPO rollouts."""
    full: bool = False
    """Train all weights instead of LoRA (the default for the tiny model)."""
    lora_rank: int = Field(16, ge=1, le=512)
    """LoRA rank."""
    learning_rate: float = Field(2e-4, gt=0)
    """Peak learning rate (5e-3 for the tiny model)."""
    batch_size: int = Field(8, ge=1)
    """Rows per optimizer step."""
    max_length: int = Field(2048, ge=64)
    """Longest training row in tokens (longer rows are an error)."""
    eval_limit: int | None = Field(10, ge=1)
    """Evaluate at most this many held-out cases (None: all). Ten keeps the four evaluations (base, SFT, GRPO's
    start and RL), four GRPO steps and the replay within 200 model calls at 4 turns per episode."""
    max_turns: int = Field(4, ge=1)
    """Turn cap of an evaluation or replay episode."""
    max_new_tokens: int = Field(128, ge=8)
    """Tokens per generated assistant turn."""
    max_minutes: float = Field(30, gt=0)
    """Budget: active minutes of the whole job (summed over resumes)."""
    max_model_calls: int = Field(200, ge=1)
    """Budget: model calls (generated assistant turns) of the whole job."""
    tiny_hidden_size: int = Field(64, ge=8)
    """``--base-model tiny``: hidden size."""
    tiny_layers: int = Field(4, ge=1)
    """``--base-model tiny``: layers."""
    tiny_vocab_size: int = Field(600, ge=300)
    """``--base-model tiny``: tokenizer vocabulary size."""

    @classmethod
    def for_base(cls, base_model: str, **overrides: Any) -> CompanyConfig:
        """Defaults for ``base_model`` plus every override that is not None.

        The tiny model starts from random weights, so (as the demo does) it trains all weights at 5e-3 on
        up to 400 training cases per task: learning to copy ids and emails from scratch needs many
        distinct cases more than many epochs. Real bases train a LoRA adapter at 2e-4 on 48 cases per task.
        """
        values: dict[str, Any] = {"full": True, "learning_rate": 5e-3, "train_cases": 400} if base_model == TINY else {}
        values.update({name: value for name, value in overrides.items() if value is not None})
        return cls(**values)

    def build_config(self) -> BuildConfig:
        """The kit builder's configuration."""
        return BuildConfig(seed=self.seed, max_tasks=self.max_tasks, train_cases_per_task=self.train_cases,
                           eval_cases_per_task=self.eval_cases)


# --------------------------------------------------------------------------- the source


def source_sha256(path: Path) -> str:
    """sha256 of a world.json, or of the sorted (name, sha256) table of a packaged world directory."""
    path = Path(path)
    if path.is_dir():
        table = {entry.name: file_sha256(Path(entry.path)) for entry in sorted(os.scandir(path), key=lambda e: e.name)
                 if entry.is_file(follow_symlinks=False)}
        return sha256_hex(canonical_json(table).encode("utf-8"))
    if not path.is_file():
        raise SourceError(f"{path}: no such source (pass a world.json or a packaged world directory)")
    return file_sha256(path)


def _mcp_tool_names(document: Any) -> list[str] | None:
    """Tool names when the document is MCP tool schemas only (no identity, policies or state), else None."""
    tools = document.get("tools") if isinstance(document, dict) else document
    if isinstance(document, dict) and {"identity", "policies", "state"} & set(document):
        return None
    if not isinstance(tools, list) or not tools:
        return None
    if not all(isinstance(tool, dict) and "inputSchema" in tool for tool in tools):
        return None
    return [str(tool.get("name", "?")) for tool in tools]


def _mcp_report(report: dict[str, Any], names: list[str]) -> dict[str, Any]:
    reason = (f"MCP tool schemas alone ({len(names)} tool(s): {', '.join(names[:8])}) are not enough to train on: "
              "there are no policies, no realistic seeded state for the tools to act on, and no way to execute "
              "or verify a call; export a blobkit world (identity, policies, state with rows, tools with SQL, "
              "optionally tasks) — see spec/world-format.md")
    return {**report, "kind": "mcp_tool_schemas", "tools": names, "reasons": [reason],
            "verdict": "not trainable: MCP tool schemas only"}


def _world_facts(loaded: Any) -> dict[str, Any]:
    from blobkit.describe import world_summary

    world, summary = loaded.world, world_summary(loaded)
    anchors = {anchor.table: summary["tables"].get(anchor.table, 0) for anchor in world.state.anchors}
    return {
        "world": {"id": world.identity.id, "name": world.identity.name, "sha256": loaded.sha256,
                  "form": loaded.form},
        "policies": len(world.policies),
        "tools": [{"name": tool.name, "effect": tool.effect, "parameters": sorted(tool.parameters.get("properties",
                   {})), "preconditions": len(tool.preconditions)} for tool in world.tools],
        "state": {"tables": summary["tables"], "anchor_rows": anchors, "state_hash": summary["state_hash"]},
        "authored_tasks": len(world.tasks),
    }


def _admission(kit: Kit, record: dict[str, Any]) -> dict[str, Any]:
    """What minting and gating admitted, from a built kit."""
    leakage = kit.meta["leakage"]
    return {
        "tasks_admitted": record["tasks_count"], "tasks_minted": record["tasks_minted"],
        "tasks_authored": record["tasks_authored"], "tasks_rejected": record["tasks_rejected"],
        "templates": kit.meta["templates"],
        "rejected": [{"task_id": r["task_id"], "template": r["template"], "reasons": r["rejected_because"]}
                     for r in kit.jsonl("rejected.jsonl")],
        "train_cases": record["train_cases"], "eval_cases": record["eval_cases"], "sft_rows": record["sft_rows"],
        "independent_families": {"train": leakage["train_anchors"], "eval": leakage["eval_anchors"],
                                 "shared": leakage["shared_anchors"]},
        "kit_archive_sha256": record["kit"]["sha256"],
    }


def _qualify(path: Path, config: CompanyConfig, report: dict[str, Any]) -> dict[str, Any]:
    """Mint and gate into a throwaway directory; fill in admission and the verdict."""
    anchor_rows = report["state"]["anchor_rows"]
    if max(anchor_rows.values(), default=0) < 2:
        report["reasons"].append(
            f"one independent state: the anchor tables hold {anchor_rows} row(s), so every case would share one "
            "state and none can be held out for evaluation; export more rows (customers, orders, tickets…)")
        report["verdict"] = "not trainable: one independent state"
        return report
    with tempfile.TemporaryDirectory(prefix="blobkit-inspect-") as scratch:
        try:
            record = build_kit(path, Path(scratch), config.build_config())
        except KitError as exc:
            report["reasons"].append(str(exc))
            report["verdict"] = "not trainable: " + str(exc).split(": ", 1)[-1]
            return report
        except BlobkitError as exc:  # minting or a probe could not run on this world
            report["reasons"].append(f"{type(exc).__name__}: {exc}")
            report["verdict"] = "not trainable: the kit builder failed on this world"
            return report
        with open_kit(Path(record["kit"]["path"])) as kit:
            report["admission"] = _admission(kit, record)
    report["trainable"] = True
    families = report["admission"]["independent_families"]
    report["verdict"] = (f"trainable: {report['admission']['tasks_admitted']} tasks admitted, "
                         f"{families['train']} training and {families['eval']} held-out independent families")
    return report


def inspect_source(path: Path, config: CompanyConfig | None = None) -> dict[str, Any]:
    """Compile and qualify a source without training; say plainly whether it can be trained.

    Never raises for a bad source: validity problems are in ``reasons`` with ``valid: False``.
    """
    from world_format.loader import DEFAULT_BUDGET, load_world, parse_json, read_bounded

    config = config or CompanyConfig()
    path = Path(path)
    report: dict[str, Any] = {"source": str(path), "sha256": None, "valid": False, "kind": None,
                              "trainable": False, "reasons": [], "verdict": None}
    try:
        report["sha256"] = source_sha256(path)
        if path.is_file():
            names = _mcp_tool_names(parse_json(read_bounded(path, DEFAULT_BUDGET.max_world_json_bytes,
                                                            "world.json"), str(path)))
            if names is not None:
                return _mcp_report(report, names)
        loaded = load_world(path)
    except BlobkitError as exc:  # world format, checksum and size errors all mean "not a valid world"
        report["reasons"].append(str(exc))
        report["verdict"] = "not trainable: the source is not a valid world"
        return report
    report.update(valid=True, kind="world", **_world_facts(loaded))
    return _qualify(path, config, report)


# --------------------------------------------------------------------------- creating jobs


def base_identity(base_model: str, revision: str | None = None) -> dict[str, Any]:
    """Validate the base model choice and describe it for the job identity."""
    if base_model == TINY:
        return {"id": TINY, "source": TINY, "revision": None,
                "note": "a tiny Qwen2-shaped model with random weights, built offline from the kit's text"}
    from trainers.catalog import resolve_base

    resolved = resolve_base(base_model, revision)
    return {"id": base_model, "source": resolved.source, "revision": resolved.revision,
            "name_or_path": resolved.name_or_path}


def create_job(store: JobStore, source: Path, base_model: str, config: CompanyConfig,
               revision: str | None = None) -> str:
    """Queue a job for ``source`` on ``base_model``; return its id."""
    source = Path(source).resolve()
    identity = {"source": {"path": str(source), "sha256": source_sha256(source)},
                "base_model": base_identity(base_model, revision), "config": config.model_dump(mode="json")}
    return store.create_job(identity, CHECKS)


def run_job(store: JobStore, job_id: str, echo: Echo | None = None) -> dict[str, Any]:
    """Run or resume a job in this process until it succeeds, fails, is cancelled or runs out of budget.

    Returns the final job record. Ctrl-C (when called from the main thread) cancels at the next safe
    point; a second Ctrl-C stops at once (the job is still marked cancelled, then KeyboardInterrupt).
    """
    worker = worker_id()
    store.claim(job_id, worker)
    _Runner(store, job_id, worker, echo or (lambda line: None)).run()
    return store.get(job_id)


# --------------------------------------------------------------------------- the runner


@dataclass
class StageOutcome:
    """What a stage produced."""

    record: dict[str, Any]
    artifacts: dict[str, Path] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    calls_exact: bool = True
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    stopped_by: str | None = None


def _copy_durable(source: Path, target: Path) -> None:
    """Copy a file and fsync it (the folder is fsynced by the caller's rename)."""
    shutil.copyfile(source, target)
    with open(target, "rb") as handle:
        os.fsync(handle.fileno())


def _summary(evaluation: dict[str, Any], measured_by: str) -> dict[str, Any]:
    keep = ("pass_rate", "cases", "passed", "per_template", "tool_call_parse_failures", "refusal")
    return {**{k: evaluation[k] for k in keep if k in evaluation}, "measured_by": measured_by}


def assemble_results(records: dict[str, dict[str, Any]], complete: bool) -> dict[str, Any]:
    """Measured results from stage records: base and SFT from the SFT stage, RL from the RL stage."""
    results: dict[str, Any] = {"complete": complete}
    kit = records.get("kit", {}).get("frozen", {})
    sft = records.get("sft", {}).get("report")
    rl = records.get("rl", {}).get("report")
    if sft:
        results["base"] = _summary(sft["base"], "sft stage: the base model before training")
        results["sft"] = _summary(sft["sft"], "sft stage: the exported SFT model, reloaded")
        results["sft_minus_base"] = {"pass_rate": round(sft["sft"]["pass_rate"] - sft["base"]["pass_rate"], 4),
                                     "cases": sft["sft"]["cases"]}
        results["sft_stopped_by"] = sft.get("stopped_by")
    if rl and "rl" in rl:
        results["rl"] = _summary(rl["rl"], "rl stage: the exported RL model")
        results["rl_minus_sft"] = rl["rl_minus_sft"]
        results["rl_stopped_by"] = rl.get("stopped_by")
        if sft and rl.get("sft", {}).get("pass_rate") != sft["sft"]["pass_rate"]:
            results["sft_as_measured_by_rl"] = _summary(rl["sft"], "rl stage: its own evaluation of the SFT start")
    evaluated = [results[name]["cases"] for name in ("base", "sft", "rl") if name in results]
    if kit and evaluated:
        results["held_out"] = {"cases_in_kit": kit["eval_cases"], "cases_evaluated": min(evaluated),
                               "coverage": round(min(evaluated) / kit["eval_cases"], 4),
                               "case_counts_match": len(set(evaluated)) == 1}
    return results


class _Runner:
    """Runs the stages of one claimed job; every state change goes to the store."""

    def __init__(self, store: JobStore, job_id: str, worker: str, echo: Echo) -> None:
        job = store.get(job_id)
        self.store, self.job_id, self.worker, self.echo = store, job_id, worker, echo
        self.identity = job["identity"]
        self.config = CompanyConfig.model_validate(self.identity["config"])
        self.dir = store.job_dir(job_id)
        self.active_before = float(job["usage"]["active_seconds"])
        self.model_calls = int(job["usage"]["model_calls"])
        self.started = time.monotonic()
        self.interrupted = False
        self.stage = "job"
        self._polled_at = float("-inf")
        self._cancel: str | None = None
        self.records: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ bookkeeping

    def active_seconds(self) -> float:
        """Active seconds of the job so far (earlier runs plus this one)."""
        return self.active_before + time.monotonic() - self.started

    def say(self, stage: str, message: str, level: str = "info", data: Any = None) -> None:
        """Record a progress event and echo it."""
        self.store.add_event(self.job_id, stage, level, message, data)
        self.echo(f"[{stage}] {message}")

    def log(self, stage: str) -> Echo:
        """A trainer ``log`` callable that records each line as an event."""
        return lambda line: self.say(stage, line)

    def stop(self, force: bool = False) -> str | None:
        """Why the job must stop now (cancel, Ctrl-C, time budget), else None; also the heartbeat."""
        now = time.monotonic()
        if force or now - self._polled_at >= POLL_S:
            self._polled_at = now
            if not self.store.heartbeat(self.job_id, self.worker, self.active_seconds()):
                self._cancel = "another worker took the job over"
            else:
                self._cancel = self._cancel or self.store.cancel_reason(self.job_id)
        if self.interrupted:
            return "cancelled: interrupted (Ctrl-C)"
        if self._cancel:
            return f"cancelled: {self._cancel}"
        if self.active_seconds() >= self.config.max_minutes * 60:
            return "max_minutes"
        return None

    @contextmanager
    def _sigint(self) -> Iterator[None]:
        """First Ctrl-C: cancel at the next safe point; second: stop at once (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            self.echo("interrupted: cancelling at the next safe point (Ctrl-C again to stop at once)")

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Run every stage not yet checkpointed, then finish the job."""
        try:
            with self._sigint():
                self._run_stages()
        except KeyboardInterrupt:
            self._end("cancelled", self.stage, "cancelled: interrupted (Ctrl-C twice)",
                      f"interrupted during {self.stage}; the stage is redone on resume")
            raise

    def _run_stages(self) -> None:
        done = self.store.checkpoints(self.job_id)
        for position, stage in enumerate(STAGES):
            self.stage = stage
            if stage in done:
                if not self._skip(stage, done[stage]):
                    return
                continue
            reason = self.stop(force=True) or self._model_calls_short(stage)
            if reason:
                self._end_stopped(stage, reason, None)
                return
            if not self._run_stage(position, stage):
                return
        replay = self.records["replay"]["outcome"]
        self._end("succeeded", None, None, f"every stage completed; the replay {replay}")

    def _skip(self, stage: str, checkpoint: dict[str, Any]) -> bool:
        """Reuse a checkpointed stage; False (job failed) when its artifacts changed since."""
        stale = self.store.stale_artifacts(self.job_id, stage)
        if stale:
            self._end_failed(stage, JobError(f"stage {stage} was checkpointed but its artifacts changed since: "
                                             f"{', '.join(stale)}; start a new job"))
            return False
        self.records[stage] = checkpoint["record"]
        self.say(stage, f"stage {stage} skipped: completed at {checkpoint['completed_at']}")
        return True

    def _run_stage(self, position: int, stage: str) -> bool:
        """Run one stage; True when it completed and was checkpointed."""
        started = time.time()
        self.say(stage, f"stage {stage} started")
        try:
            outcome: StageOutcome = getattr(self, f"_stage_{stage}")()
        except Exception as exc:  # every failure is recorded with its real type and message
            self._end_failed(stage, exc)
            return False
        self._account(outcome)
        if outcome.stopped_by:
            self._end_stopped(stage, outcome.stopped_by, outcome)
            return False
        for name, (passed, detail) in outcome.checks.items():
            self.store.set_check(self.job_id, name, "passed" if passed else "failed", detail)
        self.records[stage] = outcome.record
        self.store.checkpoint(self.job_id, stage, position, started, outcome.record, outcome.artifacts)
        self.echo(f"[{stage}] completed")
        return True

    def _account(self, outcome: StageOutcome) -> None:
        if outcome.usage:
            self.store.add_usage(self.job_id, exact=outcome.calls_exact, **outcome.usage)
        self.model_calls += outcome.usage.get("model_calls", 0)

    def _model_calls_short(self, stage: str) -> str | None:
        """"max_model_calls" when the stage's worst case no longer fits the model-call budget."""
        turns, remaining = self.config.max_turns, self.config.max_model_calls - self.model_calls
        if stage == "sft":
            need = self._evaluations_worst_case()
        elif stage == "rl":
            need = self._evaluations_worst_case() + self._rl_step_worst_case() + turns
        else:
            need = turns if stage == "replay" else 0
        if remaining >= need:
            return None
        self.say(stage, f"stage {stage} may need up to {need} model calls but {remaining} of "
                 f"{self.config.max_model_calls} remain", "warning")
        return "max_model_calls"

    def _eval_cases(self) -> int:
        cases = int(self.records["kit"]["frozen"]["eval_cases"])
        return min(cases, self.config.eval_limit or cases)

    def _evaluations_worst_case(self) -> int:
        """Model calls of the two evaluations a training stage runs, if every episode hits the turn cap."""
        return 2 * self._eval_cases() * self.config.max_turns

    def _rl_step_worst_case(self) -> int:
        c = self.config
        return c.rl_prompts_per_step * c.group_size * c.max_turns

    # ------------------------------------------------------------------ endings

    def _end(self, status: str, stage: str | None, stopped_by: str | None, message: str,
             budget: str | None = None) -> None:
        outcome = {"status": status, "stage": stage, "stopped_by": stopped_by, "budget": budget, "message": message}
        self.store.finish(self.job_id, self.worker, outcome, round(self.active_seconds(), 3))
        self.echo(f"job {status}: {message}")

    def _keep_evidence(self, stage: str, outcome: StageOutcome | None) -> None:
        records = dict(self.records)
        if outcome is not None:
            entries = {name: self.store.artifact_entry(path) for name, path in outcome.artifacts.items()
                       if path.is_file()}
            self.say(stage, f"partial evidence of stage {stage} kept (not checkpointed)", "warning",
                     {"record": outcome.record, "artifacts": entries})
            records[stage] = outcome.record
        self.store.set_results(self.job_id, assemble_results(records, complete=False))

    def _end_stopped(self, stage: str, reason: str, outcome: StageOutcome | None) -> None:
        self._keep_evidence(stage, outcome)
        where = "during" if outcome is not None else "before"
        if reason.startswith("cancelled"):
            self._end("cancelled", stage, reason, f"{reason} {where} stage {stage}; completed stages and their "
                      "evidence are kept; jobs resume continues from the last completed stage")
            return
        budget = reason if reason in BUDGETS else None
        limit = (f"{self.config.max_minutes:g} active minutes" if reason == "max_minutes"
                 else f"{self.config.max_model_calls} model calls")
        message = (f"the {reason} budget ({limit}) ran out {where} stage {stage} after "
                   f"{self.active_seconds() / 60:.2f} active minutes and {self.model_calls} model calls; "
                   "completed stages and partial evidence are kept" if budget else f"stopped by {reason}")
        self.store.add_error(self.job_id, stage, "budget_exhausted" if budget else "stopped", message)
        self._end("failed", stage, reason, message, budget)

    def _end_failed(self, stage: str, exc: Exception) -> None:
        code = str(getattr(exc, "code", type(exc).__name__))
        self.store.add_error(self.job_id, stage, code, str(exc) or repr(exc))
        self._keep_evidence(stage, None)
        self._end("failed", stage, None, f"stage {stage} failed: {code}: {exc}")

    # ------------------------------------------------------------------ helpers for stages

    @property
    def source(self) -> Path:
        """The source path, checked against the sha256 recorded when the job was created."""
        path = Path(self.identity["source"]["path"])
        if source_sha256(path) != self.identity["source"]["sha256"]:
            raise SourceError(f"{path}: the source changed since the job was created (sha256 differs); "
                              "create a new job for the new export")
        return path

    @property
    def kit_dir(self) -> Path:
        """The job's kit directory."""
        return Path(self.records["kit"]["build"]["kit"]["path"])

    def _train_config(self, method: str, **overrides: Any) -> Any:
        """The trainers' ``TrainConfig`` for one method, from the job's config (``overrides`` win)."""
        from trainers.config import TrainConfig

        c, base = self.config, self.records["kit"]["base"]
        fields = {"kit": self.kit_dir, "base": base["name_or_path"], "method": method, "target": "local-torch",
                  "revision": base["revision"] if base["source"] == "hub" else None,
                  "out": self.dir / ("sft" if method == "sft" else "rl"), "full": c.full, "lora_rank": c.lora_rank,
                  "epochs": c.sft_epochs, "steps": c.rl_steps, "seed": c.seed, "learning_rate": c.learning_rate,
                  "batch_size": c.batch_size, "max_length": c.max_length, "eval_limit": c.eval_limit,
                  "max_turns": c.max_turns, "max_new_tokens": c.max_new_tokens, "group_size": c.group_size,
                  "temperature": c.temperature}
        return TrainConfig(**{**fields, **overrides})

    def _train(self, stage: str, config: Any) -> dict[str, Any]:
        """Plan then run one training method on the kit (the trainers write their own artifacts)."""
        from trainers.plan import plan
        from trainers.run import run_training

        with open_kit(self.kit_dir) as kit:
            rows = kit.jsonl("sft.jsonl")
            plan_record = plan(config, kit, rows, kit.path("sft.jsonl"))
            report = run_training(config, kit, rows, plan_record, self.log(stage), self.stop)
        return {"plan": {k: plan_record[k] for k in ("rows", "tokens", "estimated_optimizer_steps", "base")},
                "report": report}

    def _prepare_base(self, kit: Kit) -> dict[str, Any]:
        """The base model: the tiny model built from the kit's text, or the catalog/local model."""
        base = self.identity["base_model"]
        if base["id"] != TINY:
            return {"source": base["source"], "name_or_path": base["name_or_path"], "revision": base["revision"]}
        from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

        c = self.config
        out = build_tiny_model(row_texts(kit.rows()), self.dir / "base", TinyModelConfig(
            seed=c.seed, hidden_size=c.tiny_hidden_size, num_layers=c.tiny_layers, vocab_size=c.tiny_vocab_size))
        weights = file_sha256(out / "model.safetensors")
        return {"source": TINY, "name_or_path": str(out), "revision": f"tiny-sha256:{weights}"}

    # ------------------------------------------------------------------ stages

    def _stage_qualify(self) -> StageOutcome:
        report = inspect_source(self.source, self.config)
        path = self.store.write_json_artifact(self.job_id, "inspection.json", report)
        self.store.set_check(self.job_id, "source_valid", "passed" if report["valid"] else "failed",
                             "; ".join(report["reasons"]) or report["kind"])
        if report["valid"]:
            self.store.set_check(self.job_id, "trainable", "passed" if report["trainable"] else "failed",
                                 report["verdict"])
        if not report["trainable"]:
            raise NotTrainableError(f"{report['verdict']}: {'; '.join(report['reasons'])}")
        record = {"verdict": report["verdict"], "world": report["world"], "admission": report["admission"]}
        return StageOutcome(record, {"inspection": path})

    def _stage_kit(self) -> StageOutcome:
        build = build_kit(self.source, self.dir / "kit", self.config.build_config())
        kit_dir = Path(build["kit"]["path"])
        with open_kit(kit_dir) as kit:
            leakage = kit.meta["leakage"]
            frozen = {"train_cases": build["train_cases"], "eval_cases": build["eval_cases"],
                      "train_cases_sha256": file_sha256(kit.path("train_cases.jsonl")),
                      "eval_cases_sha256": file_sha256(kit.path("eval_cases.jsonl")), "leakage": leakage}
            base = self._prepare_base(kit)
        expected = self.records["qualify"]["admission"]["kit_archive_sha256"]
        artifacts = {"kit": kit_dir / "kit.json", "kit_archive": Path(build["kit"]["archive"])}
        if base["source"] == TINY:
            artifacts["base_weights"] = Path(base["name_or_path"]) / "model.safetensors"
        checks = {"kit_leakage_free": (leakage["shared_anchors"] == 0,
                                       f"{leakage['shared_anchors']} anchors shared between train and held-out"),
                  "kit_reproducible": (build["kit"]["sha256"] == expected,
                                       "the job's kit archive is byte-identical to the one qualify built"
                                       if build["kit"]["sha256"] == expected else
                                       f"archive sha256 {build['kit']['sha256']} != {expected} from qualify")}
        return StageOutcome({"build": build, "frozen": frozen, "base": base}, artifacts, checks=checks)

    @staticmethod
    def _eval_calls(config: Any, counted: tuple[str, str], bounded: str, report: dict[str, Any]) -> int:
        """Turns of two evaluations: one counted from its per-case file, one bounded by cases × turn cap.

        ``counted`` is (report key, file name); ``bounded`` the report key of the evaluation whose
        per-case results the trainer does not keep.
        """
        key, name = counted
        path = config.out / name
        turns = (sum(int(r["turns"]) for r in json.loads(path.read_text(encoding="utf-8"))) if path.is_file()
                 else report[key]["cases"] * config.max_turns)
        return turns + report[bounded]["cases"] * config.max_turns

    def _sft_calls(self, report: dict[str, Any], config: Any) -> tuple[int, bool]:
        """Model calls of the SFT stage: reported, or SFT turns counted plus an upper bound for the base."""
        if "model_calls" in report:
            return int(report["model_calls"]), True
        return self._eval_calls(config, ("sft", "eval_cases_sft.json"), "base", report), False

    def _rl_calls(self, report: dict[str, Any], config: Any) -> tuple[int, bool]:
        """Model calls of the RL stage: rollouts (reported) plus its evaluations (reported, or counted/bounded)."""
        if "eval_model_calls" in report:
            return int(report["model_calls"]) + int(report["eval_model_calls"]), True
        evaluations = self._eval_calls(config, ("rl", "eval_cases_rl.json"), "sft", report)
        return int(report["model_calls"]) + evaluations, False

    def _stage_sft(self) -> StageOutcome:
        config = self._train_config("sft")
        trained = self._train("sft", config)
        report = trained["report"]
        calls, exact = self._sft_calls(report, config)
        updates = int(report["optimizer_updates"])
        tokens = trained["plan"]["tokens"].get("tokens", 0)
        steps_per_epoch = -(-trained["plan"]["rows"] // config.batch_size)
        usage = {"model_calls": calls, "optimizer_updates": updates,
                 "tokens": round(tokens * updates / steps_per_epoch)}
        artifacts = {"plan": config.out / "plan.json", "eval": config.out / "eval.json",
                     "export": config.out / "export" / "manifest.json"}
        gain = round(report["sft"]["pass_rate"] - report["base"]["pass_rate"], 4)
        checks = {"sft_updates_applied": (updates > 0, f"{updates} optimizer updates"),
                  "sft_beats_base": (gain > 0, f"SFT {report['sft']['pass_rate']} vs base "
                                               f"{report['base']['pass_rate']} on {report['sft']['cases']} "
                                               "held-out cases")}
        record = {**trained, "model_calls": calls, "model_calls_exact": exact}
        return StageOutcome(record, artifacts, usage, exact, checks, report.get("stopped_by"))

    def _stage_rl(self) -> StageOutcome:
        c = self.config
        rollout_calls = c.max_model_calls - self.model_calls - self._evaluations_worst_case() - c.max_turns
        remaining_minutes = c.max_minutes - self.active_seconds() / 60
        config = self._train_config("grpo", init_adapter=self.dir / "sft" / "export",
                                    batch_size=c.rl_prompts_per_step * c.group_size,
                                    max_model_calls=rollout_calls, max_minutes=remaining_minutes)
        trained = self._train("rl", config)
        report = trained["report"]
        updates = int(report["optimizer_updates"])
        calls, exact = self._rl_calls(report, config)
        usage = {"model_calls": calls, "optimizer_updates": updates, "tokens": int(report.get("tokens", 0))}
        artifacts = {"plan": config.out / "plan.json", "eval": config.out / "eval.json",
                     "export": config.out / "export" / "manifest.json"}
        delta = report["rl_minus_sft"]
        checks = {"rl_updates_applied": (updates > 0, f"{updates} optimizer updates in "
                                                      f"{report.get('steps_completed')} steps"),
                  "rl_beats_sft": (delta["pass_rate"] > 0, f"rl_minus_sft {delta['pass_rate']} on {delta['cases']} "
                                                           "held-out cases")}
        record = {**trained, "model_calls": calls, "model_calls_exact": exact, "rollout_model_calls_allowed":
                  rollout_calls}
        return StageOutcome(record, artifacts, usage, exact, checks, report.get("stopped_by"))

    def _stage_evaluate(self) -> StageOutcome:
        results = assemble_results(self.records, complete=True)
        path = self.store.write_json_artifact(self.job_id, "results.json", results)
        self.store.set_results(self.job_id, results)
        held_out = results["held_out"]
        ok = held_out["case_counts_match"] and held_out["cases_evaluated"] > 0
        detail = (f"base, SFT and RL each ran {held_out['cases_evaluated']} of {held_out['cases_in_kit']} "
                  "held-out cases" if ok else "the models were not evaluated on the same held-out cases")
        return StageOutcome(results, {"results": path}, checks={"heldout_evaluated": (ok, detail)})

    def _stage_export(self) -> StageOutcome:
        from trainers.export import verify_export

        source, target = self.dir / "rl" / "export", self.dir / "export"
        verify_export(source)
        staging = staging_dir(target)
        try:
            for path in sorted(source.iterdir()):
                _copy_durable(path, staging / path.name)
            fsync_dir(staging)
            replace_dir(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
        manifest = verify_export(target)
        record = {"path": str(target), "kind": manifest["kind"], "base": manifest["base"],
                  "kit_sha256": manifest["kit_sha256"], "files": len(manifest["files"])}
        checks = {"export_verified": (True, f"{len(manifest['files'])} files match manifest.json")}
        return StageOutcome(record, {"export": target / "manifest.json"}, checks=checks)

    def _stage_replay(self) -> StageOutcome:
        command = [sys.executable, "-m", "blobkit.cli", "replay", "--model", str(self.dir / "export"),
                   "--kit", str(self.kit_dir), "--max-turns", str(self.config.max_turns), "--json"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while True:
            try:
                stdout, stderr = process.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                reason = self.stop()
                if reason:
                    process.kill()
                    process.communicate()
                    return StageOutcome({"replay": "killed", "pid": process.pid}, stopped_by=reason)
        reason = self.stop(force=True) if process.returncode else None
        if reason:
            return StageOutcome({"replay": "interrupted", "pid": process.pid}, stopped_by=reason)
        replay = self._replay_record(process, stdout, stderr)
        path = self.store.write_json_artifact(self.job_id, "replay.json", {**replay, "stdout": stdout})
        self.store.set_replay(self.job_id, replay)
        calls = replay.get("turns", self.config.max_turns)
        detail = (f"case {replay.get('case_id')}: {replay['outcome']}" + (f" ({replay['error']})"
                                                                           if replay.get("error") else ""))
        return StageOutcome(replay, {"replay": path}, {"model_calls": calls}, "turns" in replay,
                            {"replay_passed": (replay["outcome"] == "passed", detail)})

    def _replay_record(self, process: subprocess.Popen[str], stdout: str, stderr: str) -> dict[str, Any]:
        """The replay outcome: passed/failed by the case's VCode, or error when the process failed."""
        base = {"fresh_process": True, "pid": process.pid, "returncode": process.returncode,
                "command": " ".join(process.args[1:]) if isinstance(process.args, list) else str(process.args),
                "claims": "one held-out workflow replayed by the exported model reloaded in a fresh process; "
                          "it says nothing beyond this case"}
        try:
            result = json.loads(stdout) if process.returncode in (0, 1) else None
        except ValueError:
            result = None
        if not isinstance(result, dict):
            return {**base, "outcome": "error", "error": stderr[-REPLAY_STDERR_TAIL:].strip() or "no JSON output"}
        return {**base, "outcome": "passed" if result["passed"] else "failed", "case_id": result["case_id"],
                "template": result["template"], "verdict": result["verdict"],
                "answer": None if result["answer"] is None else result["answer"][:REPLAY_ANSWER_CHARS],
                "turns": result["turns"], "tool_calls": len(result["trace"]), "model_kind": result.get("model_kind")}
