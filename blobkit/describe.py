"""What `blobkit info` shows for a world or a kit (after verifying it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from blobkit.adversaries import reference_pass_rate, stored_pass_rates
from blobkit.builder.coverage import coverage_lines
from blobkit.wording import kit_lint
from world_format.errors import WorldFormatError
from world_format.family import fill, iter_family_rows
from world_format.kit import KIT_FILE, Kit, open_kit
from world_format.loader import LoadedWorld, load_world
from world_format.procedure_check import declared, report_of


def _is_kit(path: Path) -> bool:
    return path.name.endswith(".tar.zst") or (path.is_dir() and (path / KIT_FILE).exists())


def _neither(path: Path) -> WorldFormatError:
    """Why a folder is neither a packaged world nor a kit, and the folder to pass instead when there is one."""
    inside = sorted(entry.name for entry in path.iterdir() if entry.is_dir())
    hint = f"; it holds the folder {inside[0]}: pass that instead" if len(inside) == 1 else ""
    return WorldFormatError(f"{path}: neither a packaged world (no manifest.json) nor a kit (no kit.json){hint}")


def describe(path: Path) -> tuple[dict[str, Any], str]:
    """(JSON summary, human text) for a world or kit path."""
    path = Path(path)
    if _is_kit(path):
        with open_kit(path) as kit:
            return _describe_kit(kit)
    if path.is_dir() and not (path / "manifest.json").exists() and not (path / "world.json").exists():
        raise _neither(path)
    return _describe_world(load_world(path))


def _table_rows(loaded: LoadedWorld) -> dict[str, int]:
    runtime = loaded.runtime()
    try:
        return {name: digest.rows for name, digest in runtime.seed_digests.items()}
    finally:
        runtime.close()


def _task_lines(loaded: LoadedWorld) -> list[str]:
    """One line per authored task; a family shows its first case and how many rows its query gives."""
    lines = []
    runtime = loaded.runtime()
    try:
        for task in loaded.world.tasks:
            kinds = ", ".join(check.kind for check in task.vcode.checks)
            if task.family is None:
                lines.append(f"    - {task.instruction} [verifier: {kinds}]")
                continue
            rows, first = 0, None
            for row in iter_family_rows(runtime, task):
                rows += 1
                if first is None:
                    first = row
            assert first is not None  # validated when the world loaded: the query returns rows
            example = fill(task, first).instruction
            lines.append(f"    - family of {rows} query rows, e.g. {example} [verifier: {kinds}]")
    finally:
        runtime.close()
    return lines


def world_summary(loaded: LoadedWorld) -> dict[str, Any]:
    """The JSON summary of a verified world."""
    world = loaded.world
    return {
        "kind": "world",
        "form": loaded.form,
        "identity": world.identity.model_dump(mode="json"),
        "policies": len(world.policies),
        "tables": _table_rows(loaded),
        "anchors": [anchor.table for anchor in world.state.anchors],
        "tools": [tool.name for tool in world.tools],
        "tasks": len(world.tasks),
        "sha256": loaded.sha256,
        "state_hash": loaded.seed_state_hash,
        "verified": True,
    }


def _describe_world(loaded: LoadedWorld) -> tuple[dict[str, Any], str]:
    world, summary = loaded.world, world_summary(loaded)
    lines = [f"world {world.identity.id}: {world.identity.name} ({world.identity.domain}) [{loaded.form}, verified]",
             f"  sha256 {summary['sha256']}", f"  {len(world.policies)} policies"]
    lines.append("  tables: " + ", ".join(f"{name} ({rows} rows)" for name, rows in summary["tables"].items()))
    lines.append("  tools:")
    for tool in world.tools:
        params = ", ".join(tool.parameters.get("properties", {}))
        guard = f"; {len(tool.preconditions)} precondition(s)" if tool.preconditions else ""
        lines.append(f"    {tool.name}({params}) [{tool.effect}{guard}]")
    procedures = declared(world)
    summary["procedures"] = procedures
    lines.append("  procedures: " + ("; ".join(procedures) if procedures else "none declared"))
    lines.append(f"  tasks: {len(world.tasks)}")
    lines += _task_lines(loaded)
    return summary, "\n".join(lines)


def _leakage_text(leakage: dict[str, Any]) -> str:
    """The leakage line of ``info`` (kits built before entity splits report shared anchors only)."""
    if "shared_entities" not in leakage:
        return (f"shared anchors {leakage['shared_anchors']}, "
                f"max instruction similarity {leakage['max_instruction_similarity']}")
    return (f"{leakage['train_entities']} train / {leakage['eval_entities']} held-out entities, "
            f"shared entities {leakage['shared_entities']}, held-out identifiers in training rows "
            f"{leakage['held_out_identifiers_in_training']} of {leakage['held_out_identifiers']}, "
            f"max instruction similarity {leakage['max_instruction_similarity']}")


def _renamed_text(renamed: dict[str, Any] | None) -> str:
    """What renamed replays added to the SFT rows (empty for a kit built without them)."""
    if not renamed:
        return ""
    dropped = ", ".join(f"{k} {v}" for k, v in renamed["dropped_because"].items())
    return (f" ({renamed['rows_added']} of them renamed replays, {renamed['per_case']} per case; "
            f"{renamed['rows_dropped']} dropped{': ' + dropped if dropped else ''})")


def procedure_report(kit: Kit) -> dict[str, Any]:
    """Every training row of the kit held to its world's declared procedures (re-checked here, from the rows)."""
    runtime = kit.world().runtime()
    try:
        return report_of(runtime, kit.rows())
    finally:
        runtime.close()


