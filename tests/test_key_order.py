"""Minting's seeded key order: every key of a small table, a seeded sample drawn by rowid of a large one."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import blobkit.builder.key_order as key_order
from blobkit.builder import build_kit
from blobkit.builder.key_order import seeded_keys
from world_format.loaded import LoadedWorld
from world_format.loader import load_world
from world_format.models import Table
from world_format.sqlguard import open_memory_copy


def orders_table(loaded: LoadedWorld) -> Table:
    table = loaded.world.state.table("orders")
    assert table is not None
    return table


def _cases(kit: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for name in ("train_cases.jsonl", "eval_cases.jsonl")
            for line in (kit / name).read_text(encoding="utf-8").splitlines()]


def test_a_table_within_the_sample_size_gives_every_key_shuffled(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    conn = open_memory_copy(loaded.seed)
    table = orders_table(loaded)
    keys = seeded_keys(conn, table, 42)
    expected = sorted(row[0] for row in conn.execute("SELECT id FROM orders"))
    random.Random("42:orders:keys").shuffle(expected)
    assert list(keys) == expected


def test_a_larger_table_gives_a_seeded_sample_of_existing_keys(small_world_file: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_world(small_world_file)
    conn = open_memory_copy(loaded.seed)
    table = orders_table(loaded)
    every = {row[0] for row in conn.execute("SELECT id FROM orders")}
    monkeypatch.setattr(key_order, "KEY_SAMPLE_ROWS", 12)
    keys = seeded_keys(conn, table, 42)
    assert len(keys) == 12 == len(set(keys)) and set(keys) <= every
    assert seeded_keys(conn, table, 42) == keys and seeded_keys(conn, table, 7) != keys
    # rowids spread far apart: the drawn rowids find too few rows, so the table is read whole
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE orders SET id = id * 1000003")  # id is the rowid (INTEGER PRIMARY KEY)
    assert sorted(seeded_keys(conn, table, 42)) == sorted(key * 1000003 for key in every)
    # the widest rowid range SQLite allows is read whole too (no draw over a span Python cannot take the length of)
    conn.execute("UPDATE orders SET id = -9223372036854775808 WHERE id = (SELECT min(id) FROM orders)")
    conn.execute("UPDATE orders SET id = 9223372036854775807 WHERE id = (SELECT max(id) FROM orders)")
    assert len(seeded_keys(conn, table, 42)) == len(every)


def test_a_build_over_a_large_table_mints_from_the_sample(tmp_path: Path, small_world_file: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_order, "KEY_SAMPLE_ROWS", 20)
    loaded = load_world(small_world_file)
    conn = open_memory_copy(loaded.seed)
    sample = set(seeded_keys(conn, orders_table(loaded), 42))
    kit = build_kit(small_world_file, tmp_path / "kit")
    path = Path(kit["kit"]["path"])
    minted = {task["task_id"] for task in map(json.loads, (path / "tasks.jsonl").read_text().splitlines())
              if task["source"] == "minted"}
    keys = {case["anchor"]["key"] for case in _cases(path)
            if case["task_id"] in minted and case["anchor"]["table"] == "orders"}
    assert len(keys) >= 5 and keys <= sample
