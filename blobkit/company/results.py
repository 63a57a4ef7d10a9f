"""A job's measured results, assembled from its stage records; nothing is re-run or invented here.

Every number names the stage that measured it: base and SFT come from the SFT stage (which
evaluates the base and the reloaded SFT export on the held-out cases), RL from the RL stage.
``held_out`` says how many cases and independent entities the rates are over, and, below
:data:`~blobkit.company.held_out.MIN_HELD_OUT_ENTITIES`, that they are too small to mean anything.
"""

from __future__ import annotations

from typing import Any

from trainers.eval_record import EvalRecord, GRPOReport, SFTReport, TrainingReport, report_from_json

from .held_out import MIN_HELD_OUT_ENTITIES, entities_text

SMALL_HELD_OUT = "held-out too small to mean anything"
"""How a job's check, events and results name a held-out set below the minimum."""

SUMMARY_KEYS = ("pass_rate", "cases", "passed", "entities", "interval_95", "side", "cases_in_side", "coverage",
                "partial", "duplicates", "per_template", "tool_call_parse_failures", "refusal", "pass_hat_k",
                "decoding")


def _summary(evaluation: EvalRecord, measured_by: str) -> dict[str, Any]:
    found = evaluation.to_json()
    return {**{k: found[k] for k in SUMMARY_KEYS if k in found}, "measured_by": measured_by}


def _report(records: dict[str, dict[str, Any]], stage: str) -> TrainingReport | None:
    """The stage's eval.json report, as its record keeps it (None before the stage ran)."""
    found = records.get(stage, {}).get("report")
    return report_from_json(found) if found else None


def assemble_results(records: dict[str, dict[str, Any]], complete: bool) -> dict[str, Any]:
    """Measured results from stage records: base and SFT from the SFT stage, RL from the RL stage."""
    results: dict[str, Any] = {"complete": complete}
    kit = records.get("kit", {}).get("frozen", {})
    sft, rl = _report(records, "sft"), _report(records, "rl")
    if isinstance(sft, SFTReport):
        results["base"] = _summary(sft.base, "sft stage: the base model before training")
        results["sft"] = _summary(sft.sft, "sft stage: the exported SFT model, reloaded")
        results["sft_minus_base"] = {"pass_rate": round(sft.sft.pass_rate - sft.base.pass_rate, 4),
                                     "cases": sft.sft.cases, "paired": sft.sft_vs_base.model_dump(mode="json")}
        results["sft_stopped_by"] = sft.stopped_by
    if isinstance(rl, GRPOReport) and rl.rl_minus_sft is not None:
        results["rl"] = _summary(rl.rl, "rl stage: the exported RL model")
        results["rl_minus_sft"] = rl.rl_minus_sft.to_json()
        results["rl_stopped_by"] = rl.stopped_by
        if isinstance(sft, SFTReport) and rl.sft is not None and rl.sft.pass_rate != sft.sft.pass_rate:
            results["sft_as_measured_by_rl"] = _summary(rl.sft, "rl stage: its own evaluation of the SFT start")
    evaluated = [results[name] for name in ("base", "sft", "rl") if name in results]
    if kit and evaluated:
        cases = min(summary["cases"] for summary in evaluated)
        results["held_out"] = {"cases_in_kit": kit["eval_cases"], "cases_evaluated": cases,
                               "coverage": round(cases / kit["eval_cases"], 4),
                               "case_counts_match": len({summary["cases"] for summary in evaluated}) == 1,
                               **_partial(cases, kit["eval_cases"], sft or rl),
                               **_entities(records.get("qualify", {}).get("held_out", {}), evaluated)}
    return results


def _partial(cases: int, in_kit: int, report: TrainingReport | None) -> dict[str, Any]:
    """``partial`` (the rates do not cover every held-out case, :mod:`trainers.scoring`) and why: the cases the
    base tokenizer cannot write (left out and counted) and the job's ``eval_limit``; ``partial_unexplained`` when
    neither accounts for the missing cases."""
    if cases >= in_kit:
        return {"partial": False}
    left_out = report.left_out.untokenizable if report is not None and report.left_out is not None else 0
    found: dict[str, Any] = {"partial": True, "left_out_untokenizable": left_out}
    limit = report.eval_limit if report is not None else None
    if left_out + cases < in_kit and limit is None:
        found["partial_unexplained"] = f"{in_kit - cases - left_out} held-out cases were neither evaluated nor left out"
    return found


def _entities(qualified: dict[str, Any], evaluated: list[dict[str, Any]]) -> dict[str, Any]:
    """Independent entities in the kit and evaluated, the minimum, and ``too_small`` when the rates are below it."""
    counts = [summary["entities"] for summary in evaluated if "entities" in summary]
    if not counts:
        return {}
    found = {"entities_in_kit": qualified.get("entities"), "entities_evaluated": min(counts),
             "entities_minimum": MIN_HELD_OUT_ENTITIES}
    if min(counts) < MIN_HELD_OUT_ENTITIES:
        why = ("; the job waived the minimum (allow_small_held_out)" if qualified.get("minimum_waived")
               else f"; eval_limit left out cases of the kit's {qualified['entities']}"
               if qualified.get("entities", 0) > min(counts) else "")
        found["too_small"] = (f"{SMALL_HELD_OUT}: the pass rates are over {entities_text(min(counts))}, fewer than "
                              f"the {MIN_HELD_OUT_ENTITIES} a pass rate needs{why}")
    return found