def procedure_lines(report: dict[str, Any]) -> list[str]:
    """The procedure lines of ``info``: what the world declares and how many training rows break it."""
    if not report["declared"]:
        return ["  procedures: the world declares none, so the kit teaches no procedure (identification, "
                "confirmation, checking before a write); declare them under \"procedures\" (spec/world-format.md)"]
    lines = ["  procedures: " + "; ".join(report["declared"]),
             f"    training rows that break one: {report['violating_rows']} of {report['rows']}"
             + ("" if not report["violations"] else
                " (" + ", ".join(f"{k} {v}" for k, v in report["violations"].items()) + ")")]
    lines += [f"    e.g. {e['case_id']}: {e['kind']}: {e['detail']}" for e in report["examples"][:3]]
    return lines


def _describe_kit(kit: Kit) -> tuple[dict[str, Any], str]:
    meta = kit.meta
    tasks, rejected = kit.tasks(), kit.tasks(admitted=False)
    probe_summary: dict[str, Counter[str]] = {}
    for record in tasks + rejected:
        for probe, result in (record.probe_matrix or {}).items():
            if isinstance(result, dict) and "outcome" in result:
                probe_summary.setdefault(probe, Counter())[result["outcome"]] += 1
    left_out: Counter[str] = Counter()
    for record in tasks + rejected:
        left_out.update(record.cases_left_out)
    adversaries, reference = stored_pass_rates(kit), reference_pass_rate(kit)
    wording = kit_lint(kit)
    procedures = procedure_report(kit)
    summary = {
        "kind": "kit", **meta["record"], "world": meta["world"], "split": meta["split"], "leakage": meta["leakage"],
        "templates": meta["templates"], "files": len(meta["files"]), "sha256": kit.sha256, "verified": True,
        "probe_summary": {probe: dict(sorted(counts.items())) for probe, counts in sorted(probe_summary.items())},
        "cases_left_out": dict(sorted(left_out.items())), "adversaries": adversaries, "reference": reference,
        "wording": wording, "procedures": procedures,
    }
    lines = [f"kit for world {meta['world']['id']} (world sha256 {meta['world']['sha256'][:16]}…) [verified]",
             f"  {len(tasks)} tasks admitted, {len(rejected)} rejected; templates: {', '.join(meta['templates'])}",
             f"  split: {meta['split']['train_cases']} train / {meta['split']['eval_cases']} held-out cases; "
             + _leakage_text(meta["leakage"]),
             f"  SFT rows: {meta['record']['sft_rows']}" + _renamed_text(meta["record"].get("renamed_replays")),
             "  cases the gate left out: " + (", ".join(f"{k} {v}" for k, v in sorted(left_out.items())) or "none"),
             "  adversarial agents (cases passed / cases where the agent applies; every one must be 0):"]
    lines += [f"    {agent}: {rate['passed']}/{rate['cases']}" for agent, rate in adversaries.items()]
    lines.append(f"    reference (the case's own chain and answer, re-run now; every one must pass): "
                 f"{reference['passed']}/{reference['cases']}")
    lines += coverage_lines(meta["record"].get("tool_coverage", {}))
    lines += procedure_lines(procedures)
    defects = wording["defects"]
    lines.append(f"  wording lint of minted text ({wording['minted_texts']} texts): "
                 + (", ".join(f"{k} {v}" for k, v in defects.items()) if defects else "no defects"))
    lines.append("  probes of each task's prototype (outcome counts over all candidates):")
    for probe, counts in summary["probe_summary"].items():
        lines.append(f"    {probe}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for record in rejected:
        reason = record.rejected_because[0] if record.rejected_because else "no case passed the gate"
        lines.append(f"  rejected {record.task_id} ({record.template}): {reason}")
    return summary, "\n".join(lines)
