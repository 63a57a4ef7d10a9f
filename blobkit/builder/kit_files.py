"""The kit's files, from what the build executed: tasks and their probe verdicts, cases, rows, the world, kit.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blobkit import __version__
from world_format.canonical import jsonl_bytes
from world_format.kit import KIT_FORMAT
from world_format.loaded import LoadedWorld
from world_format.pack import package_files

from .candidates import TaskEntry
from .config import BuildConfig, config_record
from .rename import RenamedReplays
from .rows import case_record
from .split import Case


@dataclass
class Executed:
    """What the executing stages produced: every candidate, the split and the replayed rows."""

    entries: list[TaskEntry]
    train: list[Case]
    held_out: list[Case]
    rows: list[dict[str, Any]]
    leakage: dict[str, Any]
    """The leakage report (:func:`blobkit.builder.leakage.leakage_report`)."""
    train_withheld: int = 0
    """Training cases withheld because their executed row states a held-out identifier
    (:func:`blobkit.builder.leakage.withhold_training`)."""
    renamed: RenamedReplays | None = None
    """What renamed replays added (None: the build made none)."""

    @property
    def replayed(self) -> int:
        """Rows replayed on the seed itself (every row less the renamed ones)."""
        return len(self.rows) - (self.renamed.rows_added if self.renamed else 0)

    @property
    def admitted(self) -> list[TaskEntry]:
        """Candidates the gate admitted."""
        return [entry for entry in self.entries if not entry.reasons]

    @property
    def rejected(self) -> list[TaskEntry]:
        """Candidates the gate rejected (with reasons)."""
        return [entry for entry in self.entries if entry.reasons]




def _task_record(entry: TaskEntry, counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    prototype = entry.instances[0].task.model_dump(mode="json", by_alias=True) if entry.instances else None
    distractor = entry.distractor.model_dump(mode="json", by_alias=True) if entry.distractor else None
    return {"task_id": entry.task_id, "source": entry.source, "template": entry.template, "spec": entry.spec,
            "prototype": prototype, "distractor": distractor, "probe_matrix": entry.matrix,
            "rejected_because": list(entry.reasons), "cases_left_out": entry.left_out,
            "family": entry.family.to_json() if entry.family else None,
            "cases": counts.get(entry.task_id, {"train": 0, "eval": 0})}




def build_record(done: Executed) -> dict[str, Any]:
    """The build record (what ``--json`` prints, less the kit location)."""
    record: dict[str, Any] = {
        "status": "kit_ready",
        "tasks_count": len(done.admitted),
        "tasks_minted": sum(1 for e in done.entries if e.source == "minted"),
        "tasks_authored": sum(1 for e in done.entries if e.source == "authored"),
        "tasks_rejected": len(done.rejected),
        "tasks_persisted": False,
        "sft_rows": len(done.rows),
        "sft_rows_dropped": len(done.train) - done.replayed,
        "sft_source": "reference_chain_replay",
        "train_cases": len(done.train),
        "train_cases_withheld": done.train_withheld,
        "eval_cases": len(done.held_out),
    }
    if done.renamed is not None:
        record["renamed_replays"] = done.renamed.model_dump(mode="json")
    return record




def kit_files(loaded: LoadedWorld, done: Executed) -> dict[str, bytes]:
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




def kit_meta(loaded: LoadedWorld, config: BuildConfig, done: Executed, record: dict[str, Any]) -> dict[str, Any]:
    """kit.json less its file table: format, world identity, config, record, split and leakage."""
    world = loaded.world
    return {
        "format": KIT_FORMAT, "format_version": 1, "builder_version": __version__,
        "world": {"id": world.identity.id, "name": world.identity.name, "sha256": loaded.sha256,
                  "seed_state_hash": loaded.seed_state_hash},
        "build_config": config_record(config), "record": record,
        "templates": sorted({e.template for e in done.admitted}),
        "split": {"method": "seeded hash of the anchor row's connected entity (its root row, following owning "
                            "foreign keys), decided before cases are expanded",
                  "eval_percent": config.eval_percent, "train_cases": len(done.train),
                  "eval_cases": len(done.held_out)},
        "leakage": done.leakage,
    }
