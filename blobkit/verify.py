"""`blobkit verify`: re-execute every probe of every case and every SFT replay (renamed replays on their renamed
seeds), and compare with the kit; hold every SFT row to the world's declared procedures.

Nothing stored in a kit is trusted: each task's prototype probe matrix, each case's probe verdicts
(every probe must still fail on every case, training and held-out), each SFT row (replayed on an
isolated copy of the seed) and the world's identity are recomputed and compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from world_format.canonical import canonical_json
from world_format.kit import Kit, KitCase, Row
from world_format.procedure_check import ProcedureChecker, report_of
from world_format.renaming import RenameError, Renaming
from world_format.runtime import WorldRuntime

from .builder import replay_row
from .builder.gate import gate_task, verdicts
from .builder.rename import renamed_row
from .builder.rename_values import SeedIdentifiers

Progress = Callable[[str, int, int], None]


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


def _check_tasks(kit: Kit, runtime: WorldRuntime, checker: ProcedureChecker,
                 progress: Progress) -> tuple[int, list[str]]:
    records = kit.tasks() + kit.tasks(admitted=False)
    mismatches = []
    for index, record in enumerate(records):
        progress("probes", index, len(records))
        if record.prototype is None:
            continue
        matrix = gate_task(runtime, record.prototype, record.distractor, checker=checker)
        if canonical_json(matrix) != canonical_json(record.probe_matrix):
            mismatches.append(f"task {record.task_id}: probe matrix not reproduced")
    return len(records), mismatches


def _check_case_probes(cases: list[KitCase], runtime: WorldRuntime, checker: ProcedureChecker,
                       progress: Progress) -> list[str]:
    mismatches = []
    for index, case in enumerate(cases):
        progress("case probes", index, len(cases))
        matrix = gate_task(runtime, case.task, case.distractor, checker=checker, replay=False)
        if not matrix["admitted"]:
            mismatches.append(f"case {case.case_id}: fails the gate ({matrix['rejected_because'][0]})")
        elif verdicts(matrix) != case.probes:
            mismatches.append(f"case {case.case_id}: probe verdicts not reproduced")
    return mismatches


def _check_rows(kit: Kit, runtime: WorldRuntime, progress: Progress) -> list[str]:
    world = runtime.world
    rows = {row["metadata"]["case_id"]: row for row in kit.rows() if "renaming" not in row["metadata"]}
    cases = kit.cases("train")
    system, tools = world.system_prompt(), world.function_specs()
    mismatches = []
    for index, case in enumerate(cases):
        progress("replay", index, len(cases))
        row = replay_row(runtime, case.task, (case.task_id, case.case_id), system, tools)
        stored = rows.pop(case.case_id, None)
        if canonical_json(row) != canonical_json(stored):
            mismatches.append(f"case {case.case_id}: SFT row not reproduced by replay")
    if rows:
        mismatches.append(f"{len(rows)} SFT rows have no training case")
    return mismatches


def _check_renamed(kit: Kit, runtime: WorldRuntime, seed: bytes, progress: Progress) -> tuple[int, list[str]]:
    """Replay every renamed row on the seed renamed as its ``metadata.renaming`` says (:mod:`blobkit.builder.rename`):
    (rows replayed, mismatches). A renamed value the seed holds is a mismatch too."""
    renamed = [row for row in kit.rows() if "renaming" in row["metadata"]]
    if not renamed:
        return 0, []
    world, cases = runtime.world, {case.case_id: case for case in kit.cases("train")}
    system, tools, taken = world.system_prompt(), world.function_specs(), SeedIdentifiers.of(runtime).taken
    mismatches = []
    for index, row in enumerate(renamed):
        progress("renamed rows", index, len(renamed))
        mismatches += _renamed_mismatch(world, seed, cases.get(row["metadata"]["case_id"]), row, system, tools, taken)
    return len(renamed), mismatches


def _renamed_mismatch(world: Any, seed: bytes, case: KitCase | None, row: Row, system: str,
                      tools: list[dict[str, Any]], taken: frozenset[str]) -> list[str]:
    where = f"renamed row of case {row['metadata']['case_id']}"
    if case is None:
        return [f"{where}: no such training case"]
    try:
        renaming = Renaming.model_validate(row["metadata"]["renaming"])
    except ValidationError as exc:
        return [f"{where}: metadata.renaming is not a renaming ({exc.errors()[0]['msg']})"]
    held = sorted(str(v.renamed) for v in renaming.values if str(v.renamed).lower() in taken)
    if held:
        return [f"{where}: renamed value {held[0]!r} is a value of the seed"]
    try:
        again = renamed_row(world, seed, case.task, (case.task_id, case.case_id), system, tools, renaming)
    except RenameError as exc:
        return [f"{where}: {exc}"]
    return [] if canonical_json(again) == canonical_json(row) else [f"{where}: not reproduced by replay"]


def verify_kit(kit: Kit, progress: Progress | None = None) -> dict[str, Any]:
    """Reproduce the stored probe matrices, per-case probe verdicts and SFT rows; report every mismatch."""
    progress = progress or _no_progress
    loaded = kit.world()
    mismatches: list[str] = []
    if loaded.sha256 != kit.info.world.sha256:
        mismatches.append("world sha256 differs from kit.json")
    runtime = loaded.runtime()
    try:
        checker = ProcedureChecker.of(runtime)
        tasks_checked, found = _check_tasks(kit, runtime, checker, progress)
        mismatches += found
        train, held_out = kit.cases("train"), kit.cases("eval")
        mismatches += _check_case_probes(train + held_out, runtime, checker, progress)
        mismatches += _check_rows(kit, runtime, progress)
        renamed, found = _check_renamed(kit, runtime, loaded.seed, progress)
        mismatches += found
        followed = report_of(runtime, kit.rows())
        if followed["violating_rows"]:
            mismatches.append(f"{followed['violating_rows']} SFT rows break a declared procedure "
                              f"({followed['examples'][0]['kind']}: {followed['examples'][0]['detail']})")
    finally:
        runtime.close()
    return {"verified": not mismatches, "tasks_checked": tasks_checked, "train_cases_replayed": len(train),
            "renamed_rows_replayed": renamed,
            "eval_cases_checked": len(held_out), "cases_probed": len(train) + len(held_out),
            "mismatches": mismatches}
