"""Renamed replays (`blobkit build --renamed-replays N`): training rows on renamed copies of the seed, executed,
gated and re-verified, with the held-out side untouched."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from blobkit.builder import BuildConfig, BuiltKit, build_kit, execute_build, write_kit
from blobkit.builder.leakage import training_text
from blobkit.builder.rename_values import like
from blobkit.errors import BlobkitError
from blobkit.verify import verify_kit
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Task
from world_format.renaming import RenamedValue, RenameError, Renaming, occurs, rename_task, rename_text, renamed_seed

RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
SMALL = {"train_cases_per_task": 3, "eval_cases_per_task": 2}


def _renaming(*pairs: tuple[str | int, str | int, str]) -> Renaming:
    return Renaming(replay=1, values=tuple(RenamedValue(original=a, renamed=b, columns=(c,)) for a, b, c in pairs))


def _rows(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in files["sft.jsonl"].decode().splitlines() if line]


def _seed_values(seed: bytes) -> set[str]:
    """Every cell of every table of a seed, as lowercased text (read with plain SQLite, not blobkit)."""
    conn = sqlite3.connect(":memory:")
    conn.deserialize(seed)
    values = set()
    for (table,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall():
        for row in conn.execute(f'SELECT * FROM "{table}"'):
            values |= {str(value).lower() for value in row if value is not None}
    conn.close()
    return values


@pytest.fixture(scope="module")
def renamed() -> BuiltKit:
    return execute_build(RETAIL, BuildConfig(renamed_replays=2, **SMALL))


@pytest.fixture(scope="module")
def plain() -> BuiltKit:
    return execute_build(RETAIL, BuildConfig(**SMALL))


def test_off_by_default_the_kit_records_no_option_and_no_counts(plain: BuiltKit) -> None:
    explicit = execute_build(RETAIL, BuildConfig(renamed_replays=0, **SMALL))
    assert explicit.files == plain.files and explicit.meta == plain.meta
    assert "renamed_replays" not in plain.meta["build_config"] and "renamed_replays" not in plain.record
    assert all("renaming" not in row["metadata"] for row in _rows(plain.files))


def test_renamed_replays_add_rows_after_their_case_and_change_nothing_else(renamed: BuiltKit,
                                                                            plain: BuiltKit) -> None:
    rows, counts = _rows(renamed.files), renamed.record["renamed_replays"]
    base = [row for row in rows if "renaming" not in row["metadata"]]
    assert base == _rows(plain.files)
    assert {k: v for k, v in renamed.files.items() if k != "sft.jsonl"} == \
        {k: v for k, v in plain.files.items() if k != "sft.jsonl"}
    assert counts["rows_added"] == len(rows) - len(base) > len(base)
    assert counts["rows_added"] + counts["rows_dropped"] == 2 * (len(base) - counts["cases_without_identifiers"])
    assert renamed.record["sft_rows"] == len(rows) and renamed.record["sft_rows_dropped"] == 0
    assert renamed.meta["build_config"]["renamed_replays"] == 2
    current = None
    for row in rows:  # each renamed row follows its own case's row (or an earlier renamed row of it)
        if "renaming" not in row["metadata"]:
            current = row["metadata"]["case_id"]
        else:
            assert row["metadata"]["case_id"] == current
            assert row["metadata"]["sft_source"] == "renamed_reference_chain_replay"


def test_renamed_identifiers_are_absent_from_the_seed_and_no_original_is_left(renamed: BuiltKit) -> None:
    seed = _seed_values(load_world(RETAIL).seed)
    cases = {json.loads(line)["case_id"]: json.loads(line) for line in
             renamed.files["train_cases.jsonl"].decode().splitlines()}
    emails_renamed = 0
    for row in _rows(renamed.files):
        if "renaming" not in row["metadata"]:
            continue
        renaming = Renaming.model_validate(row["metadata"]["renaming"])
        text = training_text([row])
        for value in renaming.values:
            assert str(value.renamed).lower() not in seed, value
            assert not occurs(value.original, text), value
            assert type(value.renamed) is type(value.original) and len(str(value.renamed)) == len(str(value.original))
            if isinstance(value.original, str) and "@" in value.original:
                emails_renamed += 1
                assert value.renamed.split("@")[1] == value.original.split("@")[1]
        original_instruction = cases[row["metadata"]["case_id"]]["task"]["instruction"]
        assert row["messages"][1]["content"] == rename_text(original_instruction, renaming) != original_instruction
    assert emails_renamed > 0


def test_no_held_out_identifier_reaches_a_training_row(renamed: BuiltKit) -> None:
    assert renamed.meta["leakage"]["held_out_identifiers_in_training"] == 0
    assert renamed.meta["leakage"]["held_out_identifiers"] > 0
    stated = set()
    for line in renamed.files["eval_cases.jsonl"].decode().splitlines():
        stated |= set(re.findall(r"[\w.+-]+@[\w.-]+\.\w+", json.loads(line)["task"]["instruction"]))
    text = training_text(_rows(renamed.files))
    assert stated and not [email for email in stated if occurs(email, text)]


def test_two_renamed_builds_are_byte_identical(renamed: BuiltKit, tmp_path: Path) -> None:
    first = build_kit(RETAIL, tmp_path / "a", BuildConfig(renamed_replays=2, **SMALL))
    second = write_kit(renamed, tmp_path / "b")
    assert Path(first["kit"]["archive"]).read_bytes() == Path(second["kit"]["archive"]).read_bytes()


def test_verify_replays_every_renamed_row_on_its_renamed_seed(renamed: BuiltKit, tmp_path: Path) -> None:
    record = write_kit(renamed, tmp_path)
    with open_kit(Path(record["kit"]["archive"])) as kit:
        report = verify_kit(kit)
    assert report["verified"], report["mismatches"]
    assert report["renamed_rows_replayed"] == renamed.record["renamed_replays"]["rows_added"]


def _swap_email(row: dict[str, Any]) -> None:
    for value in row["metadata"]["renaming"]["values"]:
        if isinstance(value["renamed"], str) and "@" in value["renamed"]:
            value["renamed"] = "zz" + value["renamed"]


def _claim_a_seed_value(row: dict[str, Any]) -> None:
    row["metadata"]["renaming"]["values"][0]["renamed"] = row["metadata"]["renaming"]["values"][0]["original"]


def test_verify_reports_renamed_rows_their_renaming_does_not_reproduce(renamed: BuiltKit, tmp_path: Path) -> None:
    rows = _rows(renamed.files)
    changed = [i for i, row in enumerate(rows) if "renaming" in row["metadata"]][:2]
    _swap_email(rows[changed[0]])
    _claim_a_seed_value(rows[changed[1]])
    sft = b"".join(json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
                   for row in rows)
    record = write_kit(BuiltKit(renamed.world_id, {**renamed.files, "sft.jsonl": sft}, renamed.meta, renamed.record),
                       tmp_path)
    with open_kit(Path(record["kit"]["path"])) as kit:
        report = verify_kit(kit)
    assert not report["verified"] and len(report["mismatches"]) == 2, report["mismatches"]
    assert "not reproduced by replay" in report["mismatches"][0]
    assert "is a value of the seed" in report["mismatches"][1]


def test_a_renamed_seed_renames_an_integer_key_and_the_columns_that_reference_it() -> None:
    loaded = load_world(RETAIL)
    renaming = _renaming((1492, 6000, "customers.id"), ("jasmineu@proton.me", "hapzejei@proton.me", "customers.email"))
    conn = sqlite3.connect(":memory:")
    conn.deserialize(renamed_seed(loaded.world, loaded.seed, renaming))
    assert conn.execute("SELECT email FROM customers WHERE id = 6000").fetchall() == [("hapzejei@proton.me",)]
    assert conn.execute("SELECT count(*) FROM customers WHERE id = 1492 OR email = 'jasmineu@proton.me'"
                        ).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM orders WHERE customer_id = 1492").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM orders WHERE customer_id = 6000").fetchone()[0] > 0
    assert renamed_seed(loaded.world, loaded.seed, renaming) == renamed_seed(loaded.world, loaded.seed, renaming)


@pytest.mark.parametrize("renaming", [_renaming((1492, "x1492", "customers.id")),
                                      _renaming((1492, 6000, "customers.nowhere")),
                                      _renaming((1492, 1493, "customers.id"))])
def test_a_renaming_that_cannot_apply_is_a_rename_error(renaming: Renaming) -> None:
    loaded = load_world(RETAIL)
    with pytest.raises(RenameError) as caught:
        renamed_seed(loaded.world, loaded.seed, renaming)
    assert isinstance(caught.value, BlobkitError)


def test_text_is_renamed_as_whole_tokens_keeping_case() -> None:
    renaming = _renaming((2026, 7310, "orders.id"), ("ana@x.com", "uvo@x.com", "customers.email"),
                         ("Ana Lind", "Ubo Rask", "customers.name"))
    text = "Order 2026. Placed 2026-11-25 by ANA@X.COM (Ana Lind); not banana@x.com nor 20261."
    assert rename_text(text, renaming) == \
        "Order 7310. Placed 2026-11-25 by UVO@X.COM (Ubo Rask); not banana@x.com nor 20261."


def test_a_task_is_renamed_in_its_strings_and_integers_not_its_keys() -> None:
    task = Task.model_validate({"anchor": {"table": "customers", "key": 1492}, "instruction": "I am ana@x.com.",
                                "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "ana@x.com"}}],
                                "vcode": {"checks": [{"kind": "sql", "query": "SELECT 1 FROM customers WHERE id = :id",
                                                      "params": {"id": 1492}, "expect": [[1]]}]}})
    out = rename_task(task, _renaming((1492, 6000, "customers.id"), ("ana@x.com", "uvo@x.com", "customers.email")))
    dumped = out.model_dump(mode="json", by_alias=True)
    assert dumped["anchor"]["key"] == 6000 and dumped["instruction"] == "I am uvo@x.com."
    assert dumped["reference"][0]["arguments"] == {"email": "uvo@x.com"}
    assert dumped["vcode"]["checks"][0]["params"] == {"id": 6000} and dumped["vcode"]["checks"][0]["expect"] == [[1]]


def test_fresh_values_keep_the_shape_and_the_fixed_positions() -> None:
    rng = random.Random(7)
    for original, fixed in [("TO-JKT-001", {0: "T", 1: "O", 2: "-"}), ("AAEKYC", None), ("98105", None)]:
        new = like(rng, original, fixed)
        assert len(new) == len(original) and new != original
        for a, b in zip(original, new, strict=True):
            assert (a.isdigit(), a.isupper(), a.islower(), a.isalnum()) == (b.isdigit(), b.isupper(), b.islower(),
                                                                          b.isalnum())
            assert a.isalnum() or a == b
        assert all(new[i] == c for i, c in (fixed or {}).items())


def test_a_renamed_replay_count_out_of_range_is_refused_in_one_line_writing_nothing(tmp_path: Path) -> None:
    from pydantic import ValidationError

    for bad in (-1, 17):
        with pytest.raises(ValidationError):
            BuildConfig(renamed_replays=bad)
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", "build", "--world", str(RETAIL), "--out",
                           str(tmp_path / "out"), "--renamed-replays", "17"], capture_output=True, text=True)
    assert done.returncode == 2 and "renamed_replays" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_renamed_replay_whose_seed_breaks_a_declared_check_is_dropped_and_counted(tmp_path: Path) -> None:
    from conftest import write_world
    from worlds import small_world

    document = small_world()
    orders = next(t for t in document["state"]["tables"] if t["name"] == "orders")
    orders["checks"] = ["id < 160"]  # the seed's order ids are 100-159: a renamed one (3 digits, fresh) breaks it
    built = execute_build(write_world(tmp_path / "w", document),
                          BuildConfig(renamed_replays=1, train_cases_per_task=4, eval_cases_per_task=2))
    counts, rows = built.record["renamed_replays"], _rows(built.files)
    base = [row for row in rows if "renaming" not in row["metadata"]]
    assert counts["dropped_because"].get("seed constraint", 0) > 0
    assert counts["rows_added"] + counts["rows_dropped"] == len(base) - counts["cases_without_identifiers"]
    for row in [r for r in rows if "renaming" in r["metadata"]]:
        assert not [v for v in row["metadata"]["renaming"]["values"] if "orders.id" in v["columns"]]


def test_rl_prompts_leave_renamed_rows_out(renamed: BuiltKit, tmp_path: Path) -> None:
    from trainers.grpo import rl_cases

    record = write_kit(renamed, tmp_path)
    with open_kit(Path(record["kit"]["path"])) as kit:
        rows = kit.rows()
        cases = rl_cases(kit, rows)
    base = [row for row in rows if "renaming" not in row["metadata"]]
    assert [case.case_id for case in cases] == [row["metadata"]["case_id"] for row in base]
    assert all(case.prompt is not None and case.prompt.messages[1]["content"] == case.task.instruction
               for case in cases)
