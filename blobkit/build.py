"""`blobkit build`: world → minted and gated tasks → frozen split → executed SFT rows → kit."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blobkit import __version__
from blobkit.errors import KitError
from world_format.archive import write_tar_zst
from world_format.canonical import canonical_bytes, content_id, jsonl_bytes
from world_format.chain import final_answer, observation_hash, run_chain
from world_format.conversation import Conversation, prompt_messages
from world_format.kit import KIT_FILE, KIT_FORMAT
from world_format.loader import LoadedWorld, load_world
from world_format.manifest import FileTable, write_manifested_dir
from world_format.models import Task
from world_format.pack import package_files
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier
from world_format.validate import validate_world
from world_format.vcode import evaluate

from .cases import Case, leakage_report, side_of
from .family_cases import FamilyReport, family_instances
from .gate import gate_task
from .mint import Instance, Minter, TaskSpec, select_specs

Progress = Callable[[str, int, int], None]


class BuildConfig(BaseModel):
    """Everything that decides a kit's content (recorded in kit.json as ``build_config``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    seed: int = 42
    """Seed for minting, wording and the split."""
    max_tasks: int = Field(12, ge=1, le=12)
    """Most tasks in the kit (authored tasks first, then minted ones)."""
    train_cases_per_task: int = Field(48, ge=1)
    """Training cases per task."""
    eval_cases_per_task: int = Field(6, ge=1)
    """Held-out cases per task."""
    eval_percent: int = Field(20, ge=0, le=100)
    """Share of anchor rows (percent) assigned to the held-out side."""
    scan_limit: int = Field(4000, ge=1)
    """Most anchor rows (or family rows) looked at per task."""


@dataclass
class TaskEntry:
    """A candidate task (minted family or authored task) and what the gate said."""

    task_id: str
    source: str
    template: str
    spec: dict[str, Any] | None
    instances: list[Instance]
    matrix: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()
    distractor: Task | None = None
    family: FamilyReport | None = None


def _noop(stage: str, done: int, total: int) -> None:
    return None


# --------------------------------------------------------------------------- candidates


def _collect_instances(minter: Minter, spec: TaskSpec, config: BuildConfig) -> list[Instance]:
    wanted = {"train": config.train_cases_per_task, "eval": config.eval_cases_per_task}
    found: list[Instance] = []
    counts = {"train": 0, "eval": 0}
    for scanned, key in enumerate(minter.keys(spec.anchor)):
        if scanned >= config.scan_limit or all(counts[s] >= wanted[s] for s in counts):
            break
        side = side_of(config.seed, spec.anchor, key, config.eval_percent)
        if counts[side] >= wanted[side] and len(found) >= 2:
            continue
        instance = minter.instantiate(spec, key)
        if instance is not None:
            found.append(instance)
            counts[side] += 1
    return found


def _identifying_values(runtime: WorldRuntime, table: str, key: Any) -> dict[str, Any]:
    """Primary key and natural-key values of an anchor row (what a user would name it by)."""
    anchor, declared = runtime.world.state.anchor(table), runtime.world.state.table(table)
    assert anchor is not None and declared is not None
    columns = [declared.primary_key, *anchor.natural_keys]
    select = ", ".join(quote_identifier(c) for c in columns)
    with runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {select} FROM {quote_identifier(table)} "
                           f"WHERE {quote_identifier(declared.primary_key)} = ?", (key,)).fetchone()
    return dict(zip(columns, row, strict=True)) if row else {}


def _authored_distractor(runtime: WorldRuntime, task: Task, minter: Minter) -> Task | None:
    """The task moved to another anchor row: its key and natural keys swapped in arguments and answer."""
    if task.distractors:
        other = task.distractors[0].key
    else:
        other = next((k for k in minter.keys(task.anchor.table) if k != task.anchor.key), None)
        if other is None:
            return None
    mine = _identifying_values(runtime, task.anchor.table, task.anchor.key)
    theirs = _identifying_values(runtime, task.anchor.table, other)
    mapping = [(mine[c], theirs[c]) for c in mine if c in theirs and mine[c] != theirs[c]]

    def swap(value: Any) -> Any:
        for old, new in mapping:
            if value == old and type(value) is type(old):
                return new
        return value

    steps = tuple(step.model_copy(update={"arguments": {n: swap(v) for n, v in step.arguments.items()}})
                  for step in task.reference)
    answer = task.answer
    for old, new in mapping:
        answer = answer.replace(str(old), str(new)) if answer else answer
    return task.model_copy(update={"reference": steps, "answer": answer, "anchor": task.anchor.model_copy(
        update={"key": other})})


