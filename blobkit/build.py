"""`blobkit build`: world → minted and gated tasks → frozen split → executed SFT rows → kit."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from blobkit import __version__
from blobkit.canonical import atomic_write_bytes, canonical_bytes, content_id, jsonl_bytes, replace_dir, staging_dir
from blobkit.errors import KitError
from world_format.loader import LoadedWorld, load_world
from world_format.models import Task
from world_format.pack import package_files
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier
from world_format.vcode import evaluate

from .archive import write_tar_zst
from .cases import Case, leakage_report, side_of
from .chain import observation_hash, observation_text, run_chain
from .gate import gate_task
from .kitfiles import KIT_FILE, KIT_FORMAT, file_table
from .mint import Instance, Minter, TaskSpec, select_specs

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class BuildConfig:
    """Everything that decides a kit's content (recorded in kit.json)."""

    seed: int = 42
    max_tasks: int = 12
    train_cases_per_task: int = 48
    eval_cases_per_task: int = 6
    eval_percent: int = 20
    scan_limit: int = 4000


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


def _candidates(loaded: LoadedWorld, minter: Minter, config: BuildConfig, progress: Progress) -> list[TaskEntry]:
    world = loaded.world
    entries: list[TaskEntry] = []
    for task in world.tasks:
        task_id = content_id(task.model_dump(mode="json", by_alias=True), "t-")
        instance = Instance(task_id, task.anchor.key, task, ((task.anchor.table, task.anchor.key),))
        entries.append(TaskEntry(task_id, "authored", task.template, None, [instance]))
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
            entry.reasons = ("mint: no anchor row fits this template",)
            continue
        prototype = entry.instances[0].task
        if entry.source == "authored":
            distractor = _authored_distractor(runtime, prototype, minter)
        else:
            distractor = entry.instances[1].task if len(entry.instances) > 1 else None
        entry.distractor = distractor
        entry.matrix = gate_task(runtime, prototype, distractor)
        entry.reasons = tuple(entry.matrix["rejected_because"])
    progress("gate", len(entries), len(entries))


# --------------------------------------------------------------------------- cases and rows


def _null_fails(runtime: WorldRuntime, task: Task) -> bool:
    with runtime.episode() as episode:
        return evaluate(task.vcode, episode, None, task.answer).outcome == "fail"


def _split(runtime: WorldRuntime, entries: list[TaskEntry], config: BuildConfig) -> tuple[list[Case], list[Case]]:
    train: list[Case] = []
    held_out: list[Case] = []
    for entry in entries:
        for instance in entry.instances:
            side = side_of(config.seed, instance.task.anchor.table, instance.key, config.eval_percent)
            if _null_fails(runtime, instance.task):
                (held_out if side == "eval" else train).append(Case.make(instance, side))
    if not train or not held_out:
        raise KitError("the world has only one independent family of cases: cannot hold out evaluation cases "
                       f"(train {len(train)}, eval {len(held_out)}); add anchor rows or tasks on more rows")
    return train, held_out


def _final_answer(task: Task) -> tuple[str, str]:
    if task.answer is not None:
        return task.answer, "answer_key"
    return "I have completed your request.", "templated_completion"


def replay_row(runtime: WorldRuntime, task: Task, ids: tuple[str, str], system: str,
               tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Execute a training case's chain and record the conversation; None if its verifier does not pass.

    ``ids`` is (task id, case id).
    """
    answer, answer_source = _final_answer(task)
    with runtime.episode() as episode:
        result = run_chain(episode, task.reference)
        verdict = evaluate(task.vcode, episode, answer, task.answer)
    if not result.clean or not verdict.passed:
        return None
    messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                      {"role": "user", "content": task.instruction}]
    for event in result.events:
        call = {"type": "function", "function": {"name": event.tool, "arguments": event.arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "name": event.tool, "content": observation_text(event.observation)})
    messages.append({"role": "assistant", "content": answer})
    metadata = {
        "task_id": ids[0], "case_id": ids[1], "template": task.template,
        "sft_source": "reference_chain_replay", "final_answer_source": answer_source,
        "arguments_source": "reference_chain_arg_builder",
        "observation_hashes": [observation_hash(event.observation) for event in result.events],
        "verdict": verdict.outcome,
    }
    return {"messages": messages, "tools": tools, "metadata": metadata}


def case_record(case: Case, system: str | None = None, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A case as stored in the kit (eval cases also carry the prompt the model receives)."""
    task = case.instance.task
    record: dict[str, Any] = {
        "case_id": case.case_id, "task_id": case.instance.spec_id, "template": task.template, "side": case.side,
        "anchor": {"table": task.anchor.table, "key": task.anchor.key},
        "task": task.model_dump(mode="json", by_alias=True),
    }
    if system is not None:
        record["prompt"] = {"messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": task.instruction}], "tools": tools}
    return record


