"""`blobkit company` and `blobkit jobs`: inspection, the job store, cancellation, SIGKILL + resume, budgets."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, write_world
from typer.testing import CliRunner
from worlds import small_world

from blobkit.cli import app
from blobkit.company import CHECKS, STAGES, CompanyConfig, JobStore, create_job, inspect_source, run_job
from blobkit.company.records import JobResults
from blobkit.company.schema import SCHEMA_VERSION
from blobkit.company.stage_records import STAGE_RECORDS, ReplayStage, stage_record
from blobkit.errors import JobError, JobNotFoundError
from world_format.canonical import canonical_json

# Tiny settings: a 32-wide, 2-layer model, 2 training cases and 1 held-out case per task, short episodes. The small
# world's held-out cases concern 2 independent entities, below company inspect's minimum: the tests of the job's
# mechanics waive it (allow_small_held_out), and their results are marked too small to mean anything.
EPISODES: dict[str, Any] = {"eval_limit": 2, "max_turns": 2, "short_episodes": True, "max_new_tokens": 16}
TINY: dict[str, dict[str, Any]] = {"build": {"train_cases_per_task": 2, "eval_cases_per_task": 1},
                                   "sft": {"epochs": 1, **EPISODES}, "rl": EPISODES,
                                   "tiny": {"hidden_size": 32, "num_layers": 2, "vocab_size": 600}}
TINY_FLAGS = ["--train-cases", "2", "--eval-cases", "1", "--sft-epochs", "1", "--eval-limit", "2", "--max-turns", "2",
              "--short-episodes", "--max-new-tokens", "16", "--tiny-hidden-size", "32", "--tiny-layers", "2",
              "--tiny-vocab-size", "600", "--allow-small-held-out"]
WAIT_S = 240.0


def tiny_config(allow_small_held_out: bool = True, **overrides: dict[str, Any]) -> CompanyConfig:
    """The tiny settings plus overrides (field values by part: build, sft, rl, tiny, budgets), waiving the
    held-out minimum unless told not to."""
    parts = {part: {**TINY.get(part, {}), **overrides.get(part, {})} for part in (*TINY, *overrides)}
    return CompanyConfig.for_base("tiny", **parts, allow_small_held_out=allow_small_held_out)


def has_grpo() -> bool:
    """Whether the GRPO trainer has landed (the RL stage needs it)."""
    import importlib.util

    return importlib.util.find_spec("trainers.grpo") is not None


def wait_for(job: Callable[[], dict[str, Any]], condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll a job record until ``condition`` holds (or fail after WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        record = job()
        if condition(record):
            return record
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting; last events: {[e['message'] for e in record['events'][-5:]]}")


def training_started(record: dict[str, Any]) -> bool:
    """The SFT stage has logged the start of its optimizer loop."""
    return any(e["stage"] == "sft" and e["message"].startswith("training") for e in record["events"])


def stage_events(record: dict[str, Any], stage: str) -> list[str]:
    """Messages of a stage's events, in order."""
    return [e["message"] for e in record["events"] if e["stage"] == stage]


def check(record: dict[str, Any], name: str) -> str:
    """A check's status."""
    return next(c["status"] for c in record["checks"] if c["name"] == name)


