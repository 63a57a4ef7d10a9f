"""Isolation without copies: episodes are savepoints, state hashes come from the change log.

No timings here (the benchmark measures those); these tests count what must not grow
with the database: connections opened (every copy of a database needs one), full scans
of the seed, and the rows a state hash reads.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, write_world
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.builder.mint import Minter
from world_format import runtime as runtime_module
from world_format.loader import load_world
from world_format.models import Column, Table
from world_format.runtime import WorldRuntime, full_state_hash, scan_digests, strict_tables
from world_format.state import create_table_sql


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of sqlite3.connect calls and of episodes while a test runs."""
    counts = {"connections": 0, "episodes": 0}
    connect, episode = sqlite3.connect, WorldRuntime.episode

    def counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        counts["connections"] += 1
        return connect(*args, **kwargs)

    @contextmanager
    def counting_episode(self: WorldRuntime) -> Iterator[Any]:
        counts["episodes"] += 1
        with episode(self) as value:
            yield value

    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    monkeypatch.setattr(WorldRuntime, "episode", counting_episode)
    return counts


def test_a_build_opens_the_same_databases_however_many_episodes_it_runs(tmp_path: Path,
                                                                         counted: dict[str, int]) -> None:
    world = write_world(tmp_path / "src", small_world())
    build_kit(world, tmp_path / "few", BuildConfig(train_cases_per_task=2, eval_cases_per_task=1))
    few = dict(counted)
    counted.update(connections=0, episodes=0)
    build_kit(world, tmp_path / "many", BuildConfig(train_cases_per_task=8, eval_cases_per_task=3))
    assert counted["episodes"] > few["episodes"] + 20
    # the seed built from inline rows, the working copy, one read-only copy that is both the pristine state and
    # what the entity lookups read (LoadedWorld.seed_copy), and the empty schema on which the gate's grounding check
    # traces result columns and the minter the preconditions' reads (world_format/result_columns.py, once per
    # runtime): never one per episode
    assert counted["connections"] == few["connections"] == 4


