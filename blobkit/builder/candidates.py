"""Candidate tasks: authored tasks (single cases or families) and minted templates, each with its cases.

Every case's side of the split (train or held-out) is decided here, once, when the case is made: by
a seeded hash of its anchor row's connected entity (:class:`blobkit.builder.sides.Sides`). Later stages read it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from world_format.canonical import content_id
from world_format.keys import key_parameters, key_where
from world_format.loaded import LoadedWorld
from world_format.models import Task
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier

from .config import BuildConfig, Progress
from .confirmations import with_confirmations
from .family import FamilyReport, family_instances
from .gate import first_failed_probe, gate_task, verdicts
from .mint import Instance, Minter
from .mint_specs import TaskSpec, select_specs

SPANS_SIDES = ("split: the task names rows of entities on both sides of the split (no side can hold it without "
               "sharing an entity)")


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
    left_out: dict[str, int] = field(default_factory=dict)
    """Cases the gate left out, counted by the first probe (or check) each did not fail."""


def _scan_order(minter: Minter, table: str, held_out: set[str]) -> Iterator[Any]:
    """The anchor table's keys in their seeded order, but held-out rows of entities that an earlier task already
    holds out come last: each task's held-out cases then concern entities no other task's do, where the world has
    them, so a kit's held-out pass rate rests on as many independent entities as it can.

    Streamed: a key's side and entity are looked up only when the scan reaches it, so a task that finds its cases
    in the first few hundred keys looks at a few hundred rows, however large the table (``held_out`` must not
    change while the scan runs)."""
    later = []
    for key in minter.keys(table):
        if minter.sides.side(table, key) == "eval" and minter.sides.entity(table, key) in held_out:
            later.append(key)
        else:
            yield key
    yield from later


def _minted_instances(minter: Minter, spec: TaskSpec, config: BuildConfig, held_out: set[str]) -> list[Instance]:
    """Up to the configured cases per side of one minted task (``held_out``: the entities earlier tasks hold out,
    updated with this task's)."""
    wanted = {"train": config.train_cases_per_task, "eval": config.eval_cases_per_task}
    found: list[Instance] = []
    counts = {"train": 0, "eval": 0}
    for scanned, key in enumerate(_scan_order(minter, spec.anchor, held_out)):
        if scanned >= config.scan_limit or all(counts[s] >= wanted[s] for s in counts):
            break
        side = minter.sides.side(spec.anchor, key)
        if counts[side] >= wanted[side] and len(found) >= 2:
            continue
        instance = minter.instantiate(spec, key)
        if instance is not None:
            found.append(instance)
            counts[side] += 1
    held_out.update(instance.entity for instance in found if instance.side == "eval")
    return found


def _identifying_values(runtime: WorldRuntime, table: str, key: Any) -> dict[str, Any]:
    """Primary key and natural-key values of an anchor row (what a user would name it by)."""
    anchor, declared = runtime.world.state.anchor(table), runtime.world.state.table(table)
    assert anchor is not None and declared is not None
    columns = [*declared.key_columns, *anchor.natural_keys]
    select = ", ".join(quote_identifier(c) for c in columns)
    with runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {select} FROM {quote_identifier(table)} WHERE {key_where(declared)}",
                           key_parameters(declared, key)).fetchone()
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


def _authored(minter: Minter, task: Task, config: BuildConfig) -> TaskEntry:
    """An authored task as a candidate: its one case, or its family's verified cases."""
    task_id = content_id(task.model_dump(mode="json", by_alias=True, exclude_defaults=True), "t-")
    if task.family is None:
        instance = minter.on_side(task_id, task.anchor.table, task.anchor.key, task)
        if instance is None:
            return TaskEntry(task_id, "authored", task.template, None, [], reasons=(SPANS_SIDES,))
        return TaskEntry(task_id, "authored", task.template, None, _confirmed([instance], minter))
    wanted = {"train": config.train_cases_per_task, "eval": config.eval_cases_per_task}
    instances, report = family_instances(minter, task, task_id, wanted=wanted, scan_limit=config.scan_limit)
    return TaskEntry(task_id, "authored", task.template, None, _confirmed(instances, minter), family=report)


def _confirmed(instances: list[Instance], minter: Minter) -> list[Instance]:
    """Each authored case with its confirmations completed (:func:`.confirmations.with_confirmations`)."""
    return [replace(i, task=with_confirmations(minter.runtime, i.task)) if i.task.turns else i for i in instances]


def candidates(loaded: LoadedWorld, minter: Minter, config: BuildConfig, progress: Progress) -> list[TaskEntry]:
    world = loaded.world
    entries = [_authored(minter, task, config) for task in world.tasks]
    specs = select_specs(world, max(0, config.max_tasks - len(world.tasks)), config.seed)
    held_out = {instance.entity for entry in entries for instance in entry.instances if instance.side == "eval"}
    for index, spec in enumerate(specs):
        progress("mint", index, len(specs))
        entries.append(TaskEntry(spec.task_id, "minted", spec.template, spec.to_json(),
                                 _minted_instances(minter, spec, config, held_out)))
    progress("mint", len(specs), len(specs))
    return entries


def _distractor(runtime: WorldRuntime, minter: Minter, entry: TaskEntry, index: int) -> Task | None:
    """The wrong-row distractor of case ``index``: the next case of the same task, or (a single authored
    case) the task moved to another anchor row."""
    if len(entry.instances) > 1:
        return entry.instances[(index + 1) % len(entry.instances)].task
    if entry.source == "authored":
        return _authored_distractor(runtime, entry.instances[index].task, minter)
    return None


def _gate_entry(runtime: WorldRuntime, minter: Minter, entry: TaskEntry, tick: Progress) -> None:
    """Gate every case of one candidate: keep the cases that pass, count the others by the probe they passed."""
    admitted: list[Instance] = []
    left_out: Counter[str] = Counter()
    for index, instance in enumerate(entry.instances):
        distractor = _distractor(runtime, minter, entry, index)
        matrix = gate_task(runtime, instance.task, distractor, checker=minter.procedures, replay=not admitted)
        if matrix["admitted"]:
            if not admitted:  # the first admitted case is the task's prototype; its matrix is the kit's evidence
                entry.matrix, entry.distractor = matrix, distractor
            admitted.append(replace(instance, probes=verdicts(matrix), distractor=distractor))
        else:
            left_out[first_failed_probe(matrix)] += 1
            if entry.matrix is None:
                entry.matrix, entry.distractor = matrix, distractor
        tick("gate", 1, 0)
    if not admitted:
        entry.reasons = tuple(entry.matrix["rejected_because"]) if entry.matrix else ()
    entry.instances, entry.left_out = admitted, dict(sorted(left_out.items()))


def gate_candidates(runtime: WorldRuntime, minter: Minter, entries: list[TaskEntry], progress: Progress) -> None:
    """Gate every case of every candidate; a candidate none of whose cases pass is rejected with the reasons."""
    total, done = sum(len(entry.instances) for entry in entries), 0

    def tick(stage: str, step: int, _: int) -> None:
        nonlocal done
        done += step
        progress(stage, done, total)

    progress("gate", 0, total)
    for entry in entries:
        if not entry.instances:
            entry.reasons = entry.reasons or (("family: no row of the query gives a case whose reference chain passes",)
                             if entry.family else ("mint: no anchor row fits this template",))
            continue
        _gate_entry(runtime, minter, entry, tick)
    progress("gate", total, total)
