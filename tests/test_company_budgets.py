"""Company budgets are kept inside each stage and can be raised on resume (issue 23 item 5)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import ROOT
from typer.testing import CliRunner

from blobkit.cli import app
from blobkit.company import CompanyConfig, JobStore, create_job, run_job
from blobkit.company.schema import DB_FILE, SCHEMA, SCHEMA_VERSION

RETAIL = ROOT / "examples" / "retail_desk" / "world.json"


def test_a_time_budget_runs_out_inside_the_kit_build_and_a_resume_with_a_larger_budget_continues_it(
        tmp_path: Path) -> None:
    # 1.2 active seconds: the retail build takes several, so the budget runs out at one of its progress reports
    config = CompanyConfig.for_base("tiny", budgets={"max_minutes": 0.02})
    with JobStore(tmp_path / "jobs") as store:
        job_id = create_job(store, RETAIL, "tiny", config)
        job = run_job(store, job_id)
    assert job["status"] == "failed" and job["outcome"]["budget"] == "max_minutes"
    assert job["outcome"]["stage"] == "qualify" and "ran out during stage qualify" in job["outcome"]["message"]
    # the budget is checked at the build's progress reports (a stage of a few seconds stops inside itself): on a
    # loaded machine the first report can come after the 1.2 s, and the job stops there before logging it
    progress = [e["message"] for e in job["events"] if e["stage"] == "qualify"]
    assert all(message.startswith(("stage qualify started", "load ", "mint ", "gate ", "budget_exhausted"))
               for message in progress), progress
    assert job["checkpoints"] == [] and job["budgets"] == {"max_minutes": 0.02, "max_model_calls": 2079, "raised": []}

    runner = CliRunner()
    lowered = runner.invoke(app, ["jobs", "resume", job_id, "--job-store", str(tmp_path / "jobs"),
                                  "--max-minutes", "0.01"])
    assert lowered.exit_code != 0 and "does not raise" in str(lowered.exception)
    more = round(job["usage"]["active_seconds"] / 60 + 0.02, 4)  # above what it used: 1.2 more active seconds
    raised = runner.invoke(app, ["jobs", "resume", job_id, "--job-store", str(tmp_path / "jobs"),
                                 "--max-minutes", str(more), "--json"])
    with JobStore(tmp_path / "jobs", create=False) as store:
        job = store.get(job_id)
    assert job["budgets"]["max_minutes"] == more and job["budgets"]["raised"][0]["max_minutes"] == [0.02, more]
    assert f"budgets raised: max_minutes 0.02 -> {more:g}" in [e["message"] for e in job["events"]]
    assert any("resumes the failed job" in e["message"] for e in job["events"])
    assert job["outcome"]["budget"] == "max_minutes" and f"({more:g} active minutes)" in job["outcome"]["message"], \
        raised.output


def test_a_version_1_store_gains_the_budgets_column_when_opened(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    conn = sqlite3.connect(root / DB_FILE)
    for statement in SCHEMA:
        conn.execute(statement.replace(",\n        budgets TEXT", ""))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with JobStore(root) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        assert "budgets" in [row[1] for row in store.conn.execute("PRAGMA table_info(jobs)")]