def _authored(runtime: WorldRuntime, task: Task, config: BuildConfig) -> TaskEntry:
    """An authored task as a candidate: its one case, or its family's verified cases."""
    task_id = content_id(task.model_dump(mode="json", by_alias=True), "t-")
    if task.family is None:
        instance = Instance(task_id, task.anchor.key, task, ((task.anchor.table, task.anchor.key),))
        return TaskEntry(task_id, "authored", task.template, None, [instance])
    wanted = {"train": config.train_cases_per_task, "eval": config.eval_cases_per_task}
    instances, report = family_instances(runtime, task, task_id, seed=config.seed, wanted=wanted,
                                         eval_percent=config.eval_percent, scan_limit=config.scan_limit)
    return TaskEntry(task_id, "authored", task.template, None, instances, family=report)


def _candidates(loaded: LoadedWorld, minter: Minter, config: BuildConfig, progress: Progress) -> list[TaskEntry]:
    world = loaded.world
    entries = [_authored(minter.runtime, task, config) for task in world.tasks]
    specs = select_specs(world, max(0, config.max_tasks - len(world.tasks)), config.seed)
    for index, spec in enumerate(specs):
        progress("mint", index, len(specs))
        entries.append(TaskEntry(spec.task_id, "minted", spec.template, spec.to_json(),
                                 _collect_instances(minter, spec, config)))
    progress("mint", len(specs), len(specs))
    return entries


def _gate(runtime: WorldRuntime, minter: Minter, entries: list[TaskEntry], progress: Progress) -> None:
    for index, entry in enumerate(entries):
        progress("gate", index, len(entries))
        if not entry.instances:
            entry.reasons = (("family: no row of the query gives a case whose reference chain passes",)
                             if entry.family else ("mint: no anchor row fits this template",))
            continue
        prototype = entry.instances[0].task
        if len(entry.instances) > 1:  # a minted template or an authored family: another of its cases
            distractor: Task | None = entry.instances[1].task
        elif entry.source == "authored":
            distractor = _authored_distractor(runtime, prototype, minter)
        else:
            distractor = None
        entry.distractor = distractor
        entry.matrix = gate_task(runtime, prototype, distractor)
        entry.reasons = tuple(entry.matrix["rejected_because"])
    progress("gate", len(entries), len(entries))


# --------------------------------------------------------------------------- cases and rows


def _null_fails(runtime: WorldRuntime, task: Task) -> bool:
    with runtime.episode() as episode:
        return evaluate(task.vcode, episode, None, task.answer).outcome == "fail"


def _split(runtime: WorldRuntime, entries: list[TaskEntry], config: BuildConfig,
           progress: Progress = _noop) -> tuple[list[Case], list[Case]]:
    train: list[Case] = []
    held_out: list[Case] = []
    instances = [instance for entry in entries for instance in entry.instances]
    for index, instance in enumerate(instances):
        progress("split", index, len(instances))
        side = side_of(config.seed, instance.task.anchor.table, instance.key, config.eval_percent)
        if _null_fails(runtime, instance.task):
            (held_out if side == "eval" else train).append(Case.make(instance, side))
    progress("split", len(instances), len(instances))
    if not train or not held_out:
        raise KitError("the world has only one independent family of cases: cannot hold out evaluation cases "
                       f"(train {len(train)}, eval {len(held_out)}); add anchor rows or tasks on more rows")
    return train, held_out


