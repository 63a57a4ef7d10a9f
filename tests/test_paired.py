"""Paired comparisons between methods on the same cases and pass^k beside pass@1 (issue 29, lever 1's reporting)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from blobkit.company.results import job_results
from trainers.config import TrainConfig
from trainers.errors import ScoreError
from trainers.evaluation import EpisodeResult, EvalSummary
from trainers.fit import FitResult
from trainers.paired import bootstrap_interval, compare, mcnemar_exact
from trainers.pass_k import pass_k_record
from trainers.report import sft_report
from world_format.vcode import Verdict


def _outcomes(passes: list[bool], entities: int | None = None) -> dict[str, tuple[bool, str]]:
    return {f"c{i:03d}": (ok, f"e{i % (entities or len(passes))}") for i, ok in enumerate(passes)}


def _result(case_id: str, passed: bool, entity: str = "", messages: tuple[dict[str, Any], ...] = ()) -> EpisodeResult:
    verdict = Verdict("pass" if passed else "fail")
    return EpisodeResult(case_id, "t", "read", verdict, "answer", 1, 0, (), messages, entity or case_id)


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)  # statsmodels: 0.021484375
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_the_paired_table_counts_each_discordant_case_and_the_difference_is_later_minus_earlier() -> None:
    earlier = _outcomes([True, True, False, False, True])
    later = _outcomes([True, False, True, True, True])
    record = compare(earlier, later, earlier_name="base", later_name="sft")
    assert (record.both_passed, record.only_earlier, record.only_later, record.neither) == (2, 1, 2, 0)
    assert record.difference == pytest.approx(0.2)
    assert record.cases == 5 and record.entities == 5


def test_identical_verdicts_differ_by_zero_with_an_interval_of_zero_and_p_one() -> None:
    same = _outcomes([True, False] * 20)
    record = compare(same, same, earlier_name="a", later_name="b")
    assert record.difference == 0 and record.interval_95 == (0.0, 0.0) and record.mcnemar_p == 1.0
    assert not record.excludes_zero


def test_the_bootstrap_interval_agrees_with_the_normal_approximation_on_independent_cases() -> None:
    # 100 independent cases: 20 only the later method passes, 5 only the earlier: difference 0.15
    earlier = [False] * 20 + [True] * 5 + [True] * 40 + [False] * 35
    later = [True] * 20 + [False] * 5 + [True] * 40 + [False] * 35
    record = compare(_outcomes(earlier), _outcomes(later), earlier_name="sft", later_name="rl")
    se = math.sqrt((25 / 100 - 0.15 ** 2) / 100)
    low, high = record.interval_95
    assert low == pytest.approx(0.15 - 1.96 * se, abs=0.015) and high == pytest.approx(0.15 + 1.96 * se, abs=0.015)
    assert record.excludes_zero and record.mcnemar_p < 0.01


def test_cases_of_one_entity_are_resampled_together_so_the_interval_widens() -> None:
    earlier = [False] * 20 + [True] * 5 + [True] * 40 + [False] * 35
    later = [True] * 20 + [False] * 5 + [True] * 40 + [False] * 35
    independent = compare(_outcomes(earlier), _outcomes(later), earlier_name="a", later_name="b")
    # the same verdicts, but the 20 gains all concern one customer: they are one piece of evidence
    clustered = {case: (ok, "e-gain" if i < 20 else f"e{i}") for i, (case, (ok, _)) in
                 enumerate(_outcomes(later).items())}
    clustered_earlier = {case: (_outcomes(earlier)[case][0], entity) for case, (_, entity) in clustered.items()}
    together = compare(clustered_earlier, clustered, earlier_name="a", later_name="b")
    assert together.entities == 81
    assert together.interval_95[1] - together.interval_95[0] > independent.interval_95[1] - independent.interval_95[0]


def test_the_same_verdicts_give_the_same_record_and_an_empty_comparison_is_zero() -> None:
    a, b = _outcomes([True, False, True] * 9, 7), _outcomes([True, True, False] * 9, 7)
    assert compare(a, b, earlier_name="x", later_name="y") == compare(a, b, earlier_name="x", later_name="y")
    assert bootstrap_interval([]) == (0.0, 0.0)


def test_methods_judged_on_different_cases_cannot_be_paired() -> None:
    with pytest.raises(ScoreError, match="not judged on the same cases.*c002"):
        compare(_outcomes([True, False]), _outcomes([True, False, True]), earlier_name="base", later_name="sft")
    with pytest.raises(ScoreError, match="concerns"):
        compare({"c": (True, "e1")}, {"c": (True, "e2")}, earlier_name="base", later_name="sft")


def test_pass_hat_k_counts_a_case_only_when_every_attempt_passes() -> None:
    attempts = [[_result("a", True), _result("b", True), _result("c", False)],
                [_result("a", True), _result("b", False), _result("c", False)],
                [_result("a", True), _result("b", True), _result("c", False)]]
    record = pass_k_record(attempts, temperature=0.7, seed=1)
    assert (record.k, record.cases, record.all_passed, record.any_passed) == (3, 3, 1, 2)
    assert record.pass_hat_k == pytest.approx(1 / 3, abs=1e-4) and record.pass_at_k == pytest.approx(2 / 3, abs=1e-4)
    assert record.sampled_pass_rate == pytest.approx(5 / 9, abs=1e-4)
    with pytest.raises(ScoreError, match="same cases"):
        pass_k_record([attempts[0], attempts[1][:2]], temperature=0.7, seed=1)


def test_a_paired_difference_prints_its_fraction_rounded_once() -> None:
    # 21 more passes of 220 = +0.09545…: kept as 0.0955, which a second rounding prints as +0.096
    earlier = _outcomes([i < 197 for i in range(220)])
    later = _outcomes([i < 218 for i in range(220)])
    paired = compare(earlier, later, earlier_name="one", later_name="two")
    assert paired.difference == 0.0955 and paired.text().startswith("two - one: +0.095 (95 % CI")


def test_pass_hat_k_prints_the_fraction_not_its_rounded_record() -> None:
    # 186/220 = 0.84545…: kept as 0.8455, which printed at 3 places reads 0.846
    cases = [f"c{i:03}" for i in range(220)]
    attempts = [[_result(case, i < passing) for i, case in enumerate(cases)] for passing in (186, 190, 197)]
    record = pass_k_record(attempts, temperature=0.7, seed=1)
    assert record.pass_hat_k == 0.8455 and record.sampled_passes == 573
    assert record.text().startswith("pass^3 0.845 (186/220 cases") and "pass@3 0.895, sampled 0.868" in record.text()


def test_an_sft_report_carries_the_paired_comparison_into_the_company_results(tmp_path: Path) -> None:
    base = EvalSummary(tuple(_result(f"c{i}", i < 3, f"e{i // 2}") for i in range(10)))
    sft = EvalSummary(tuple(_result(f"c{i}", i < 8, f"e{i // 2}") for i in range(10)))
    report = sft_report(base, sft, FitResult(tmp_path, "lora", {}, 3, 1.0, [], None), "0" * 64)
    assert report.sft_vs_base.only_later == 5 and report.sft_vs_base.entities == 5
    results = job_results(False, report)
    assert results.sft_minus_base is not None and results.sft_minus_base.paired is not None
    assert results.sft_minus_base.paired.difference == pytest.approx(0.5)


def test_pass_k_of_a_real_model_repeats_with_its_seed(retail_kit: Any, tinker_tiny: Path) -> None:
    """Three sampled evaluations of a tiny random model on two held-out cases: the record is the same twice."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.pass_k import evaluate_pass_k

    model = AutoModelForCausalLM.from_pretrained(tinker_tiny).eval()
    tokenizer = AutoTokenizer.from_pretrained(tinker_tiny)
    config = TrainConfig(pass_k=3, max_new_tokens=8, max_turns=2, episode_batch=2)
    cases = retail_kit.cases("eval")[:2]
    runtime = retail_kit.world().runtime()
    try:
        lines: list[str] = []
        first = evaluate_pass_k(model, tokenizer, runtime, cases, config, log=lines.append)
        second = evaluate_pass_k(model, tokenizer, runtime, cases, config)
    finally:
        runtime.close()
    assert first == second and first.k == 3 and first.cases == 2 and first.temperature == 0.7
    # one progress line per attempt, whose passes add up to the record's
    assert [line.split(":")[0] for line in lines] == ["pass^3 attempt 1/3", "pass^3 attempt 2/3", "pass^3 attempt 3/3"]
    assert sum(int(line.split(": ")[1].split(" of ")[0]) for line in lines) == round(first.sampled_pass_rate * 6)
