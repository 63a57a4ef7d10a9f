"""An anchor table's keys in the seeded order minting scans them: every key, or a bounded sample of a large table.

A table of at most :data:`KEY_SAMPLE_ROWS` rows is read whole and shuffled by a generator seeded with the build's
seed and the table. A larger one is sampled by rowid instead: distinct rowids are drawn from its rowid range by a
generator seeded the same way and the rows that exist are read by rowid (an index lookup each), in the order drawn,
so minting a desk of millions of rows reads tens of thousands of keys, not a pass over every row and a shuffle of
them. Minting looks at most ``scan_limit`` keys per task (4,000 by default), far fewer than the sample.
"""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

from world_format.keys import key_expression, key_from_sql, normalize_key
from world_format.models import Table
from world_format.state import quote_identifier, rowid_name

KEY_SAMPLE_ROWS = 50_000
"""Most keys minting reads from one anchor table: a table with more rows gives a seeded sample of this many (when
its rowids are dense enough to find them, see :data:`DRAWN_PER_KEY`). Far above the example worlds' tables
(hundreds of rows), whose kits read every key."""
DRAWN_PER_KEY = 2
"""Rowids drawn per sampled key: a table whose rowid range is more than twice as wide as the draws could fill
(fewer than one rowid in four in use), or whose drawn rowids find fewer than half the sample's keys, is read whole
instead."""
_CHUNK = 10_000


def _normal(table: Table, keys: list[Any]) -> list[Any]:
    """Keys as minting compares them (a composite key as its JSON object, integral reals as integers)."""
    if table.composite or any(type(key) is not int and type(key) is not str for key in keys):
        return [normalize_key(key_from_sql(table, key)) for key in keys]
    return keys  # each is its own normal form


def _every_key(conn: sqlite3.Connection, table: Table, seed: int) -> list[Any]:
    """Every key of ``table``, read in key order and shuffled by the seeded generator."""
    order = ", ".join(quote_identifier(column) for column in table.key_columns)
    rows = conn.execute(f"SELECT {key_expression(table, quote_identifier(table.name))} "
                        f"FROM {quote_identifier(table.name)} ORDER BY {order}").fetchall()
    keys = _normal(table, [row[0] for row in rows])
    random.Random(f"{seed}:{table.name}:keys").shuffle(keys)
    return keys


def _sampled_keys(conn: sqlite3.Connection, table: Table, seed: int) -> list[Any] | None:
    """:data:`KEY_SAMPLE_ROWS` keys drawn by rowid, in the order drawn; None when the table is not larger than that,
    has no rowid a query can name, or its drawn rowids find too few rows."""
    rowid = rowid_name(table)
    if rowid is None:
        return None
    name = quote_identifier(table.name)
    try:
        count, low, high = conn.execute(f"SELECT count(*), min({rowid}), max({rowid}) FROM {name}").fetchone()
    except sqlite3.Error:  # a table without a rowid
        return None
    if count <= KEY_SAMPLE_ROWS or high - low + 1 > 2 * DRAWN_PER_KEY * count:
        return None  # small, or rowids too sparse for the draws to find half the sample (and a span too wide to draw)
    generator = random.Random(f"{seed}:{table.name}:key-sample")
    drawn = generator.sample(range(low, high + 1), min(high - low + 1, DRAWN_PER_KEY * KEY_SAMPLE_ROWS))
    found: dict[int, Any] = {}
    select = (f"SELECT {rowid}, {key_expression(table, name)} FROM {name} "
              f"WHERE {rowid} IN (SELECT value FROM json_each(?))")
    for start in range(0, len(drawn), _CHUNK):
        found.update(conn.execute(select, (json.dumps(drawn[start:start + _CHUNK]),)).fetchall())
    keys = [found[at] for at in drawn if at in found][:KEY_SAMPLE_ROWS]
    if len(keys) < KEY_SAMPLE_ROWS // 2:
        return None
    return _normal(table, keys)


def seeded_keys(conn: sqlite3.Connection, table: Table, seed: int) -> tuple[Any, ...]:
    """The keys of ``table`` (an anchor table of the seed ``conn`` holds) in minting's seeded order: a sample of
    :data:`KEY_SAMPLE_ROWS` of them when the table has more rows and its rowids are dense enough, else every key."""
    sampled = _sampled_keys(conn, table, seed)
    return tuple(_every_key(conn, table, seed) if sampled is None else sampled)
