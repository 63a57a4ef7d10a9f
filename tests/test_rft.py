"""RFT: sampled episodes scored by the verifier, kept as kit-shaped rows, deduplicated in a seeded order; its options,
refusals and records; one slow mechanics run (tiny SFT, then RFT from its export)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from scripted_policy import Scripted, hermes_texts  # noqa: E402

from blobkit.cli.train import resolve_config  # noqa: E402
from blobkit.errors import ConfigError, TargetUnavailableError, TrainerError  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.eval_record import GRPOReport, RFTReport, SFTReport, report_from_json  # noqa: E402
from trainers.grpo import rollouts  # noqa: E402
from trainers.plan import validate_rows  # noqa: E402
from trainers.rft import reference_rows, rft_cases  # noqa: E402
from trainers.rft_select import RFT_SOURCE, SampledEpisode, row_key, select  # noqa: E402
from world_format.kit import Kit, KitCase  # noqa: E402


def _sample(kit: Kit, scripts: list[tuple[dict[str, Any], KitCase, list[str]]]) -> list[SampledEpisode]:
    """Run each script as one episode of its case on the kit's world; sample numbers count per case."""
    runtime, out, seen = kit.world().runtime(), [], {}  # type: ignore[var-annotated]
    try:
        for _, case, texts in scripts:
            [item] = rollouts(Scripted(texts), runtime, [case], max_turns=8)
            out.append(SampledEpisode(case, seen.setdefault(case.case_id, 0), item.episode))
            seen[case.case_id] += 1
    finally:
        runtime.close()
    return out


@pytest.fixture(scope="module")
def two_cases(retail_kit: Kit) -> list[tuple[dict[str, Any], KitCase]]:
    """Two training rows of different cases with their RFT cases."""
    rows = retail_kit.jsonl("sft.jsonl")
    cases = {case.case_id: case for case in rft_cases(retail_kit, rows)}
    picked = [(row, cases[row["metadata"]["case_id"]]) for row in rows if row["metadata"]["case_id"] in cases]
    return picked[:1] + [next(p for p in picked if p[1].template != picked[0][1].template)]


@pytest.fixture(scope="module")
def sampled(retail_kit: Kit, two_cases: list[tuple[dict[str, Any], KitCase]]) -> list[SampledEpisode]:
    """Per case: the reference turns twice (one passing conversation, sampled twice) and one silent attempt;
    the first case also once with a malformed call before its turns."""
    (row_a, case_a), (row_b, case_b) = two_cases
    broken = "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\n</tool_call>"
    return _sample(retail_kit, [(row_a, case_a, hermes_texts(row_a)), (row_b, case_b, hermes_texts(row_b)),
                                (row_a, case_a, ["Sure."]), (row_a, case_a, hermes_texts(row_a)),
                                (row_b, case_b, hermes_texts(row_b)), (row_b, case_b, ["Sure."]),
                                (row_a, case_a, [broken, *hermes_texts(row_a)])])


def test_only_verifier_passes_are_kept_and_each_conversation_once(retail_kit: Kit, sampled: list[SampledEpisode]
                                                                  ) -> None:
    runtime = retail_kit.world().runtime()
    try:
        chosen = select(sampled, runtime, seed=1)
    finally:
        runtime.close()
    # the reference turns pass (four times, one with a malformed call first); the silent attempts fail
    assert [s.episode.passed for s in sampled] == [True, True, False, True, True, False, True]
    counts = chosen.counts
    assert (counts.episodes, counts.passed, counts.kept, counts.cases_kept) == (7, 5, 2, 2)
    assert (counts.duplicates, counts.unusable, counts.verifier_errors) == (2, 1, 0)
    assert sorted(row["metadata"]["copies"] for row in chosen.rows) == [2, 2]
    assert len({row_key(row) for row in chosen.rows}) == 2


