"""`blobkit verify`: re-execute every probe and every SFT replay and compare with the kit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from world_format.canonical import canonical_json
from world_format.chain import run_chain
from world_format.kit import Kit
from world_format.models import Task
from world_format.vcode import evaluate

from .builder import replay_row
from .builder.gate import gate_task


def _task(record: dict[str, Any] | None) -> Task | None:
    return None if record is None else Task.model_validate(record)


def verify_kit(kit: Kit, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Reproduce the stored probe matrices and SFT rows; report every mismatch."""
    loaded = kit.world()
    world = loaded.world
    mismatches: list[str] = []
    if loaded.sha256 != kit.meta["world"]["sha256"]:
        mismatches.append("world sha256 differs from kit.json")
    runtime = loaded.runtime()
    try:
        tasks = kit.jsonl("tasks.jsonl") + kit.jsonl("rejected.jsonl")
        for index, record in enumerate(tasks):
            if progress:
                progress("probes", index, len(tasks))
            prototype = _task(record["prototype"])
            if prototype is None:
                continue
            matrix = gate_task(runtime, prototype, _task(record.get("distractor")))
            if canonical_json(matrix) != canonical_json(record["probe_matrix"]):
                mismatches.append(f"task {record['task_id']}: probe matrix not reproduced")
        rows = {row["metadata"]["case_id"]: row for row in kit.jsonl("sft.jsonl")}
        cases = kit.jsonl("train_cases.jsonl")
        system, tools = world.system_prompt(), world.function_specs()
        for index, case in enumerate(cases):
            if progress:
                progress("replay", index, len(cases))
            row = replay_row(runtime, Task.model_validate(case["task"]), (case["task_id"], case["case_id"]),
                             system, tools)
            stored = rows.pop(case["case_id"], None)
            if canonical_json(row) != canonical_json(stored):
                mismatches.append(f"case {case['case_id']}: SFT row not reproduced by replay")
        if rows:
            mismatches.append(f"{len(rows)} SFT rows have no training case")
        eval_cases = kit.jsonl("eval_cases.jsonl")
        for case in eval_cases:
            task = Task.model_validate(case["task"])
            with runtime.episode() as episode:
                if evaluate(task.vcode, episode, None, task.answer).outcome != "fail":
                    mismatches.append(f"eval case {case['case_id']}: a do-nothing trace does not fail")
            with runtime.episode() as episode:
                run_chain(episode, task.reference)
                if not evaluate(task.vcode, episode, task.answer, task.answer).passed:
                    mismatches.append(f"eval case {case['case_id']}: its reference chain does not pass")
    finally:
        runtime.close()
    return {"verified": not mismatches, "tasks_checked": len(tasks), "train_cases_replayed": len(cases),
            "eval_cases_checked": len(eval_cases), "mismatches": mismatches}