def test_runtimes_of_a_loaded_world_share_one_read_only_copy_for_the_starting_state(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    first, second = loaded.runtime(), loaded.runtime()
    try:
        assert first.pristine is second.pristine is loaded.seed_copy.connection
        assert first.conn is not second.conn
        minter = Minter(loaded.world, first, seed=42, eval_percent=20, serialized=loaded.seed_copy)
        assert minter.sides.entities.seed is loaded.seed_copy
        with first.episode() as episode:  # an episode's writes reach neither the shared copy nor the other runtime
            episode.call("cancel_order", {"order_id": 100})
            status = "SELECT status FROM orders WHERE id = 100"
            (change,) = episode.changes()  # "before" is read from the shared copy, "after" from the working copy
            assert change.before is not None and change.after is not None
            assert (change.before["status"],) == loaded.seed_copy.rows(status)[0] != (change.after["status"],)
            assert first.conn.execute(status).fetchone() != loaded.seed_copy.rows(status)[0]
            assert second.conn.execute(status).fetchone() == loaded.seed_copy.rows(status)[0]
        first.close()  # closing a runtime leaves the shared copy open for the others
        assert second.pristine.execute(status).fetchone() == loaded.seed_copy.rows(status)[0]
    finally:
        second.close()


def test_starting_rows_read_the_starting_state_inside_an_episode_and_after_it(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    runtime = loaded.runtime()
    status = "SELECT status FROM orders WHERE id = 100"
    try:
        before = runtime.starting_rows(status)
        with runtime.episode() as episode:
            episode.call("cancel_order", {"order_id": 100})
            assert runtime.conn.execute(status).fetchall() != before  # the working copy holds the episode's write
            assert runtime.starting_rows(status) == before
        assert runtime.starting_rows(status) == before == loaded.seed_copy.rows(status)
    finally:
        runtime.close()


def test_the_seed_is_scanned_once_however_many_runtimes_and_episodes(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    for _ in range(2):
        runtime = loaded.runtime()
        for order_id in (100, 104, 108):
            with runtime.episode() as episode:
                episode.call("cancel_order", {"order_id": order_id})
                episode.state_hash()
        runtime.close()
    assert loaded.sha256 and loaded.seed_state_hash
    assert loaded.digests.scans == 1


def test_an_episode_state_hash_reads_changed_rows_only(small_world_file: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = load_world(small_world_file).runtime()
    runtime.seed_digests  # noqa: B018 - the seed's one scan, before scans are forbidden
    expected = []
    with runtime.episode() as episode:
        episode.call("cancel_order", {"order_id": 100})
        episode.call("set_tier", {"customer_id": 2, "tier": "gold"})
        expected.append(full_state_hash(runtime.conn, runtime.world.state.tables))

    def no_scans(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an episode rescanned a table")

    monkeypatch.setattr(runtime_module, "_table_digest", no_scans)
    with runtime.episode() as episode:
        episode.call("cancel_order", {"order_id": 100})
        episode.call("set_tier", {"customer_id": 2, "tier": "gold"})
        assert [episode.state_hash()] == expected
        assert {change.table for change in episode.changes()} == {"orders", "customers"}


def _tricky_table(strict: bool) -> tuple[sqlite3.Connection, Table]:
    columns = (Column(name="id", type="INTEGER", primary_key=True), Column(name="amount", type="REAL"),
               Column(name="label", type="TEXT"), Column(name="data", type="BLOB"))
    table = Table(name="things", columns=columns)
    conn = sqlite3.connect(":memory:")
    sql = create_table_sql(table)
    conn.execute(sql if strict else sql.removesuffix(" STRICT"))
    rng = random.Random(5)
    values = [0.0, -0.0, 1.0, 2.5, -3.0, 1e20, 0.1 + 0.2, 9007199254740993.0, None]
    for key in range(1, 60):
        conn.execute("INSERT INTO things VALUES (?, ?, ?, ?)",
                     (key, rng.choice(values), rng.choice(["a", "é ü", '"q"', "", None]),
                      rng.choice([b"", b"\x00\xff", None])))
    return conn, table


def test_strict_tables_are_digested_exactly_like_the_general_form() -> None:
    conn, table = _tricky_table(strict=True)
    assert strict_tables(conn) == {"things"}
    assert scan_digests(conn, [table], {"things"}) == scan_digests(conn, [table])
    loose, _ = _tricky_table(strict=False)
    assert strict_tables(loose) == frozenset()
    assert scan_digests(loose, [table], strict_tables(loose)) == scan_digests(conn, [table])


def _spread_table(names: tuple[str, ...], keys: list[int]) -> tuple[sqlite3.Connection, Table]:
    """A STRICT table with an INTEGER PRIMARY KEY first (named ``names[0]``), text and real columns named by the
    rest, rows at ``keys``: text with newlines and control characters, reals that are integral or not."""
    columns = (Column(name=names[0], type="INTEGER", primary_key=True),
               *(Column(name=name, type="TEXT" if i % 2 else "REAL") for i, name in enumerate(names[1:], 1)))
    table = Table(name="spread", columns=columns)
    conn = sqlite3.connect(":memory:")
    conn.execute(create_table_sql(table))
    rng = random.Random(len(keys))
    texts = ["line\none", "tab\tand\r\n", "\x00nul", "\x1f\x7f", "é ü", "", "\\n", None]
    for key in keys:
        values = [rng.choice(texts) if i % 2 else rng.choice([1.0, 2.5, -0.0, None]) for i in range(1, len(names))]
        conn.execute(f"INSERT INTO spread VALUES ({', '.join('?' * len(names))})", (key, *values))
    return conn, table


@pytest.mark.parametrize("names", [("id", "a", "b"), ("rowid", "a", "b"), ("id", "ROWID", "_rowid_"),
                                   ("id", "rowid", "_rowid_", "oid")], ids=lambda n: "-".join(n))
@pytest.mark.parametrize("keys", [[], [5], list(range(1, 40)), [-(1 << 63), -3, 0, 7, 1 << 40, (1 << 63) - 1]],
                         ids=["empty", "one", "dense", "spread"])
def test_a_table_digested_in_batches_has_the_digest_of_its_rows_read_one_by_one(
        names: tuple[str, ...], keys: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    conn, table = _spread_table(names, keys)
    monkeypatch.setattr(runtime_module, "DIGEST_BATCH_ROWS", 4)
    by_row = runtime_module._table_digest_by_row(conn, table, True, check_text=True)
    assert by_row.rows == len(keys)
    assert runtime_module._table_digest(conn, table, True, check_text=True) == by_row
    assert scan_digests(conn, [table], check_text=True) == {"spread": by_row}  # the general, type-testing form


def test_a_batched_digest_refuses_text_that_is_not_utf8() -> None:
    conn, table = _spread_table(("id", "a", "b"), list(range(1, 10)))
    conn.execute("UPDATE spread SET a = CAST(X'80ff' AS TEXT) WHERE id = 6")
    assert runtime_module._table_digest(conn, table, True) == runtime_module._table_digest_by_row(conn, table, True,
                                                                                                  False)
    with pytest.raises(UnicodeDecodeError):
        runtime_module._table_digest(conn, table, True, check_text=True)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_seeds_digest_the_same_with_and_without_the_strict_shortcut(example: Path) -> None:
    loaded = load_world(example / "world.json")
    runtime = loaded.runtime()
    try:
        tables = loaded.world.state.tables
        assert runtime.strict == {table.name for table in tables}
        assert scan_digests(runtime.pristine, tables, runtime.strict) == scan_digests(runtime.pristine, tables)
    finally:
        runtime.close()


def test_minting_reads_each_anchor_table_once_in_the_seeded_order(small_world_file: Path) -> None:
    loaded = load_world(small_world_file)
    runtime = loaded.runtime()
    minter = Minter(loaded.world, runtime, seed=42, eval_percent=20)
    keys = minter.keys("orders")
    expected = sorted(keys)
    random.Random("42:orders:keys").shuffle(expected)
    assert list(keys) == expected
    assert minter.keys("orders") is keys
    runtime.close()
