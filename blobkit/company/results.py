"""A job's measured results, assembled from its stage records; nothing is re-run or invented here.

Every number names the stage that measured it: base and SFT come from the SFT stage (which
evaluates the base and the reloaded SFT export on the held-out cases), RL from the RL stage.
``held_out`` says how many cases and independent entities the rates are over, and, below
:data:`~blobkit.company.held_out.MIN_HELD_OUT_ENTITIES`, that they are too small to mean anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainers.eval_record import Delta, EvalRecord, GRPOReport, SFTReport, TrainingReport

from .held_out import MIN_HELD_OUT_ENTITIES, entities_text
from .records import HeldOut, JobResults, Rate
from .stage_records import HeldOutSize, KitStage, QualifyStage, StageRecord, TrainingStage

SMALL_HELD_OUT = "held-out too small to mean anything"
"""How a job's check, events and results name a held-out set below the minimum."""

SUMMARY_KEYS = ("pass_rate", "cases", "passed", "entities", "interval_95", "side", "cases_in_side", "coverage",
                "partial", "duplicates", "per_template", "tool_call_parse_failures", "refusal", "pass_hat_k",
                "decoding", "failures")


def _summary(evaluation: EvalRecord, measured_by: str) -> Rate:
    found = evaluation.to_json()
    return Rate.model_validate({**{k: found[k] for k in SUMMARY_KEYS if k in found}, "measured_by": measured_by})


def _report(records: Mapping[str, StageRecord], stage: str) -> TrainingReport | None:
    """The stage's eval.json report, as its record keeps it (None before the stage ran)."""
    found = records.get(stage)
    return found.report if isinstance(found, TrainingStage) else None


def assemble_results(records: Mapping[str, StageRecord], complete: bool) -> JobResults:
    """Measured results from stage records: base and SFT from the SFT stage, RL from the RL stage, the held-out
    size from the kit and qualify stages (:func:`job_results`)."""
    kit, qualify = records.get("kit"), records.get("qualify")
    return job_results(complete, _report(records, "sft"), _report(records, "rl"),
                       kit.frozen.eval_cases if isinstance(kit, KitStage) else None,
                       qualify.held_out if isinstance(qualify, QualifyStage) else None)


def job_results(complete: bool, sft: TrainingReport | None = None, rl: TrainingReport | None = None,
                eval_cases: int | None = None, qualified: HeldOutSize | None = None) -> JobResults:
    """The results of a job whose SFT and RL stages reported ``sft`` and ``rl`` (None: the stage did not run), on a
    kit of ``eval_cases`` held-out cases whose size qualify found to be ``qualified``. A result that does not apply
    is left unset (absent from :meth:`JobResults.to_json`)."""
    parts: dict[str, Any] = {}
    if isinstance(sft, SFTReport):
        parts["base"] = _summary(sft.base, "sft stage: the base model before training")
        parts["sft"] = _summary(sft.sft, "sft stage: the exported SFT model, reloaded")
        parts["sft_minus_base"] = Delta(pass_rate=round(sft.sft.pass_rate - sft.base.pass_rate, 4),
                                        cases=sft.sft.cases, paired=sft.sft_vs_base)
        parts["sft_stopped_by"] = sft.stopped_by
    if isinstance(rl, GRPOReport) and rl.rl_minus_sft is not None:
        parts["rl"] = _summary(rl.rl, "rl stage: the exported RL model")
        parts["rl_minus_sft"] = Delta.model_validate(rl.rl_minus_sft.to_json())
        parts["rl_stopped_by"] = rl.stopped_by
        if isinstance(sft, SFTReport) and rl.sft is not None and rl.sft.pass_rate != sft.sft.pass_rate:
            parts["sft_as_measured_by_rl"] = _summary(rl.sft, "rl stage: its own evaluation of the SFT start")
    evaluated: list[Rate] = [parts[name] for name in ("base", "sft", "rl") if name in parts]
    if eval_cases is not None and evaluated:
        parts["held_out"] = _held_out(evaluated, eval_cases, sft or rl, qualified)
    return JobResults(complete=complete, **parts)


def _held_out(evaluated: list[Rate], in_kit: int, report: TrainingReport | None,
              qualified: HeldOutSize | None) -> HeldOut:
    """How much of the kit's ``in_kit`` held-out cases the ``evaluated`` rates cover."""
    cases = min(rate.cases for rate in evaluated)
    return HeldOut(cases_in_kit=in_kit, cases_evaluated=cases, coverage=round(cases / in_kit, 4),
                   case_counts_match=len({rate.cases for rate in evaluated}) == 1,
                   **_partial(cases, in_kit, report), **_entities(qualified, evaluated))


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


def _entities(qualified: HeldOutSize | None, evaluated: list[Rate]) -> dict[str, Any]:
    """Independent entities in the kit and evaluated, the minimum, and ``too_small`` when the rates are below it."""
    counts = [rate.entities for rate in evaluated if rate.entities is not None]
    if not counts:
        return {}
    found: dict[str, Any] = {"entities_in_kit": qualified.entities if qualified else None,
                             "entities_evaluated": min(counts), "entities_minimum": MIN_HELD_OUT_ENTITIES}
    if min(counts) < MIN_HELD_OUT_ENTITIES:
        why = ("; the job waived the minimum (allow_small_held_out)" if qualified and qualified.minimum_waived
               else f"; eval_limit left out cases of the kit's {qualified.entities}"
               if qualified and qualified.entities > min(counts) else "")
        found["too_small"] = (f"{SMALL_HELD_OUT}: the pass rates are over {entities_text(min(counts))}, fewer than "
                              f"the {MIN_HELD_OUT_ENTITIES} a pass rate needs{why}")
    return found
