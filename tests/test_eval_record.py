"""eval.json's typed records (trainers/eval_record.py): what a run writes reads back as the same record, byte for byte,
and anything else is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from trainers.eval_record import GRPOReport, LeftOut, SFTReport, read_report
from trainers.evaluation import EpisodeResult, EvalSummary
from trainers.fit import FitResult
from trainers.report import sft_report
from world_format.canonical import canonical_bytes
from world_format.vcode import Verdict


def _summary(passes: int, cases: int = 4) -> EvalSummary:
    return EvalSummary(tuple(EpisodeResult(f"c{i}", "lookup", "read", Verdict("pass" if i < passes else "fail"),
                                           "answer", 2, 0, (), (), f"e{i // 2}") for i in range(cases)))


def _report(tmp_path: Path) -> SFTReport:
    report = sft_report(_summary(1), _summary(3), FitResult(tmp_path, "lora", {}, 5, 2.5, [(1, 2.0), (5, 1.25)], None),
                        "0" * 64)
    return report.model_copy(update={"left_out": LeftOut(untokenizable=0, cases={}, why="none"), "eval_limit": None})


def test_an_sft_report_reads_back_as_the_same_record_and_the_same_bytes(tmp_path: Path) -> None:
    report = _report(tmp_path)
    report.write(tmp_path / "eval.json")
    again = read_report(tmp_path / "eval.json")
    assert isinstance(again, SFTReport) and again == report
    assert canonical_bytes(again.to_json()) + b"\n" == (tmp_path / "eval.json").read_bytes()
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["eval_limit"] is None and "pass_hat_k" not in saved["sft"]  # null when set, absent when not
    assert saved["sft_vs_base"]["only_later"] == 2 and saved["loss_history"] == [[1, 2.0], [5, 1.25]]


def test_an_unknown_or_missing_field_is_refused_naming_it(tmp_path: Path) -> None:
    saved = _report(tmp_path).to_json()
    with pytest.raises(ValidationError, match="surprise"):
        read_report_from(tmp_path, {**saved, "surprise": 1})
    with pytest.raises(ValidationError, match="verifier_errors"):
        read_report_from(tmp_path, {**saved, "sft": {k: v for k, v in saved["sft"].items() if k != "verifier_errors"}})


def test_an_sft_report_is_never_read_as_a_grpo_report_or_the_reverse(tmp_path: Path) -> None:
    saved = _report(tmp_path).to_json()
    grpo = {**{k: saved[k] for k in ("base", "sft", "optimizer_updates", "stopped_by", "model_calls", "kit_sha256",
                                     "left_out", "eval_limit")},
            "rl": saved["sft"], "rl_minus_sft": {"pass_rate": 0.0, "cases": 4}, "steps_completed": 1,
            "steps_planned": 1, "eval_model_calls": 16, "active_seconds": 1.0, "zero_variance_group_fraction": None,
            "reward_history": [[1, 0.5]], "group_size": 2, "shaping": None}
    assert isinstance(read_report_from(tmp_path, grpo), GRPOReport)
    with pytest.raises(ValidationError):
        read_report_from(tmp_path, {**grpo, "sft_minus_base": 0.5})


def read_report_from(tmp_path: Path, value: dict[str, object]) -> SFTReport | GRPOReport:
    path = tmp_path / "written.json"
    path.write_text(json.dumps(value))
    return read_report(path)