_WRITES: list[str] | None = None
"""While :func:`recording_writes` runs: every file-system write this process audits (else None)."""
_WRITE_EVENTS = ("os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "shutil.copyfile", "shutil.rmtree",
                 "tempfile.mkdtemp", "tempfile.mkstemp")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _WRITES is None:
        return
    if event == "open" and not isinstance(args[0], int):
        mode, flags = args[1] or "", args[2] or 0
        if set(mode) & set("wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            _WRITES.append(f"open {args[0]} {mode or flags}")
    elif event in _WRITE_EVENTS or (event == "sqlite3.connect" and args[0] != ":memory:"
                                    and "mode=ro" not in str(args[0])):
        _WRITES.append(f"{event} {args[0]}")


sys.addaudithook(_audit)


@contextmanager
def recording_writes() -> Iterator[list[str]]:
    """The file-system writes (opens for writing, new folders, renames, temp files, databases) made inside."""
    global _WRITES
    _WRITES = []
    try:
        yield _WRITES
    finally:
        _WRITES = None


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The small world as a single-file export."""
    return write_world(tmp_path / "src", small_world())


@pytest.fixture
def one_state_source(tmp_path: Path) -> Path:
    """The small world cut down to one customer and their one order: a single independent state."""
    world = small_world()
    world["state"]["rows"] = {name: rows[:1] for name, rows in world["state"]["rows"].items()}
    return write_world(tmp_path / "one", world)


@pytest.fixture
def mcp_source(tmp_path: Path) -> Path:
    """MCP tool schemas only: names, descriptions and input schemas, no policies or state."""
    path = tmp_path / "mcp" / "tools.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"tools": [
        {"name": "get_order", "description": "Look up an order.",
         "inputSchema": {"type": "object", "properties": {"order_id": {"type": "integer"}}}},
        {"name": "cancel_order", "description": "Cancel an order.",
         "inputSchema": {"type": "object", "properties": {"order_id": {"type": "integer"}}}}]}))
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    """A fresh job store."""
    with JobStore(tmp_path / "jobs") as opened:
        yield opened


# --------------------------------------------------------------------------- the job store


def test_the_store_uses_wal_full_sync_and_a_versioned_schema(store: JobStore) -> None:
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_store_written_by_a_newer_blobkit_is_refused(tmp_path: Path) -> None:
    JobStore(tmp_path / "s").close()
    conn = sqlite3.connect(tmp_path / "s" / "jobs.sqlite")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(JobError, match="newer"):
        JobStore(tmp_path / "s")


def test_a_missing_store_is_an_error_for_readers(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="no job store"):
        JobStore(tmp_path / "nowhere", create=False)


def test_a_queued_job_records_its_identity_and_every_check_as_not_run(store: JobStore, source: Path) -> None:
    job_id = create_job(store, source, "tiny", tiny_config())
    job = store.get(job_id)
    assert job["status"] == "queued"
    assert job["identity"]["source"]["sha256"] and job["identity"]["base_model"]["id"] == "tiny"
    budgets = job["identity"]["config"]["budgets"]
    assert budgets["max_minutes"] == 30 and budgets["max_model_calls"] == 2079
    assert job["identity"]["config"]["allow_small_held_out"] is True
    assert [c["name"] for c in job["checks"]] == list(CHECKS)
    assert {c["status"] for c in job["checks"]} == {"not_run"}
    assert job["usage"] == {"active_seconds": 0, "model_calls": 0, "model_calls_exact": True, "tokens": 0,
                            "optimizer_updates": 0}
    assert [e["message"] for e in job["events"]] == ["job queued"]


def test_an_unknown_base_model_is_refused_before_anything_is_queued(store: JobStore, source: Path) -> None:
    from blobkit.errors import ConfigError

    with pytest.raises(ConfigError, match="not in the catalog"):
        create_job(store, source, "someone/secret-model", tiny_config())
    assert store.list_jobs() == []


def test_events_are_ordered_and_readable_from_another_connection(store: JobStore, source: Path) -> None:
    job_id = create_job(store, source, "tiny", tiny_config())
    for index in range(5):
        store.add_event(job_id, "test", "info", f"event {index}", {"index": index})
    with JobStore(store.root, create=False) as reader:
        events = reader.get(job_id)["events"]
    assert [e["seq"] for e in events] == list(range(1, 7))
    assert [e["data"] for e in events[1:]] == [{"index": i} for i in range(5)]


def test_anything_but_a_job_id_is_refused(store: JobStore) -> None:
    for bad in ("../../etc", "job-../x", "job-0123456789ab"):
        with pytest.raises(JobNotFoundError):
            store.get(bad)


def test_a_job_with_a_live_worker_cannot_be_claimed_twice(store: JobStore, source: Path) -> None:
    from blobkit.company.workers import worker_id

    job_id = create_job(store, source, "tiny", tiny_config())
    store.claim(job_id, worker_id())
    with pytest.raises(JobError, match="is running in worker"):
        store.claim(job_id, "elsewhere:1")


def test_cancelling_a_queued_job_is_immediate(store: JobStore, source: Path) -> None:
    job_id = create_job(store, source, "tiny", tiny_config())
    assert store.request_cancel(job_id, "changed my mind") == "cancelled"
    job = store.get(job_id)
    assert job["status"] == "cancelled" and job["cancel_requested"]["reason"] == "changed my mind"


# --------------------------------------------------------------------------- the config


def test_company_defaults_follow_the_issues() -> None:
    from trainers.config import TrainConfig

    config = CompanyConfig.for_base("Qwen/Qwen2.5-0.5B-Instruct")
    assert (config.sft.epochs, config.rl.steps, config.rl.group_size, config.budgets.max_minutes,
            config.budgets.max_model_calls, config.sft.full) == (TrainConfig.preset("lora").epochs, 4, 2, 30, 2079,
                                                                 False)
    assert (config.rl.batch_size // config.rl.group_size, config.sft.eval_limit) == (1, None)
    assert config.sft.max_turns is None  # derived from the kit once it is built
    assert (config.rl.eval_limit, config.rl.max_turns, config.build.eval_cases_per_task) == (None, None, 6)
    assert CompanyConfig.for_base("tiny").sft.full is True and config.allow_small_held_out is False


def test_the_company_turn_caps_are_derived_from_the_kit_unless_set() -> None:
    from blobkit.company.config import with_turn_caps
    from trainers.episode_limit import EPISODE_SLACK

    derived = with_turn_caps(CompanyConfig.for_base("tiny"), 5)
    assert derived.sft.max_turns == derived.rl.max_turns == 5 + EPISODE_SLACK
    kept = with_turn_caps(CompanyConfig.for_base("tiny", sft={"max_turns": 3, "short_episodes": True}), 5)
    assert (kept.sft.max_turns, kept.rl.max_turns) == (3, 5 + EPISODE_SLACK)


@pytest.mark.parametrize("base", ["Qwen/Qwen2.5-0.5B-Instruct", "tiny"])
def test_the_default_model_call_budget_pays_for_the_largest_held_out_set_a_company_kit_holds(base: str) -> None:
    from blobkit.company.budget import evaluations_worst_case, replay_worst_case, rl_step_worst_case
    from blobkit.company.config import with_turn_caps

    # the airline example's longest case takes 5 assistant turns, the most of the three examples
    config = with_turn_caps(CompanyConfig.for_base(base), 5)
    largest = config.build.max_tasks * config.build.eval_cases_per_task  # the company's default task cap
    worst = (evaluations_worst_case(config.sft, largest) + evaluations_worst_case(config.rl, largest)
             + config.rl.steps * rl_step_worst_case(config.rl) + replay_worst_case(config))
    assert (largest, worst) == (72, config.budgets.max_model_calls)


def test_the_composed_config_copies_no_field(tmp_path: Path) -> None:
    from blobkit.company.stages import RUN_FIELDS, run_config

    assert list(CompanyConfig.model_fields) == ["build", "sft", "rl", "tiny", "budgets", "allow_small_held_out"]
    config = tiny_config(sft={"learning_rate": 0.01})
    stage = run_config(config.sft, kit=tmp_path / "kit", base=str(tmp_path / "base"), method="sft",
                       target="local-torch", out=tmp_path / "sft")
    assert stage.model_dump(exclude=set(RUN_FIELDS)) == config.sft.model_dump(exclude=set(RUN_FIELDS))
    assert stage.kit == tmp_path / "kit" and stage.out == tmp_path / "sft" and stage.learning_rate == 0.01
    with pytest.raises(ValueError, match="run fields only"):
        run_config(config.sft, learning_rate=1.0)


def test_the_tiny_company_recipe_is_the_demos_preset() -> None:
    from blobkit.company.config import COMPANY_RL, COMPANY_SFT, COMPANY_TRAINING
    from blobkit.demo import TRAIN_CASES_PER_TASK, training_flags
    from trainers.config import PRESETS, TrainConfig
    from trainers.tiny_model import TinyModelConfig

    assert training_flags(None, None, None, None) == ["--preset", "tiny"]
    tiny = CompanyConfig.for_base("tiny")
    assert tiny.sft == TrainConfig.preset("tiny", **COMPANY_TRAINING, **COMPANY_SFT)
    kept = {name: value for name, value in PRESETS["tiny"].items() if name not in COMPANY_TRAINING}
    assert {name: getattr(tiny.sft, name) for name in kept} == kept and tiny.sft.grounding_repeats > 0
    assert tiny.rl == TrainConfig.preset("tiny", **COMPANY_TRAINING, **COMPANY_RL, batch_size=tiny.rl.group_size)
    assert tiny.tiny == TinyModelConfig() and tiny.build.train_cases_per_task == TRAIN_CASES_PER_TASK
    assert training_flags("Qwen/Qwen2.5-0.5B-Instruct", None, None, None) == ["--preset", "lora"]
    real = CompanyConfig.for_base("Qwen/Qwen2.5-0.5B-Instruct")
    assert real.sft == TrainConfig.preset("lora", **COMPANY_TRAINING, **COMPANY_SFT) and real == CompanyConfig()


def test_an_rl_batch_that_splits_a_group_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="multiple of rl.group_size"):
        CompanyConfig.for_base("tiny", rl={"group_size": 4, "batch_size": 6})
    assert CompanyConfig.for_base("tiny", rl={"group_size": 4}).rl.batch_size == 4


# --------------------------------------------------------------------------- inspect


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_world_is_reported_trainable_with_enough_held_out_entities(example: Path) -> None:
    from blobkit.company.held_out import MIN_HELD_OUT_ENTITIES

    report = inspect_source(example / "world.json")
    assert report["valid"] and report["trainable"] and report["verdict"].startswith("trainable")
    assert report["tools"] and report["policies"] > 0 and report["state"]["tables"]
    families = report["admission"]["independent_families"]
    assert families["train"] >= 2 and families["eval"] >= 1 and families["shared"] == 0
    assert report["admission"]["tasks_admitted"] >= 1 and report["admission"]["eval_cases"] >= 1
    entities = report["admission"]["independent_entities"]
    assert entities["eval"] >= MIN_HELD_OUT_ENTITIES and entities["eval_needed"] == 0 and report["reasons"] == []
    assert f"on {entities['eval']} independent entities (minimum {MIN_HELD_OUT_ENTITIES})" in report["verdict"]


def test_a_world_too_small_to_hold_out_enough_entities_is_refused_with_the_rows_it_needs(source: Path) -> None:
    report = inspect_source(source)
    entities = report["admission"]["independent_entities"]
    assert report["valid"] and not report["trainable"] and report["held_out_too_small"]
    assert (entities["eval"], entities["eval_minimum"], entities["eval_needed"]) == (6, 20, 14)
    assert report["verdict"] == "not trainable: held-out too small (6 independent entities, minimum 20; 14 more needed)"
    reason = report["reasons"][-1]
    assert "the held-out cases concern 6 independent entities, fewer than the 20" in reason
    assert "cases of one entity are correlated" in reason and "14 more held-out entities are needed" in reason
    # the split holds out 6 of the small world's 24 customers, so about 14 x 24 / 6 = 56 more customers
    assert entities["eval_available"] == 6 and entities["rows_needed"] == 56
    assert reason.endswith("the split holds out only 6 of the world's 24 entities: add about 56 more root rows "
                           "(customers), each with the rows that belong to it")
    assert "held_out_minimum_waived" not in report
    assert inspect_source(source, tiny_config())["held_out_minimum_waived"] is True


def test_a_world_whose_tasks_hold_out_too_few_entities_is_told_to_hold_out_more_cases_per_task() -> None:
    fewer = CompanyConfig.for_base("Qwen/Qwen2.5-0.5B-Instruct", build={"eval_cases_per_task": 1})
    report = inspect_source(ROOT / "examples" / "it_helpdesk" / "world.json", fewer)
    entities = report["admission"]["independent_entities"]
    assert not report["trainable"] and (entities["eval"], entities["eval_needed"]) == (11, 9)
    assert entities["eval_available"] == 130 and entities["rows_needed"] == 0
    assert report["reasons"][-1].endswith("the split's held-out side holds 130 entities of the anchor tables, but the "
                                          "tasks hold out cases of only 11 of them: hold out more cases per task "
                                          "(--eval-cases, now 1)")


def test_mcp_tool_schemas_alone_are_reported_insufficient(mcp_source: Path) -> None:
    report = inspect_source(mcp_source)
    assert report["kind"] == "mcp_tool_schemas" and not report["valid"] and not report["trainable"]
    assert report["tools"] == ["get_order", "cancel_order"]
    assert "not enough" in report["reasons"][0] and "policies" in report["reasons"][0]
    result = CliRunner().invoke(app, ["company", "inspect", "--source", str(mcp_source)])
    assert result.exit_code == 1 and "MCP tool schemas only" in result.output


def test_an_invalid_source_is_reported_with_its_error(tmp_path: Path) -> None:
    bad = tmp_path / "world.json"
    bad.write_text('{"format_version": "1"}')
    report = inspect_source(bad)
    assert not report["valid"] and not report["trainable"] and "/identity" in report["reasons"][0]


def test_company_inspect_writes_nothing(source: Path) -> None:
    inspect_source(source)  # once first, so imports (and their bytecode caches) are not counted
    with recording_writes() as writes:
        report = inspect_source(source)
        result = CliRunner().invoke(app, ["company", "inspect", "--source", str(source), "--json"])
    assert report["valid"] and result.exit_code == 1 and json.loads(result.stdout) == report
    assert report["admission"]["sft_rows"] >= 1 and report["held_out_too_small"] and writes == []


def test_a_one_state_source_stops_before_training(store: JobStore, one_state_source: Path) -> None:
    report = inspect_source(one_state_source)
    assert report["valid"] and not report["trainable"] and report["verdict"] == "not trainable: one independent state"
    job_id = create_job(store, one_state_source, "tiny", tiny_config())
    job = run_job(store, job_id)
    assert job["status"] == "failed" and job["outcome"]["stage"] == "qualify"
    assert job["errors"][0]["code"] == "not_trainable" and "one independent state" in job["errors"][0]["message"]
    assert job["checkpoints"] == [] and not any(e["stage"] in ("kit", "sft") for e in job["events"])
    assert check(job, "source_valid") == "passed" and check(job, "trainable") == "failed"
    assert check(job, "sft_updates_applied") == "not_run"
    assert json.loads((store.job_dir(job_id) / "inspection.json").read_text())["trainable"] is False
    assert not (store.job_dir(job_id) / "kit").exists()


# --------------------------------------------------------------------------- the CLI


def test_every_company_and_jobs_command_has_an_example() -> None:
    runner = CliRunner()
    for command in (["company", "inspect"], ["company", "train"], ["jobs", "list"], ["jobs", "show"],
                    ["jobs", "cancel"], ["jobs", "resume"]):
        result = runner.invoke(app, [*command, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "Example:" in result.output, command


def test_train_without_run_only_queues(tmp_path: Path, source: Path) -> None:
    runner, store_dir = CliRunner(), str(tmp_path / "jobs")
    result = runner.invoke(app, ["company", "train", "--source", str(source), "--base-model", "tiny", "--job-store",
                                 store_dir, "--json", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["status"] == "queued" and job["checkpoints"] == [] and job["identity"]["config"]["sft"]["epochs"] == 1
    listed = json.loads(runner.invoke(app, ["jobs", "list", "--job-store", store_dir, "--json"]).stdout)
    assert [(j["id"], j["status"]) for j in listed] == [(job["id"], "queued")]
    shown = runner.invoke(app, ["jobs", "show", job["id"], "--job-store", store_dir])
    assert shown.exit_code == 0 and "queued" in shown.output and "check replay_passed: not_run" in shown.output
    cancelled = runner.invoke(app, ["jobs", "cancel", job["id"], "--job-store", store_dir])
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output


def test_train_run_prints_only_the_job_on_stdout_and_exits_1_when_it_fails(tmp_path: Path, source: Path) -> None:
    result = CliRunner().invoke(app, ["company", "train", "--source", str(source), "--base-model", "tiny",
                                      "--job-store", str(tmp_path / "jobs"), "--run", "--json", *TINY_FLAGS,
                                      "--max-model-calls", "3"])
    assert result.exit_code == 1
    job = json.loads(result.stdout)
    assert job["status"] == "failed" and job["outcome"]["budget"] == "max_model_calls"
    assert "[qualify] stage qualify started" in result.stderr


def test_company_train_refuses_a_source_inspect_calls_not_trainable_before_creating_a_job(
        tmp_path: Path, source: Path, one_state_source: Path) -> None:
    from blobkit.errors import NotTrainableError

    store_dir = tmp_path / "jobs"
    flags = [flag for flag in TINY_FLAGS if flag != "--allow-small-held-out"]
    for refused, given, names in ((source, flags, "held-out too small (6 independent entities, minimum 20; 14 more "
                                                  "needed)"),
                                  (one_state_source, TINY_FLAGS, "not trainable: one independent state")):
        result = CliRunner().invoke(app, ["company", "train", "--source", str(refused), "--base-model", "tiny",
                                          "--job-store", str(store_dir), "--run", "--json", *given])
        message = str(result.exception)
        assert isinstance(result.exception, NotTrainableError) and result.stdout == "" and "\n" not in message
        assert names in message and f"see blobkit company inspect --source {refused}" in message
        assert not store_dir.exists()
    assert "or pass --allow-small-held-out to train anyway" in str(CliRunner().invoke(app, [
        "company", "train", "--source", str(source), "--base-model", "tiny", "--job-store", str(store_dir),
        *flags]).exception)


def test_a_job_on_a_held_out_set_below_the_minimum_stops_at_qualify_unless_waived(store: JobStore,
                                                                                  source: Path) -> None:
    job = run_job(store, create_job(store, source, "tiny", tiny_config(allow_small_held_out=False)))
    assert job["status"] == "failed" and job["outcome"]["stage"] == "qualify" and job["checkpoints"] == []
    assert job["errors"][0]["code"] == "not_trainable" and "held-out too small" in job["errors"][0]["message"]
    assert check(job, "source_valid") == "passed" and check(job, "trainable") == "failed"
    assert not (store.job_dir(job["id"]) / "kit").exists()


def test_company_train_flags_set_the_parts_of_the_composed_config(tmp_path: Path, source: Path) -> None:
    runner, store_dir = CliRunner(), str(tmp_path / "jobs")
    common = ["company", "train", "--source", str(source), "--base-model", "tiny", "--job-store", store_dir, "--json",
              *TINY_FLAGS]
    result = runner.invoke(app, [*common, "--seed", "7", "--tiny-seed", "3", "--lr", "0.01", "--lora", "--group-size",
                                 "4", "--rl-steps", "3", "--max-minutes", "5"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["identity"]["config"]
    assert config["build"]["seed"] == config["sft"]["seed"] == config["rl"]["seed"] == 7 and config["tiny"]["seed"] == 3
    assert config["sft"]["learning_rate"] == config["rl"]["learning_rate"] == 0.01
    assert config["sft"]["full"] is False and config["rl"]["full"] is False
    assert (config["rl"]["group_size"], config["rl"]["batch_size"], config["rl"]["steps"]) == (4, 4, 3)
    assert config["sft"]["grounding_repeats"] == 3 and config["sft"]["max_turns"] == config["rl"]["max_turns"] == 2
    assert config["budgets"] == {"max_minutes": 5, "max_model_calls": 2079} and config["tiny"]["hidden_size"] == 32
    refused = runner.invoke(app, [*common, "--group-size", "4", "--rl-batch-size", "6"])
    assert refused.exit_code != 0 and "multiple of rl.group_size" in str(refused.exception)


def test_company_train_help_shows_the_defaults_each_base_uses() -> None:
    result = CliRunner().invoke(app, ["company", "train", "--help"], env={"COLUMNS": "300"})
    text = " ".join(result.output.replace("│", " ").split())
    for flag, shown in (("--lr", "0.0002; --base-model tiny: 0.002"), ("--sft-epochs", "1.0; --base-model tiny: 3.0"),
                        ("--train-cases", "48; --base-model tiny: 400"), ("--tiny-vocab-size", "600"),
                        ("--max-model-calls", "2079")):
        assert flag in text and f"[default: ({shown})]" in text, flag
    assert "preset" in text and "5e-3" not in text and "2e-3" not in text


def test_jobs_commands_on_a_missing_store_fail_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["jobs", "list", "--job-store", str(tmp_path / "none")])
    assert result.exit_code != 0 and isinstance(result.exception, JobError)


# --------------------------------------------------------------------------- budgets, cancellation, resume


def test_a_model_call_budget_too_small_for_sft_ends_cleanly_naming_it(store: JobStore, source: Path) -> None:
    job_id = create_job(store, source, "tiny", tiny_config(budgets={"max_model_calls": 3}))
    job = run_job(store, job_id)
    assert job["status"] == "failed" and job["outcome"]["budget"] == "max_model_calls"
    assert job["outcome"]["stage"] == "sft" and "max_model_calls budget (3 model calls)" in job["outcome"]["message"]
    assert job["errors"][-1]["code"] == "budget_exhausted"
    assert [c["stage"] for c in job["checkpoints"]] == ["qualify", "kit"]
    assert job["usage"]["model_calls"] == 0 and "stage sft started" not in stage_events(job, "sft")
    for checkpoint in job["checkpoints"]:
        for artifact in checkpoint["artifacts"].values():
            assert (store.root / artifact["path"]).is_file()
    assert check(job, "kit_leakage_free") == "passed" and check(job, "kit_verified") == "passed"
    again = run_job(store, job_id)  # budgets are cumulative: a resume skips finished stages and stops again
    assert again["outcome"]["budget"] == "max_model_calls" and _checkpoint_times(again) == _checkpoint_times(job)
    assert sum("skipped" in m for m in stage_events(again, "kit")) == 1
    (store.job_dir(job_id) / "inspection.json").write_text("{}")
    tampered = run_job(store, job_id)
    assert tampered["status"] == "failed" and tampered["errors"][-1]["code"] == "JobError"
    assert "artifacts changed" in tampered["errors"][-1]["message"]


def test_a_job_builds_its_kit_once_and_the_kit_stage_verifies_it(store: JobStore, source: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import blobkit.builder
    import blobkit.company.inspect
    import blobkit.company.stages
    import blobkit.verify

    calls: Counter[str] = Counter()

    def count(module: Any, name: str) -> None:
        real = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    for module, name in ((blobkit.builder, "execute_build"), (blobkit.company.inspect, "execute_build"),
                         (blobkit.company.stages, "write_kit"), (blobkit.verify, "verify_kit")):
        count(module, name)
    job = run_job(store, create_job(store, source, "tiny", tiny_config(budgets={"max_model_calls": 3})))
    assert [c["stage"] for c in job["checkpoints"]] == ["qualify", "kit"]
    assert calls == {"execute_build": 1, "write_kit": 1, "verify_kit": 1}
    assert check(job, "kit_verified") == "passed" and "re-executed identically" in next(
        c["detail"] for c in job["checks"] if c["name"] == "kit_verified")
    assert sorted(p.name.endswith(".tar.zst") for p in (store.job_dir(job["id"]) / "kit").iterdir()) == [False, True]


def test_an_exhausted_time_budget_ends_cleanly_naming_it(store: JobStore, source: Path) -> None:
    # 9 active seconds: usually enough to reach SFT, whose 150 steps it then stops at a step boundary; on a
    # loaded machine it may run out at the boundary before SFT instead. Either way the job must say so.
    job_id = create_job(store, source, "tiny", tiny_config(sft={"epochs": 50}, budgets={"max_minutes": 0.15}))
    job = run_job(store, job_id)
    assert job["status"] == "failed" and job["outcome"]["budget"] == job["outcome"]["stopped_by"] == "max_minutes"
    assert "the max_minutes budget (0.15 active minutes) ran out" in job["outcome"]["message"]
    assert job["errors"][-1]["code"] == "budget_exhausted"
    stage = job["outcome"]["stage"]
    assert stage not in [c["stage"] for c in job["checkpoints"]] and job["usage"]["active_seconds"] >= 9
    if stage == "sft":
        assert job["results"]["sft_stopped_by"] == "max_minutes" and job["results"]["complete"] is False
        assert job["usage"]["optimizer_updates"] >= 1 and (store.job_dir(job_id) / "sft" / "eval.json").is_file()


def test_cancelling_mid_sft_stops_at_a_step_boundary_and_keeps_the_evidence(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "jobs"
    with JobStore(root) as store:
        job_id = create_job(store, source, "tiny", tiny_config(sft={"epochs": 30}))
    outcome: dict[str, Any] = {}

    def worker() -> None:
        with JobStore(root) as own:
            outcome["job"] = run_job(own, job_id)

    thread = threading.Thread(target=worker)
    thread.start()
    with JobStore(root, create=False) as reader:
        wait_for(lambda: reader.get(job_id), training_started)
        assert reader.request_cancel(job_id, "test cancels mid-SFT") == "running"
        thread.join(WAIT_S)
        assert not thread.is_alive()
        job = reader.get(job_id)
    assert outcome["job"]["status"] == job["status"] == "cancelled"
    assert job["outcome"]["stopped_by"] == "cancelled: test cancels mid-SFT" and job["outcome"]["stage"] == "sft"
    assert [c["stage"] for c in job["checkpoints"]] == ["qualify", "kit"]
    evidence = next(e for e in job["events"] if e["message"].startswith("partial evidence of stage sft"))
    report = evidence["data"]["record"]["report"]
    assert report["stopped_by"] == "cancelled: test cancels mid-SFT"
    assert 1 <= report["optimizer_updates"] < evidence["data"]["record"]["plan"]["estimated_optimizer_steps"]
    assert job["results"]["complete"] is False and "sft" in job["results"] and "base" in job["results"]
    assert job["usage"]["optimizer_updates"] == report["optimizer_updates"]
    assert (store.job_dir(job_id) / "sft" / "eval.json").is_file()


def _start_worker(root: Path, job_id: str) -> subprocess.Popen[bytes]:
    """`blobkit jobs resume` in a subprocess (a worker we can signal)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "blobkit.cli", "jobs", "resume", job_id, "--job-store", str(root)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_ctrl_c_cancels_the_worker_at_the_next_safe_point(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "jobs"
    with JobStore(root) as store:
        job_id = create_job(store, source, "tiny", tiny_config(sft={"epochs": 30}))
    worker = _start_worker(root, job_id)
    try:
        with JobStore(root, create=False) as reader:
            wait_for(lambda: reader.get(job_id), training_started)
            worker.send_signal(signal.SIGINT)
            worker.wait(WAIT_S)
            job = reader.get(job_id)
    finally:
        worker.kill()
        worker.wait()
    assert job["status"] == "cancelled" and job["outcome"]["stopped_by"] == "cancelled: interrupted (Ctrl-C)"
    assert job["outcome"]["stage"] == "sft" and [c["stage"] for c in job["checkpoints"]] == ["qualify", "kit"]
    assert job["results"]["sft_stopped_by"] == "cancelled: interrupted (Ctrl-C)"


def _checkpoint_times(job: dict[str, Any]) -> dict[str, str]:
    return {c["stage"]: c["completed_at"] for c in job["checkpoints"]}


@pytest.mark.slow
def test_a_sigkilled_worker_is_resumed_without_redoing_finished_stages(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "jobs"
    with JobStore(root) as store:
        job_id = create_job(store, source, "tiny", tiny_config())
    worker = _start_worker(root, job_id)
    try:
        with JobStore(root, create=False) as reader:
            wait_for(lambda: reader.get(job_id), training_started)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    time.sleep(2.1)  # the killed worker's heartbeat goes stale (a store judging after 2 s without one)
    with JobStore(root, create=False, stale_after_s=2.0) as store:
        killed = store.get(job_id)
        assert killed["status"] == "running" and f":{worker.pid}" in killed["worker"]["id"]
        before = _checkpoint_times(killed)
        assert list(before) == ["qualify", "kit"]
        resumed_from = killed["events"][-1]["seq"]
        job = run_job(store, job_id)
    after = [e for e in job["events"] if e["seq"] > resumed_from]
    messages = [e["message"] for e in after]
    assert "is gone" in messages[0] and str(worker.pid) in messages[0]
    for stage in ("qualify", "kit"):
        assert _checkpoint_times(job)[stage] == before[stage]
        assert f"stage {stage} started" not in messages
        assert f"stage {stage} skipped: completed at {before[stage]}" in messages
    assert "stage sft started" in messages and "stage sft completed" in messages
    if has_grpo():
        assert job["status"] == "succeeded"
    else:
        assert job["status"] == "failed" and job["outcome"]["stage"] == "rl"
        assert job["errors"][-1]["code"] == "ModuleNotFoundError" and "trainers.grpo" in job["errors"][-1]["message"]
        assert "rl" not in job["results"]
        assert list(_checkpoint_times(job)) == ["qualify", "kit", "sft"]


# --------------------------------------------------------------------------- the whole pipeline (needs GRPO)


def _assert_complete(job: dict[str, Any], store_root: Path) -> None:
    assert job["status"] == "succeeded", job["errors"]
    assert [c["stage"] for c in job["checkpoints"]] == list(STAGES)
    results = job["results"]
    assert results["complete"] and {"base", "sft", "rl", "rl_minus_sft", "held_out"} <= set(results)
    assert results["held_out"]["case_counts_match"] and results["held_out"]["cases_evaluated"] >= 1
    assert job["replay"]["fresh_process"] and job["replay"]["outcome"] in ("passed", "failed")
    assert job["usage"]["model_calls"] <= job["identity"]["config"]["budgets"]["max_model_calls"]
    assert job["usage"]["active_seconds"] <= job["identity"]["config"]["budgets"]["max_minutes"] * 60
    assert {c["status"] for c in job["checks"]} <= {"passed", "failed"}
    assert check(job, "export_verified") == "passed" and check(job, "heldout_evaluated") == "passed"
    assert (store_root / "jobs" / job["id"] / "export" / "manifest.json").is_file()


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """(store root, job record) of one whole tiny run on the small world, shared by the tests that read it."""
    pytest.importorskip("trainers.grpo")
    root = tmp_path_factory.mktemp("finished")
    with JobStore(root / "jobs") as store:
        job = run_job(store, create_job(store, write_world(root / "src", small_world()), "tiny",
                                        tiny_config(rl={"steps": 2})))
    return store.root, job


def test_a_tiny_run_on_the_small_world_completes_with_measured_results(finished_job: tuple[Path, dict[str, Any]]) \
        -> None:
    store_root, job = finished_job
    _assert_complete(job, store_root)


def test_a_job_that_waived_the_held_out_minimum_says_so_in_its_record_and_results(
        finished_job: tuple[Path, dict[str, Any]]) -> None:
    store_root, job = finished_job
    assert job["identity"]["config"]["allow_small_held_out"] is True
    detail = next(c["detail"] for c in job["checks"] if c["name"] == "trainable")
    assert check(job, "trainable") == "failed" and detail.startswith("not trainable: held-out too small (6 ")
    assert detail.endswith("held-out too small to mean anything: trained anyway (allow_small_held_out)")
    assert any(m.startswith("held-out too small to mean anything: held-out too small: the held-out cases concern 6 ")
               for m in stage_events(job, "qualify"))
    held_out = job["results"]["held_out"]
    # eval_limit 2: the first two held-out cases, of two entities
    assert (held_out["entities_in_kit"], held_out["entities_evaluated"], held_out["entities_minimum"]) == (6, 2, 20)
    assert held_out["too_small"] == ("held-out too small to mean anything: the pass rates are over 2 independent "
                                     "entities, fewer than the 20 a pass rate needs; the job waived the minimum "
                                     "(allow_small_held_out)")
    assert json.loads((store_root / "jobs" / job["id"] / "results.json").read_text())["held_out"] == held_out
    shown = CliRunner().invoke(app, ["jobs", "show", job["id"], "--job-store", str(store_root)])
    assert f"  held-out: {held_out['too_small']}" in shown.output


def test_each_training_stage_runs_the_composed_config_with_only_its_run_fields_filled_in(
        finished_job: tuple[Path, dict[str, Any]]) -> None:
    from blobkit.company.stages import RUN_FIELDS

    store_root, job = finished_job
    for stage in ("sft", "rl"):
        composed = job["identity"]["config"][stage]
        planned = json.loads((store_root / "jobs" / job["id"] / stage / "plan.json").read_text())["config"]
        assert {k: v for k, v in planned.items() if k not in RUN_FIELDS} == \
            {k: v for k, v in composed.items() if k not in RUN_FIELDS}, stage


def test_the_replay_result_arrives_as_data_from_a_spawned_process(finished_job: tuple[Path, dict[str, Any]]) -> None:
    from blobkit.company.replay import run_spawned

    run = run_spawned(os.getpid, (), lambda: None)
    assert run.value == run.pid != os.getpid() and run.exitcode == 0 and run.error is None
    store_root, job = finished_job
    replay = job["replay"]
    assert replay["fresh_process"] and replay["start_method"] == "spawn" and replay["pid"] != os.getpid()
    recorded = json.loads((store_root / "jobs" / job["id"] / "replay.json").read_text())
    episode = recorded["episode"]
    assert (episode["case_id"], episode["verdict"], episode["turns"]) == (replay["case_id"], replay["verdict"],
                                                                          replay["turns"])
    assert episode["passed"] == (replay["outcome"] == "passed") and "stdout" not in recorded


def test_every_stage_record_reads_back_as_its_typed_record_byte_for_byte(
        finished_job: tuple[Path, dict[str, Any]]) -> None:
    """The job store's stage records, results and replay, read back as their typed records, re-serialise to the same
    JSON (what does not apply stays absent, not null)."""
    _, job = finished_job
    for checkpoint in job["checkpoints"]:
        record = stage_record(checkpoint["stage"], checkpoint["record"], job["id"])
        assert isinstance(record, STAGE_RECORDS[checkpoint["stage"]])
        assert canonical_json(record.to_json()) == canonical_json(checkpoint["record"]), checkpoint["stage"]
    assert canonical_json(JobResults.model_validate(job["results"]).to_json()) == canonical_json(job["results"])
    assert canonical_json(ReplayStage.model_validate(job["replay"]).to_json()) == canonical_json(job["replay"])
    assert "sft_as_measured_by_rl" not in job["results"] and "error" not in job["replay"]


def test_a_stage_record_this_blobkit_cannot_read_fails_the_resume_naming_the_stage_and_field(
        store: JobStore, source: Path, finished_job: tuple[Path, dict[str, Any]]) -> None:
    """A checkpoint written before the qualify record kept the held-out size: the resume ends the job failed with a
    JobError that says where, instead of a KeyError in a later stage."""
    _, finished = finished_job
    qualify = next(c["record"] for c in finished["checkpoints"] if c["stage"] == "qualify")
    older = {key: value for key, value in qualify.items() if key != "held_out"}
    with pytest.raises(JobError, match=r"job job-x: the checkpointed record of stage qualify is not one this blobkit "
                                       r"reads \(1 problem\(s\), first at held_out: Field required\)"):
        stage_record("qualify", older, "job-x")
    job_id = create_job(store, source, "tiny", tiny_config())
    with store.conn:
        store.conn.execute("INSERT INTO checkpoints (job_id, stage, position, started_at, completed_at, record, "
                           "artifacts) VALUES (?, 'qualify', 0, 0, 0, ?, '{}')", (job_id, canonical_json(older)))
    job = run_job(store, job_id)
    assert job["status"] == "failed" and job["outcome"]["stage"] == "qualify"
    assert job["errors"][-1]["code"] == "JobError" and "first at held_out" in job["errors"][-1]["message"]


def test_a_stopped_replay_process_is_terminated() -> None:
    from blobkit.company.replay import run_spawned

    started = time.monotonic()
    run = run_spawned(time.sleep, (120,), lambda: "cancelled: test", poll_s=0.1)
    assert run.stopped_by == "cancelled: test" and run.value is None and run.exitcode not in (None, 0)
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_company_train_run_on_an_example_world_with_the_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("trainers.grpo")
    store_dir = str(tmp_path / "company-jobs")
    result = CliRunner().invoke(app, ["company", "train", "--source", str(EXAMPLES[-1] / "world.json"),
                                      "--base-model", "tiny", "--job-store", store_dir, "--run", "--json",
                                      "--train-cases", "12", "--max-new-tokens", "48", "--short-episodes",
                                      "--tiny-hidden-size", "64", "--tiny-layers", "2"])
    job = json.loads(result.stdout)
    shown = json.loads(CliRunner().invoke(app, ["jobs", "show", job["id"], "--job-store", store_dir, "--json"]).stdout)
    assert shown["status"] == job["status"]
    _assert_complete(shown, Path(store_dir))
    held_out = shown["results"]["held_out"]  # the company build's held-out set, every case of it evaluated
    assert check(shown, "trainable") == "passed" and shown["identity"]["config"]["allow_small_held_out"] is False
    assert held_out["coverage"] == 1.0 and held_out["entities_evaluated"] == held_out["entities_in_kit"] >= 20
    assert "too_small" not in held_out