def test_with_a_reference_fill_a_case_with_no_kept_episode_trains_on_its_kit_row(
        retail_kit: Kit, two_cases: list[tuple[dict[str, Any], KitCase]]) -> None:
    """Case A passes once, case B only fails: without a fill B has no row (the mix is the policy's successes); with
    ``--rft-fill reference`` B's kit row stands for it, marked, and A keeps its sampled episode, not its kit row."""
    (row_a, case_a), (row_b, case_b) = two_cases
    sampled = _sample(retail_kit, [(row_a, case_a, hermes_texts(row_a)), (row_b, case_b, ["Sure."])])
    rows = retail_kit.jsonl("sft.jsonl")
    fill = reference_rows(retail_kit, rows)
    runtime = retail_kit.world().runtime()
    try:
        alone, filled = select(sampled, runtime, seed=1), select(sampled, runtime, seed=1, fill=fill)
    finally:
        runtime.close()
    assert [r["metadata"]["case_id"] for r in alone.rows] == [case_a.case_id] and alone.counts.reference_rows == 0
    by_case = {r["metadata"]["case_id"]: r for r in filled.rows}
    assert set(by_case) == {case_a.case_id, case_b.case_id} and filled.counts.reference_rows == 1
    assert by_case[case_a.case_id]["metadata"]["sft_source"] == RFT_SOURCE
    assert by_case[case_b.case_id]["messages"] == row_b["messages"]
    assert by_case[case_b.case_id]["metadata"] == {**row_b["metadata"], "rft_fill": "reference"}
    assert (filled.counts.kept, filled.counts.cases_kept) == (1, 1)  # the counts of sampled episodes are unchanged


def test_a_kept_row_has_the_kit_rows_shape_and_validates_against_the_world_like_them(
        retail_kit: Kit, sampled: list[SampledEpisode], two_cases: list[tuple[dict[str, Any], KitCase]]) -> None:
    runtime = retail_kit.world().runtime()
    try:
        rows = select(sampled, runtime, seed=1).rows
    finally:
        runtime.close()
    validate_rows(retail_kit.world(), rows)  # the plan's check of the kit's own rows
    by_case = {row["metadata"]["case_id"]: row for row in rows}
    for kit_row, case in two_cases:
        row = by_case[case.case_id]
        assert set(row) == set(kit_row) == {"messages", "tools", "metadata"}
        # the replayed episode is the kit's own conversation again: call ids, observations, customer turns
        assert row["messages"] == kit_row["messages"] and row["tools"] == kit_row["tools"]
        assert row["metadata"]["sft_source"] == RFT_SOURCE and row["metadata"]["verdict"] == "pass"
        assert row["metadata"]["task_id"] == kit_row["metadata"]["task_id"]
        ids = [call["id"] for m in row["messages"] for call in m.get("tool_calls") or []]
        assert ids == [f"call_{i}" for i in range(len(ids))]


def test_selection_is_the_same_whatever_the_sampling_order_and_the_seed_orders_it(
        retail_kit: Kit, sampled: list[SampledEpisode]) -> None:
    runtime = retail_kit.world().runtime()
    try:
        forward = select(sampled, runtime, seed=1)
        backward = select(list(reversed(sampled)), runtime, seed=1)
        orders = {tuple(r["metadata"]["case_id"] for r in select(sampled, runtime, seed=s).rows) for s in range(8)}
    finally:
        runtime.close()
    assert json.dumps(forward.rows, sort_keys=True) == json.dumps(backward.rows, sort_keys=True)
    assert forward.counts == backward.counts
    assert len(orders) == 2  # two rows: some seeds put each first


def test_a_passed_episode_with_an_unparsable_turn_is_counted_unusable_not_trained_on(
        retail_kit: Kit, sampled: list[SampledEpisode]) -> None:
    broken = [s for s in sampled if s.episode.parse_failures]
    assert broken and all(s.episode.passed for s in broken)  # the verifier passes it: only the selection drops it
    runtime = retail_kit.world().runtime()
    try:
        chosen = select(broken, runtime, seed=0)
    finally:
        runtime.close()
    assert chosen.rows == [] and chosen.counts.unusable == len(broken) == chosen.counts.passed


@pytest.mark.parametrize(("flags", "match"), [({"rft_samples": 0}, "rft_samples"),
                                              ({"rft_temperature": 0.0}, "rft_temperature"),
                                              ({"rft_temperature": -1.0}, "rft_temperature")])
