"""Inspecting a source: is it a world at all, and can it be trained? Nothing is written.

:func:`qualify_source` loads the source, recognises MCP tool schemas that are not enough to train
on, and executes the kit build in memory (:func:`blobkit.builder.builder.execute_build`): minting, the
discrimination gate, the split and the replay of every training case. A kit whose held-out cases concern
fewer than :data:`~blobkit.company.held_out.MIN_HELD_OUT_ENTITIES` independent entities is not trainable
(:mod:`.held_out` says why, and what the world needs). It returns the report and, when the source can be
trained, the built kit, which the job's qualify stage then writes (so a job builds its kit once).
:func:`inspect_source` (``blobkit company inspect``) keeps the report only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blobkit.builder import BuildConfig, BuiltKit, execute_build
from blobkit.builder.config import Progress, no_progress
from blobkit.errors import BlobkitError, KitError
from world_format.loaded import LoadedWorld

from .config import CompanyConfig
from .held_out import MIN_HELD_OUT_ENTITIES, entities_text, held_out_shortfall
from .identity import source_sha256

__all__ = ["MIN_HELD_OUT_ENTITIES", "inspect_source", "qualify_source"]


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


def _world_facts(loaded: LoadedWorld) -> dict[str, Any]:
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


def _admission(built: BuiltKit) -> dict[str, Any]:
    """What minting and gating admitted, from a kit built in memory."""
    record, leakage = built.record, built.meta["leakage"]
    return {
        "tasks_admitted": record["tasks_count"], "tasks_minted": record["tasks_minted"],
        "tasks_authored": record["tasks_authored"], "tasks_rejected": record["tasks_rejected"],
        "templates": built.meta["templates"],
        "rejected": [{"task_id": r["task_id"], "template": r["template"], "reasons": r["rejected_because"]}
                     for r in built.rejected()],
        "train_cases": record["train_cases"], "eval_cases": record["eval_cases"], "sft_rows": record["sft_rows"],
        "independent_families": {"train": leakage["train_anchors"], "eval": leakage["eval_anchors"],
                                 "shared": leakage["shared_anchors"]},
        "independent_entities": {"train": leakage["train_entities"], "eval": leakage["eval_entities"],
                                 "shared": leakage["shared_entities"], "eval_minimum": MIN_HELD_OUT_ENTITIES,
                                 "eval_needed": max(0, MIN_HELD_OUT_ENTITIES - leakage["eval_entities"])},
        "held_out_identifiers_in_training": leakage["held_out_identifiers_in_training"],
        "tool_coverage": record["tool_coverage"],
    }


def _not_trainable(report: dict[str, Any], reason: str, verdict: str) -> tuple[dict[str, Any], None]:
    report["reasons"].append(reason)
    report["verdict"] = "not trainable: " + verdict
    return report, None


def _qualify(path: Path, loaded: LoadedWorld, config: BuildConfig, report: dict[str, Any], progress: Progress,
             allow_small_held_out: bool) -> tuple[dict[str, Any], BuiltKit | None]:
    """Mint, gate, split and replay in memory; fill in admission, the held-out size and the verdict."""
    anchor_rows = report["state"]["anchor_rows"]
    if max(anchor_rows.values(), default=0) < 2:
        return _not_trainable(report, f"one independent state: the anchor tables hold {anchor_rows} row(s), so every "
                              "case would share one state and none can be held out for evaluation; export more rows "
                              "(customers, orders, tickets…)", "one independent state")
    try:
        built = execute_build(path, config, progress)
    except KitError as exc:
        return _not_trainable(report, str(exc), str(exc).split(": ", 1)[-1])
    except BlobkitError as exc:  # minting or a probe could not run on this world
        return _not_trainable(report, f"{type(exc).__name__}: {exc}", "the kit builder failed on this world")
    report["admission"] = _admission(built)
    entities = report["admission"]["independent_entities"]
    shortfall = held_out_shortfall(loaded, config, entities["eval"])
    if shortfall is not None:
        entities.update(eval_available=shortfall["held_out_side"], rows_needed=shortfall["rows_needed"])
        report["reasons"].append(shortfall["reason"])
        report["held_out_too_small"] = True
        report["verdict"] = (f"not trainable: held-out too small ({entities_text(entities['eval'])}, minimum "
                             f"{MIN_HELD_OUT_ENTITIES}; {shortfall['needed']} more needed)")
        if not allow_small_held_out:
            return report, None
        report["held_out_minimum_waived"] = True
        return report, built
    report["trainable"] = True
    report["verdict"] = (f"trainable: {report['admission']['tasks_admitted']} tasks admitted; "
                         f"{report['admission']['eval_cases']} held-out cases on {entities_text(entities['eval'])} "
                         f"(minimum {MIN_HELD_OUT_ENTITIES})")
    return report, built


def qualify_source(path: Path, config: BuildConfig, allow_small_held_out: bool = False,
                   progress: Progress = no_progress) -> tuple[dict[str, Any], BuiltKit | None]:
    """(the inspection report, the kit built in memory or None when the source cannot be trained).

    With ``allow_small_held_out`` a kit whose only fault is a held-out set below the minimum is returned too; the
    report still says not trainable, and ``held_out_minimum_waived: true``. Never raises for a bad source:
    validity problems are in ``reasons`` with ``valid: False``.
    """
    from world_format.loader import DEFAULT_BUDGET, load_world, parse_json, read_bounded

    path = Path(path)
    report: dict[str, Any] = {"source": str(path), "sha256": None, "valid": False, "kind": None,
                              "trainable": False, "reasons": [], "verdict": None}
    try:
        report["sha256"] = source_sha256(path)
        if path.is_file():
            names = _mcp_tool_names(parse_json(read_bounded(path, DEFAULT_BUDGET.max_world_json_bytes,
                                                            "world.json"), str(path)))
            if names is not None:
                return _mcp_report(report, names), None
        loaded = load_world(path)
    except BlobkitError as exc:  # world format, checksum and size errors all mean "not a valid world"
        return _not_trainable(report, str(exc), "the source is not a valid world")
    report.update(valid=True, kind="world", **_world_facts(loaded))
    return _qualify(path, loaded, config, report, progress, allow_small_held_out)


def inspect_source(path: Path, config: CompanyConfig | None = None) -> dict[str, Any]:
    """Compile and qualify a source without training or writing anything; say plainly whether it can be trained.

    ``config.allow_small_held_out`` is reported as ``held_out_minimum_waived`` when it is what would let the
    source train. Never raises for a bad source: validity problems are in ``reasons`` with ``valid: False``.
    """
    config = config or CompanyConfig()
    return qualify_source(path, config.build, config.allow_small_held_out)[0]