# --------------------------------------------------------------------------- writing


def _task_record(entry: TaskEntry, counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    prototype = entry.instances[0].task.model_dump(mode="json", by_alias=True) if entry.instances else None
    distractor = entry.distractor.model_dump(mode="json", by_alias=True) if entry.distractor else None
    return {"task_id": entry.task_id, "source": entry.source, "template": entry.template, "spec": entry.spec,
            "prototype": prototype, "distractor": distractor, "probe_matrix": entry.matrix,
            "rejected_because": list(entry.reasons),
            "cases": counts.get(entry.task_id, {"train": 0, "eval": 0})}


def build_kit(world_path: Path, out_dir: Path, config: BuildConfig = BuildConfig(),
              progress: Progress = _noop) -> dict[str, Any]:
    """Build a kit; return the build record. Nothing is written unless every stage succeeds."""
    loaded = load_world(world_path)
    world = loaded.world
    runtime = loaded.runtime()
    try:
        minter = Minter(world, runtime, config.seed)
        entries = _candidates(loaded, minter, config, progress)
        _gate(runtime, minter, entries, progress)
        admitted = [entry for entry in entries if not entry.reasons]
        rejected = [entry for entry in entries if entry.reasons]
        if not admitted:
            raise KitError(f"{world_path}: no task passed the discrimination gate; see the reasons with --json")
        train, held_out = _split(runtime, admitted, config)
        system, tools = world.system_prompt(), world.function_specs()
        rows = []
        for index, case in enumerate(train):
            progress("replay", index, len(train))
            row = replay_row(runtime, case.instance.task, (case.instance.spec_id, case.case_id), system, tools)
            if row is not None:
                rows.append(row)
        progress("replay", len(train), len(train))
    finally:
        runtime.close()
    counts: dict[str, dict[str, int]] = {}
    for case in train + held_out:
        side_counts = counts.setdefault(case.instance.spec_id, {"train": 0, "eval": 0})
        side_counts[case.side] += 1
    files = {
        "tasks.jsonl": jsonl_bytes(_task_record(e, counts) for e in admitted),
        "rejected.jsonl": jsonl_bytes(_task_record(e, counts) for e in rejected),
        "sft.jsonl": jsonl_bytes(rows),
        "train_cases.jsonl": jsonl_bytes(case_record(case) for case in train),
        "eval_cases.jsonl": jsonl_bytes(case_record(case, system, tools) for case in held_out),
    }
    files.update({f"world/{name}": data for name, data in package_files(loaded).items()})
    record = {
        "status": "kit_ready",
        "tasks_count": len(admitted),
        "tasks_minted": sum(1 for e in entries if e.source == "minted"),
        "tasks_authored": sum(1 for e in entries if e.source == "authored"),
        "tasks_rejected": len(rejected),
        "tasks_persisted": False,
        "sft_rows": len(rows),
        "sft_rows_dropped": len(train) - len(rows),
        "sft_source": "reference_chain_replay",
        "train_cases": len(train),
        "eval_cases": len(held_out),
    }
    kit = {
        "format": KIT_FORMAT, "format_version": 1, "builder_version": __version__,
        "world": {"id": world.identity.id, "name": world.identity.name, "sha256": loaded.sha256,
                  "seed_state_hash": loaded.seed_state_hash},
        "build_config": asdict(config), "record": record,
        "templates": sorted({e.template for e in admitted}),
        "split": {"method": "seeded hash of the anchor row, decided before cases are expanded",
                  "eval_percent": config.eval_percent, "train_cases": len(train), "eval_cases": len(held_out)},
        "leakage": leakage_report(train, held_out),
        "files": file_table(files),
    }
    return _write(out_dir, world.identity.id, files, kit, record)


def _write(out_dir: Path, world_id: str, files: dict[str, bytes], kit: dict[str, Any],
           record: dict[str, Any]) -> dict[str, Any]:
    name = f"{world_id}-train-kit"
    final, archive = Path(out_dir) / name, Path(out_dir) / f"{name}.tar.zst"
    staging = staging_dir(final)
    try:
        for relative, data in sorted(files.items()):
            atomic_write_bytes(staging / relative, data)
        atomic_write_bytes(staging / KIT_FILE, canonical_bytes(kit) + b"\n")
        sha256, size = write_tar_zst(staging, archive, name)
        replace_dir(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return {**record, "kit": {"path": str(final), "archive": str(archive), "sha256": sha256, "bytes": size}}