def test_bad_rft_options_are_config_errors(flags: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        resolve_config(None, None, {"method": "rft", **flags})


def test_rft_refuses_to_run_without_an_sft_export_on_mlx_runpod_or_several_processes(tmp_path: Path) -> None:
    assert "--init-adapter" in (TrainConfig(method="rft", target="local-torch").unsupported() or "")
    start = {"method": "rft", "init_adapter": tmp_path}
    assert TrainConfig(**start, target="local-torch").unsupported() is None
    assert "local-torch" in (TrainConfig(**start, target="local-mlx").unsupported() or "")
    assert "GRPO only" in (TrainConfig(**start, target="runpod").unsupported() or "")
    launched = TrainConfig(**start, target="local-torch", local_torch={"processes": 2}, batch_size=8)
    assert "one process" in (launched.unsupported() or "")


def test_the_cli_refuses_rft_without_init_adapter_before_writing_anything(kit_path: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["train", "--world", str(kit_path), "--method", "rft", "--target",
                                      "local-torch", "--out", str(out)])
    assert result.exit_code != 0 and "--init-adapter" in str(result.exception)
    assert isinstance(result.exception, ConfigError | TargetUnavailableError) and not out.exists()


def _rate(cases: int, passed: int) -> dict[str, Any]:
    rate = passed / cases
    return {"pass_rate": rate, "cases": cases, "passed": passed, "entities": cases, "interval_95": [0.0, 1.0],
            "interval_method": "wilson", "side": "eval", "cases_in_side": cases, "coverage": 1.0, "partial": False,
            "duplicates": 0, "per_template": {}, "tool_call_parse_failures": 0,
            "refusal": {"false_acceptance": 0, "false_rejection": 0}, "verifier_errors": 0, "model_calls": cases}


def test_an_rft_report_reads_back_as_itself_and_never_as_an_sft_or_grpo_report() -> None:
    from trainers.paired import compare

    paired = compare({"c1": (True, "a"), "c2": (False, "b")}, {"c1": (True, "a"), "c2": (True, "b")},
                     earlier_name="sft", later_name="rft")
    sampling = {"episodes": 8, "passed": 5, "verifier_errors": 0, "unusable": 1, "duplicates": 2, "kept": 2,
                "cases_kept": 2, "reference_rows": 0, "samples_per_case": 4, "temperature": 0.7, "cases": 2,
                "cases_planned": 2, "model_calls": 20, "seconds": 1.5}
    value = {"sft": _rate(2, 1), "rft": _rate(2, 2), "rft_minus_sft": {"pass_rate": 0.5, "cases": 2,
                                                                        "paired": paired.model_dump(mode="json")},
             "sampling": sampling, "train_seconds": 3.0, "loss_history": [[1, 0.5]], "eval_model_calls": 4,
             "optimizer_updates": 1, "stopped_by": None, "model_calls": 20, "kit_sha256": "0" * 64,
             "left_out": {"untokenizable": 0, "cases": {}, "why": "-"}, "eval_limit": None}
    report = report_from_json(value)
    assert isinstance(report, RFTReport) and not isinstance(report, (SFTReport, GRPOReport))
    assert report.to_json() == value  # no base carried: absent, not null
    assert list(report.evaluations()) == ["sft", "rft"]
    assert report.rft_minus_sft.paired is not None and report.rft_minus_sft.paired.only_later == 1
    with pytest.raises(ValueError):
        report_from_json({**value, "sampling": {**sampling, "kept": "many"}})


@pytest.mark.slow
def test_rft_samples_from_a_tiny_sft_export_keeps_its_passes_and_trains_on_them(tmp_path: Path) -> None:
    """Mechanics on the small shop world: a tiny model memorises its 18 training rows by full-weight SFT, RFT samples
    2 episodes per training case from that export, keeps the passed ones and trains on them; eval.json pairs SFT
    and RFT on the same held-out cases (a couple of minutes on 2 cores)."""
    from conftest import write_world
    from worlds import small_world

    from blobkit.builder import BuildConfig, build_kit
    from trainers.plan import plan
    from trainers.run import run_training
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts
    from world_format.kit import open_kit

    record = build_kit(write_world(tmp_path / "src", small_world()), tmp_path / "kit",
                       BuildConfig(train_cases_per_task=2, eval_cases_per_task=1))
    with open_kit(Path(record["kit"]["path"])) as kit:
        rows = kit.rows()
        tiny = build_tiny_model(row_texts(rows), tmp_path / "tiny", TinyModelConfig(
            seed=3, hidden_size=64, num_layers=2, num_heads=2, vocab_size=700))
        common: dict[str, Any] = {"kit": kit.root, "base": str(tiny), "target": "local-torch", "max_new_tokens": 48,
                                  "short_episodes": True, "grounding_repeats": 0, "answer_quote_repeats": 0,
                                  "eval_limit": 3}
        sft_config = TrainConfig.preset("tiny", **common, method="sft", out=tmp_path / "sft", epochs=30)
        run_training(sft_config, kit, rows, plan(sft_config, kit, rows, kit.path("sft.jsonl")), lambda line: None)
        config = TrainConfig.preset("tiny", **common, method="rft", out=tmp_path / "rft", epochs=1,
                                    init_adapter=tmp_path / "sft" / "export", rft_samples=2, rft_temperature=0.7)
        planned = plan(config, kit, rows, kit.path("sft.jsonl"))
        assert planned.rollout_budget is not None and planned.rollout_budget.per_step == 2 * planned.config.turn_cap
        report = run_training(config, kit, rows, planned, lambda line: None)
    assert isinstance(report, RFTReport)
    sampling = report.sampling
    assert sampling.episodes == 2 * sampling.cases_planned == 2 * len(rft_cases(kit, rows))
    assert 0 < sampling.kept <= sampling.passed and report.optimizer_updates > 0
    assert sampling.passed == sampling.kept + sampling.duplicates + sampling.unusable
    assert report.rft_minus_sft.cases == report.sft.cases == report.rft.cases == 3
    paired = report.rft_minus_sft.paired
    assert paired is not None and (paired.earlier, paired.later) == ("sft", "rft")
    assert report.base is not None  # carried from the SFT run's eval.json
    out = tmp_path / "rft"
    saved = json.loads((out / "eval.json").read_text())
    assert saved["sampling"] == json.loads((out / "rft_sampling.json").read_text()) == sampling.to_json()
    kept = [json.loads(line) for line in (out / "rft_rows.jsonl").read_text().splitlines()]
    assert len(kept) == sampling.kept and all(r["metadata"]["sft_source"] == RFT_SOURCE for r in kept)
    episodes = (out / "rft_episodes.jsonl").read_text().splitlines()
    assert len(episodes) == sampling.episodes
    assert (out / "export" / "manifest.json").is_file() and (out / "eval_cases_rft.jsonl").is_file()


def test_an_rft_without_a_kept_episode_stops_with_a_clear_error_after_recording_its_sampling(
        retail_kit: Kit, tmp_path: Path) -> None:
    """An untrained tiny model passes no episode: RFT says so, after writing the sampling's counts."""
    from trainers.plan import plan
    from trainers.run import run_training
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

    rows = retail_kit.jsonl("sft.jsonl")
    tiny = build_tiny_model(row_texts(rows), tmp_path / "tiny", TinyModelConfig(
        seed=3, hidden_size=32, num_layers=2, num_heads=2, vocab_size=700))
    common: dict[str, Any] = {"kit": retail_kit.root, "base": str(tiny), "target": "local-torch", "max_turns": 2,
                              "short_episodes": True, "max_new_tokens": 8, "eval_limit": 1, "full": True}
    sft = TrainConfig(**common, method="sft", out=tmp_path / "sft", epochs=0.05)
    run_training(sft, retail_kit, rows, plan(sft, retail_kit, rows, retail_kit.path("sft.jsonl")), lambda line: None)
    config = TrainConfig(**common, method="rft", out=tmp_path / "rft", init_adapter=tmp_path / "sft" / "export",
                         rft_samples=1, max_model_calls=6, episode_batch=1)
    with pytest.raises(TrainerError, match="RFT kept no episode"):
        run_training(config, retail_kit, rows, plan(config, retail_kit, rows, retail_kit.path("sft.jsonl")),
                     lambda line: None)
    recorded = json.loads((tmp_path / "rft" / "rft_sampling.json").read_text())
    # one case (1 sample x 2 turns) at a time, each only while the 6 calls can hold it
    assert recorded["kept"] == 0 and recorded["passed"] == 0 and 3 <= recorded["episodes"] < recorded["cases_planned"]
    assert recorded["model_calls"] <= 6 and not (tmp_path / "rft" / "eval.json").exists()


@pytest.mark.usefixtures("cached_hub_bases")  # a hub base plans only where its files are (trainers/preflight.py)
def test_an_rft_dry_run_plans_the_sampling_budget_and_the_most_optimizer_steps(kit_path: Path, adapter: Path,
                                                                               tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blobkit.cli import app
    from world_format.kit import open_kit

    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["train", "--world", str(kit_path), "--out", str(out), "--dry-run", "--method",
                                      "rft", "--target", "local-torch", "--init-adapter", str(adapter),
                                      "--rft-samples", "3", "--batch-size", "4", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "plan.json").read_text())
    with open_kit(kit_path) as kit:
        cases = len(rft_cases(kit, kit.rows()))
    assert "unsupported" not in saved and cases == len(kit_path.joinpath("sft.jsonl").read_text().splitlines())
    turns = saved["config"]["max_turns"]
    assert saved["rollout_budget"]["per_step"] == 3 * turns
    assert saved["rollout_budget"]["max_model_calls"] == cases * 3 * turns
    assert saved["estimated_optimizer_steps"] == -(-cases * 3 // 4) * 2  # every sampled episode kept: the most
