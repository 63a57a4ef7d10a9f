"""A build checks a packaged seed's rows on a thread while it mints: the same refusals as a full load, nothing
written, and the same digests."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import write_world
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.errors import WorldFormatError
from world_format.loader import load_world
from world_format.models import State
from world_format.pack import write_package
from world_format.seed_checks import SeedChecks
from world_format.state import check_foreign_keys, create_index_sql, create_table_sql, foreign_key_checks

SMALL = BuildConfig(train_cases_per_task=4, eval_cases_per_task=2)


def _package(tmp_path: Path, *statements: str) -> Path:
    """The small world packaged, its seed then changed by ``statements`` (foreign keys not enforced)."""
    package = write_package(load_world(write_world(tmp_path / "src", small_world())), tmp_path / "pkg")
    seed = package / "seed.sqlite"
    conn = sqlite3.connect(seed)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    manifest = json.loads((package / "manifest.json").read_text())
    data = seed.read_bytes()
    manifest["files"]["seed.sqlite"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (package / "manifest.json").write_text(json.dumps(manifest))
    return package


DANGLING = "INSERT INTO orders VALUES (9001, 777, 'pending', 10.0)"
LATIN1 = "UPDATE customers SET name = CAST(x'41636de9' AS TEXT) WHERE id = (SELECT min(id) FROM customers)"


@pytest.mark.parametrize(("statements", "message"), [
    ((DANGLING,), "violates a declared foreign key"),
    ((LATIN1,), "not UTF-8"),
    ((LATIN1, DANGLING), "violates a declared foreign key"),  # the full load's order: foreign keys, then text
])
def test_a_build_refuses_a_bad_seed_as_a_full_load_does_and_writes_nothing(
        tmp_path: Path, statements: tuple[str, ...], message: str) -> None:
    package = _package(tmp_path, *statements)
    with pytest.raises(WorldFormatError, match=message) as loading:
        load_world(package)
    out = tmp_path / "out"
    with pytest.raises(WorldFormatError, match=message) as building:
        build_kit(package, out, SMALL)
    assert str(building.value) == str(loading.value)
    assert not out.exists() or not any(out.iterdir())


def test_background_digests_are_those_of_a_full_load(tmp_path: Path) -> None:
    package = _package(tmp_path)
    full = load_world(package)
    background = load_world(package, background_checks=True)
    assert background.check_failure() is None
    assert background.seed_digests == full.seed_digests
    assert background.sha256 == full.sha256
    assert background.seed_sha256 == hashlib.sha256((package / "seed.sqlite").read_bytes()).hexdigest()


def _is_open(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # closed
        return False
    return True


def test_the_loaders_copy_becomes_the_first_runtimes_working_copy_and_the_checks_read_the_shared_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = _package(tmp_path)
    connect, opened = sqlite3.connect, []

    def counting_connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    def still_open() -> list[sqlite3.Connection]:  # the copies of the seed (scratch connections are closed)
        return [conn for conn in opened if _is_open(conn)]

    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    background = load_world(package, validate=False, background_checks=True)  # as the builder loads
    first = background.runtime()
    assert background.check_failure() is None
    # two in-memory copies in all: the loader's (checked, then the working copy) and the shared read-only one
    assert still_open() == [first.conn, background.seed_copy.connection]
    assert first.pristine is background.seed_copy.connection
    second = background.runtime()  # the spare is handed over once: later runtimes make their own working copy
    assert still_open() == [first.conn, background.seed_copy.connection, second.conn]
    full = load_world(package)
    reference = full.runtime()
    try:
        with first.episode() as episode, reference.episode() as expected:  # the handed-over copy is the seed's
            for each in (episode, expected):
                each.call("cancel_order", {"order_id": 100})
            assert episode.state_hash() == expected.state_hash()
            assert episode.changes() == expected.changes()
        assert background.seed_copy.connection.execute("SELECT 1").fetchone() == (1,)  # the checks left it open
    finally:
        for runtime in (first, second, reference):
            runtime.close()


def test_checks_cancelled_before_they_have_a_connection_never_pass(tmp_path: Path) -> None:
    loaded = load_world(_package(tmp_path), validate=False)
    started = threading.Event()

    made: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        started.wait()
        made.append(sqlite3.connect(":memory:", check_same_thread=False))
        return made[0]

    checks = SeedChecks(connect, loaded.world.state, "here")
    checks.cancel()
    started.set()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        checks.verdict()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):  # the checks' own copy is closed when they end
        made[0].execute("SELECT 1")


def test_a_package_builds_the_kit_its_single_file_form_builds(tmp_path: Path) -> None:
    single = write_world(tmp_path / "src", small_world())
    package = write_package(load_world(single), tmp_path / "pkg")
    one = build_kit(single, tmp_path / "one", SMALL)["kit"]
    other = build_kit(package, tmp_path / "other", SMALL)["kit"]
    assert one["sha256"] == other["sha256"]
    assert hashlib.sha256(Path(other["archive"]).read_bytes()).hexdigest() == other["sha256"]


FK_STATE = {
    "tables": [
        {"name": "customers", "columns": [
            {"name": "id", "type": "INTEGER", "primary_key": True},
            {"name": "email", "type": "TEXT", "unique": True},
            {"name": "referrer", "type": "INTEGER", "references": "customers.id"}]},
        {"name": "orders", "columns": [
            {"name": "id", "type": "INTEGER", "primary_key": True},
            {"name": "customer_id", "type": "INTEGER", "references": "customers.id"},
            {"name": "email", "type": "TEXT", "references": "customers.email"}]},
        {"name": "notes", "columns": [  # a reference between columns of different types: left to the pragma
            {"name": "id", "type": "INTEGER", "primary_key": True},
            {"name": "customer_ref", "type": "TEXT", "references": "customers.id"},
            {"name": "order_ref", "type": "REAL", "references": "orders.id"}]}],
    "anchors": [{"table": "customers", "label": "customer"}],
    "indexes": [{"name": "idx_orders_customer_id", "table": "orders", "columns": ["customer_id"]}],
    "seed": "seed.sqlite",
}


def _random_rows(rng: random.Random) -> dict[str, list[tuple[object, ...]]]:
    """A few rows per table whose references mostly hold (some NULL, some dangling, some of another type)."""
    def ref(ids: list[int], texts: list[str] | None = None) -> object:
        roll = rng.random()
        if roll < 0.15:
            return None
        if roll < 0.25:
            return rng.choice([99, 0, -1])
        if texts is not None and roll < 0.35:
            return rng.choice(texts)
        return rng.choice(ids)
    ids = list(range(1, rng.randint(2, 6)))
    emails = [f"c{i}@x.org" for i in ids]
    customers = [(i, emails[i - 1] if rng.random() < 0.9 else None, ref(ids) if rng.random() < 0.5 else None)
                 for i in ids]
    orders = [(10 + n, ref(ids), rng.choice([*emails, "nobody@x.org", None])) for n in range(rng.randint(0, 4))]
    order_ids = [row[0] for row in orders] or [10]
    notes = [(n, rng.choice([None, "1", "2", "01", "x", " 1"]), ref(order_ids, ["10", "10.0", "10.5"]))
             for n in range(rng.randint(0, 3))]
    return {"customers": customers, "orders": orders, "notes": notes}


def test_the_foreign_key_anti_joins_give_the_pragmas_verdict_on_random_seeds() -> None:
    state = State.model_validate(FK_STATE)
    rng = random.Random(28)
    verdicts = set()
    for _ in range(400):
        conn = sqlite3.connect(":memory:")
        for table in state.tables:
            conn.execute(create_table_sql(table))
        for index in state.indexes:
            conn.execute(create_index_sql(index))
        for name, rows in _random_rows(rng).items():
            for row in rows:
                with contextlib.suppress(sqlite3.IntegrityError):  # STRICT refuses a value of another type
                    conn.execute(f"INSERT INTO {name} VALUES (?, ?, ?)", row)
        expected = conn.execute("PRAGMA foreign_key_check").fetchone() is not None
        found = any(conn.execute(sql).fetchone() for sql in foreign_key_checks(state))
        assert found == expected
        verdicts.add(found)
        conn.close()
    assert verdicts == {True, False}
    assert sum(sql.startswith("PRAGMA") for sql in foreign_key_checks(state)) == 1  # notes only


def test_a_dangling_reference_in_each_table_is_refused(tmp_path: Path) -> None:
    state = State.model_validate(FK_STATE)
    for statement in ("INSERT INTO customers VALUES (1, 'a@x.org', 7)", "INSERT INTO orders VALUES (1, 7, NULL)",
                      "INSERT INTO orders VALUES (1, NULL, 'b@x.org')", "INSERT INTO notes VALUES (1, '7', NULL)"):
        conn = sqlite3.connect(":memory:")
        for table in state.tables:
            conn.execute(create_table_sql(table))
        conn.execute(statement)
        with pytest.raises(WorldFormatError, match="violates a declared foreign key"):
            check_foreign_keys(conn, state, "here")
        conn.execute(f"DELETE FROM {statement.split()[2]}")
        check_foreign_keys(conn, state, "here")
        conn.close()
