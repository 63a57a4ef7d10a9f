"""JSON Schema keywords and seed SQL mean exactly what their specs say (issue 24 item 7).

``pattern`` is an ECMA-262 regular expression (JSON Schema 2020-12 Validation 6.3.3), not Python's ``re``; a
nullable ``enum`` must list ``null``; a keyword blobkit cannot apply exactly is refused at load; a seed's schema is
compared as SQLite reads it, a double-quoted token that names nothing being a string literal.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, write_world
from worlds import small_world

from world_format.errors import WorldFormatError
from world_format.loader import load_world
from world_format.pack import write_package


def _email_schema(**keywords: Any) -> dict[str, Any]:
    world = small_world()
    tool = next(t for t in world["tools"] if t["name"] == "find_customer_by_email")
    tool["parameters"]["properties"]["email"].update(keywords)
    return world


def _calls(world: dict[str, Any], tmp_path: Path, tool: str, *arguments: dict[str, Any]) -> list[bool]:
    """For each call: whether its arguments were refused (a row not found is no refusal)."""
    runtime = load_world(write_world(tmp_path, world)).runtime()
    try:
        refused = []
        for args in arguments:
            with runtime.episode() as episode:
                event = episode.call(tool, args)
            refused.append(event.error and str(event.observation.get("error")).startswith("invalid arguments"))
        return refused
    finally:
        runtime.close()


@pytest.mark.parametrize(("pattern", "value", "python_re", "ecma"), [
    ("^[a-z0-9]+@example\\.com$", "ben1@example.com\n", True, False),   # $ before a final newline
    ("^\\d+@example\\.com$", "\u0661\u0662@example.com", True, False),    # \d is [0-9], not every Unicode digit
    ("^\\w+@example\\.com$", "\u00e9@example.com", True, False),          # \w is ASCII
    ("^.+@example\\.com$", "a\u2028b@example.com", True, False),          # . stops at line terminators
    ("^[a-z0-9]+@example\\.com$", "ben1@example.com", True, True),
])
def test_a_pattern_matches_as_ecma_262_does_not_as_python_re(tmp_path: Path, pattern: str, value: str,
                                                             python_re: bool, ecma: bool) -> None:
    assert bool(re.search(pattern, value)) is python_re  # what jsonschema's default (Python re) would have said
    refused = _calls(_email_schema(pattern=pattern), tmp_path, "find_customer_by_email", {"email": value})
    assert refused == [not ecma]


def test_the_airline_booking_reference_refuses_a_trailing_newline() -> None:
    runtime = load_world(ROOT / "examples" / "airline_desk" / "world.json").runtime()
    try:
        assert next(t for t in runtime.world.tools if t.name == "get_booking").parameters["properties"][
            "booking_id"]["pattern"] == "^[A-Z]{6}$"
        with runtime.episode() as episode:
            event = episode.call("get_booking", {"booking_id": "KXTRAB\n"})
    finally:
        runtime.close()
    assert event.error and "does not match" in event.observation["error"]


@pytest.mark.parametrize("pattern", ["(?P<name>a)", "\\Z", "a{,2}(?i)", "(a"])
def test_a_pattern_that_is_no_ecma_262_regex_is_refused_at_load_naming_tool_and_parameter(tmp_path: Path,
                                                                                         pattern: str) -> None:
    with pytest.raises(WorldFormatError, match=r"tool 'find_customer_by_email' parameter 'email': pattern .* is not "
                                               "an ECMA-262 regular expression"):
        load_world(write_world(tmp_path, _email_schema(pattern=pattern)))


def test_a_nullable_enum_must_list_null_and_one_that_does_accepts_it(tmp_path: Path) -> None:
    with pytest.raises(WorldFormatError, match=r"parameter 'email': its type admits null but its enum does not list "
                                               "null"):
        load_world(write_world(tmp_path / "a", _email_schema(type=["string", "null"], enum=["ben1@example.com"])))
    with pytest.raises(WorldFormatError, match=r"its type admits null but its const does not list null"):
        load_world(write_world(tmp_path / "b", _email_schema(type=["string", "null"], const="ben1@example.com")))
    listed = _email_schema(type=["string", "null"], enum=["ben1@example.com", None])
    assert _calls(listed, tmp_path / "c", "find_customer_by_email", {"email": None}, {"email": "ben1@example.com"},
                  {"email": "chloe2@example.com"}) == [False, False, True]


@pytest.mark.parametrize(("keywords", "problem"), [
    ({"enum": ["ben1@example.com", 7]}, "enum value 7 does not fit its own schema"),
    ({"examples": ["x" * 300]}, "examples value 'xxx"),
    ({"pattern": "^[a-z]+$", "default": "ANA"}, "its default does not fit its own schema"),
])
def test_every_declared_value_fits_the_schema_it_is_declared_for(tmp_path: Path, keywords: dict[str, Any],
                                                                  problem: str) -> None:
    with pytest.raises(WorldFormatError, match=re.escape(problem)):
        load_world(write_world(tmp_path, _email_schema(**keywords)))


# --------------------------------------------------------------------------- the seed compared as SQLite reads it


def _checked_world(check: str) -> dict[str, Any]:
    world = small_world()
    world["state"]["tables"][0]["checks"] = [check]
    return world


def _with_seed_sql(package: Path, table: str, sql: str) -> Path:
    """Rewrite one table's CREATE statement in a packaged seed (as a tool other than blobkit might write it)."""
    with sqlite3.connect(package / "seed.sqlite") as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?", (sql, table))
    data = (package / "seed.sqlite").read_bytes()
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["files"]["seed.sqlite"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (package / "manifest.json").write_text(json.dumps(manifest))
    return package


def _seed_sql(tmp_path: Path, check: str) -> tuple[Path, str]:
    package = write_package(load_world(write_world(tmp_path / "src", _checked_world(check))), tmp_path / "pkg")
    with sqlite3.connect(package / "seed.sqlite") as conn:
        sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'customers'").fetchone()[0]
    return package, sql


def test_a_double_quoted_string_in_a_seed_check_compares_case_sensitively_as_sqlite_reads_it(tmp_path: Path) -> None:
    package, sql = _seed_sql(tmp_path, 'tier <> "platinum"')
    with sqlite3.connect(":memory:") as conn:  # SQLite itself: "platinum" names no column, so it is a string
        conn.execute('CREATE TABLE t (tier TEXT CHECK (tier <> "PLATINUM"))')
        conn.execute("INSERT INTO t VALUES ('platinum')")  # the seed's check lets through what the declaration refuses
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO t VALUES ('PLATINUM')")
    _with_seed_sql(package, "customers", sql.replace('"platinum"', '"PLATINUM"'))
    with pytest.raises(WorldFormatError, match=r"seed.sqlite table 'customers': differs from its declaration: the "
                                               "seed has \"'PLATINUM'\" where the declaration has \"'platinum'\""):
        load_world(package)


def test_a_seed_that_quotes_identifiers_differently_still_reads_as_its_declaration(tmp_path: Path) -> None:
    package, sql = _seed_sql(tmp_path, 'tier <> "platinum"')
    _with_seed_sql(package, "customers", sql.replace('"tier" TEXT', "[TIER] text").replace('"email"', "`email`"))
    assert load_world(package).world.identity.id == "acme-shop"