def replay_row(runtime: WorldRuntime, task: Task, ids: tuple[str, str], system: str,
               tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Execute a training case's chain and record the conversation; None if its verifier does not pass.

    ``ids`` is (task id, case id).
    """
    answer, answer_source = final_answer(task)
    with runtime.episode() as episode:
        result = run_chain(episode, task.reference)
        verdict = evaluate(task.vcode, episode, answer, task.answer)
    if not result.clean or not verdict.passed:
        return None
    conversation = Conversation.opening(system, task.instruction)
    for event in result.events:
        [ident] = conversation.tool_calls([(event.tool, event.arguments)])
        conversation.observation(ident, event.tool, event.observation)
    conversation.answer(answer)
    metadata = {
        "task_id": ids[0], "case_id": ids[1], "template": task.template,
        "sft_source": "reference_chain_replay", "final_answer_source": answer_source,
        "arguments_source": "reference_chain_arg_builder",
        "observation_hashes": [observation_hash(event.observation) for event in result.events],
        "verdict": verdict.outcome,
    }
    return {"messages": conversation.messages, "tools": tools, "metadata": metadata}


def case_record(case: Case, system: str | None = None, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A case as stored in the kit (eval cases also carry the prompt the model receives)."""
    task = case.instance.task
    record: dict[str, Any] = {
        "case_id": case.case_id, "task_id": case.instance.spec_id, "template": task.template, "side": case.side,
        "anchor": {"table": task.anchor.table, "key": task.anchor.key},
        "task": task.model_dump(mode="json", by_alias=True),
    }
    if system is not None:
        record["prompt"] = {"messages": prompt_messages(system, task.instruction), "tools": tools}
    return record


# --------------------------------------------------------------------------- writing


def _task_record(entry: TaskEntry, counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    prototype = entry.instances[0].task.model_dump(mode="json", by_alias=True) if entry.instances else None
    distractor = entry.distractor.model_dump(mode="json", by_alias=True) if entry.distractor else None
    return {"task_id": entry.task_id, "source": entry.source, "template": entry.template, "spec": entry.spec,
            "prototype": prototype, "distractor": distractor, "probe_matrix": entry.matrix,
            "rejected_because": list(entry.reasons),
            "family": entry.family.to_json() if entry.family else None,
            "cases": counts.get(entry.task_id, {"train": 0, "eval": 0})}


@dataclass
class _Executed:
    """What the executing stages produced: every candidate, the split and the replayed rows."""

    entries: list[TaskEntry]
    train: list[Case]
    held_out: list[Case]
    rows: list[dict[str, Any]]

    @property
    def admitted(self) -> list[TaskEntry]:
        """Candidates the gate admitted."""
        return [entry for entry in self.entries if not entry.reasons]

    @property
    def rejected(self) -> list[TaskEntry]:
        """Candidates the gate rejected (with reasons)."""
        return [entry for entry in self.entries if entry.reasons]


def _load(world_path: Path, progress: Progress) -> tuple[LoadedWorld, WorldRuntime]:
    """Load and validate the world on the runtime the build then uses, and digest its seed once.

    Here the build reads the whole database (checksum, integrity check, the seed digest);
    after it, probes and replays are episodes (savepoints) that read and hash changed rows only.
    """
    progress("load", 0, 1)
    loaded = load_world(world_path, validate=False)
    runtime = loaded.runtime()
    try:
        validate_world(loaded, runtime)
        runtime.seed_digests  # noqa: B018 - the one full scan of the seed, done here rather than in the first probe
    except BaseException:
        runtime.close()
        raise
    progress("load", 1, 1)
    return loaded, runtime


def _replay_rows(runtime: WorldRuntime, train: list[Case], progress: Progress) -> list[dict[str, Any]]:
    """Replay every training case; keep the rows whose verifier passes."""
    system, tools = runtime.world.system_prompt(), runtime.world.function_specs()
    rows = []
    for index, case in enumerate(train):
        progress("replay", index, len(train))
        row = replay_row(runtime, case.instance.task, (case.instance.spec_id, case.case_id), system, tools)
        if row is not None:
            rows.append(row)
    progress("replay", len(train), len(train))
    return rows


def _execute(loaded: LoadedWorld, runtime: WorldRuntime, config: BuildConfig, progress: Progress) -> _Executed:
    """Mint, gate, split and replay: every step an episode of ``runtime``, never a copy of the seed."""
    minter = Minter(loaded.world, runtime, config.seed)
    entries = _candidates(loaded, minter, config, progress)
    _gate(runtime, minter, entries, progress)
    admitted = [entry for entry in entries if not entry.reasons]
    if not admitted:
        raise KitError(f"{loaded.path}: no task passed the discrimination gate; see the reasons with --json")
    train, held_out = _split(runtime, admitted, config, progress)
    return _Executed(entries, train, held_out, _replay_rows(runtime, train, progress))


def _record(done: _Executed) -> dict[str, Any]:
    """The build record (what ``--json`` prints, less the kit location)."""
    return {
        "status": "kit_ready",
        "tasks_count": len(done.admitted),
        "tasks_minted": sum(1 for e in done.entries if e.source == "minted"),
        "tasks_authored": sum(1 for e in done.entries if e.source == "authored"),
        "tasks_rejected": len(done.rejected),
        "tasks_persisted": False,
        "sft_rows": len(done.rows),
        "sft_rows_dropped": len(done.train) - len(done.rows),
        "sft_source": "reference_chain_replay",
        "train_cases": len(done.train),
        "eval_cases": len(done.held_out),
    }


def _kit_files(loaded: LoadedWorld, done: _Executed) -> dict[str, bytes]:
    """Every file of the kit except kit.json, by relative path."""
    world = loaded.world
    system, tools = world.system_prompt(), world.function_specs()
    counts: dict[str, dict[str, int]] = {}
    for case in done.train + done.held_out:
        side_counts = counts.setdefault(case.instance.spec_id, {"train": 0, "eval": 0})
        side_counts[case.side] += 1
    files = {
        "tasks.jsonl": jsonl_bytes(_task_record(e, counts) for e in done.admitted),
        "rejected.jsonl": jsonl_bytes(_task_record(e, counts) for e in done.rejected),
        "sft.jsonl": jsonl_bytes(done.rows),
        "train_cases.jsonl": jsonl_bytes(case_record(case) for case in done.train),
        "eval_cases.jsonl": jsonl_bytes(case_record(case, system, tools) for case in done.held_out),
    }
    files.update({f"world/{name}": data for name, data in package_files(loaded).items()})
    return files


def _kit_meta(loaded: LoadedWorld, config: BuildConfig, done: _Executed, record: dict[str, Any]) -> dict[str, Any]:
    """kit.json less its file table: format, world identity, config, record, split and leakage."""
    world = loaded.world
    return {
        "format": KIT_FORMAT, "format_version": 1, "builder_version": __version__,
        "world": {"id": world.identity.id, "name": world.identity.name, "sha256": loaded.sha256,
                  "seed_state_hash": loaded.seed_state_hash},
        "build_config": config.model_dump(mode="json"), "record": record,
        "templates": sorted({e.template for e in done.admitted}),
        "split": {"method": "seeded hash of the anchor row, decided before cases are expanded",
                  "eval_percent": config.eval_percent, "train_cases": len(done.train),
                  "eval_cases": len(done.held_out)},
        "leakage": leakage_report(done.train, done.held_out),
    }


@dataclass(frozen=True)
class BuiltKit:
    """A kit executed in memory: every file but kit.json, kit.json less its file table, and the build record.

    :func:`execute_build` makes one without writing anything (``company inspect`` stops there);
    :func:`write_kit` writes it (the folder, then its reproducible archive).
    """

    world_id: str
    files: dict[str, bytes]
    meta: dict[str, Any]
    record: dict[str, Any]

    def rejected(self) -> list[dict[str, Any]]:
        """The rejected candidates' task records (as rejected.jsonl holds them)."""
        return [json.loads(line) for line in self.files["rejected.jsonl"].splitlines() if line.strip()]


def execute_build(world_path: Path, config: BuildConfig = BuildConfig(), progress: Progress = _noop) -> BuiltKit:
    """Load, mint, gate, split and replay; return the kit's content without writing anything.

    ``progress(stage, done, total)`` is called as the build goes through its stages:
    ``load``, ``mint`` (per task family), ``gate`` (per task), ``split`` (per case) and
    ``replay`` (per training case).
    """
    loaded, runtime = _load(Path(world_path), progress)
    try:
        done = _execute(loaded, runtime, config, progress)
    finally:
        runtime.close()
    record = _record(done)
    return BuiltKit(loaded.world.identity.id, _kit_files(loaded, done), _kit_meta(loaded, config, done, record), record)


def build_kit(world_path: Path, out_dir: Path, config: BuildConfig = BuildConfig(),
              progress: Progress = _noop) -> dict[str, Any]:
    """Build a kit into ``out_dir``; return the build record. Nothing is written unless every stage succeeds.

    The stages of :func:`execute_build`, then ``write`` (the folder, then the archive).
    """
    return write_kit(execute_build(world_path, config, progress), out_dir, progress)


def write_kit(built: BuiltKit, out_dir: Path, progress: Progress = _noop) -> dict[str, Any]:
    """Write the kit folder (kit.json last) and its archive, made from the finished folder, atomically."""
    name = f"{built.world_id}-train-kit"
    final, archive = Path(out_dir) / name, Path(out_dir) / f"{name}.tar.zst"
    written: dict[str, Any] = {}

    def render(table: FileTable) -> bytes:
        return canonical_bytes({**built.meta, "files": table}) + b"\n"

    def archive_it(staging: Path) -> None:
        progress("write", 1, 2)
        written["sha256"], written["bytes"] = write_tar_zst(staging, archive, name)

    progress("write", 0, 2)
    write_manifested_dir(final, built.files, KIT_FILE, render, before_publish=archive_it)
    progress("write", 2, 2)
    return {**built.record, "kit": {"path": str(final), "archive": str(archive), **written}}
