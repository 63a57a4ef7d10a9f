"""World SQL's deadline: a watchdog thread interrupts a statement past it, whatever Python does meanwhile, and
nothing after the world block ends."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from world_format.sqlguard import Guard

RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"


def _guard(timeout_s: float) -> Guard:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
    return Guard(conn, {"t"}, timeout_s=timeout_s)


def test_a_runaway_query_is_interrupted_at_its_deadline_beside_a_busy_python_thread() -> None:
    guard, stop = _guard(0.2), threading.Event()

    def spin() -> None:  # holds the GIL as much as the interpreter lets it
        while not stop.is_set():
            sum(range(1000))

    busy = threading.Thread(target=spin)
    busy.start()
    try:
        start = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="interrupted"), guard.world("read") as conn:
            conn.execute(RUNAWAY).fetchall()
        assert time.monotonic() - start < 5.0
    finally:
        stop.set()
        busy.join()


def test_statements_after_a_world_block_are_not_interrupted_when_its_deadline_passes() -> None:
    guard = _guard(0.05)
    with guard.world("read") as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    time.sleep(0.2)
    with guard.host() as conn:
        assert conn.execute("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 300000) "
                            "SELECT max(n) FROM r").fetchone() == (300000,)


def test_an_inner_world_block_restores_the_outer_deadline() -> None:
    guard = _guard(60.0)
    with guard.world("read"), guard.world("read", timeout_s=0.1) as conn:
        conn.execute("SELECT 1").fetchall()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"), guard.world("read", timeout_s=0.2) as conn:
        with guard.world("read", timeout_s=30.0):
            pass
        conn.execute(RUNAWAY).fetchall()  # the outer block's 0.2 s holds again
