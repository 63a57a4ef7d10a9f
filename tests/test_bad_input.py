"""Bad worlds get a typed error naming where the problem is, and nothing is written."""

from __future__ import annotations

import contextlib
import copy
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from worlds import small_world

from blobkit.errors import BlobkitError, ChecksumError, WorldFormatError, WorldSizeError
from world_format.loader import load_world
from world_format.pack import write_package


def _mutated(change: Any) -> dict[str, Any]:
    world = small_world()
    change(world)
    return world


def _set(path: list[Any], value: Any) -> Any:
    def change(world: dict[str, Any]) -> None:
        target = world
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return change


BAD_WORLDS = {
    "unknown top-level field": (_set(["surprise"], 1), r"/surprise"),
    "missing identity": (lambda w: w.pop("identity"), r"/identity"),
    "wrong type": (_set(["policies"], "be nice"), r"/policies"),
    "duplicate tool names": (lambda w: w["tools"].append(copy.deepcopy(w["tools"][0])), "duplicate tool name"),
    "sql that does not prepare": (_set(["tools", 0, "statements", 0], "SELEC id FROM orders WHERE id = :order_id"),
                                  "/tools/0/statements/0"),
    "unknown sql parameter": (_set(["tools", 0, "statements", 0], "SELECT * FROM orders WHERE id = :oid"),
                              r":oid is not a property"),
    "multi-statement sql": (_set(["tools", 0, "statements", 0],
                                 "SELECT * FROM orders WHERE id = :order_id; DELETE FROM orders"), "/tools/0"),
    "attach in tool sql": (_set(["tools", 4, "statements", 0], "ATTACH 'x.db' AS x"), "/tools/4/statements/0"),
    "pragma in tool sql": (_set(["tools", 4, "statements", 0], "PRAGMA writable_schema=ON"), "/tools/4/statements/0"),
    "vacuum into in tool sql": (_set(["tools", 4, "statements", 0], "VACUUM INTO '/tmp/stolen.db'"),
                                "/tools/4/statements/0"),
    "transaction control in tool sql": (_set(["tools", 4, "statements", 0], "COMMIT"), "/tools/4/statements/0"),
    "unknown tool in a task": (_set(["tasks", 0, "reference", 0, "tool"], "nope"), "unknown tool"),
    "bad reference arguments": (_set(["tasks", 0, "reference", 0, "arguments"], {"order_id": "x"}),
                                "/tasks/0/reference/0/arguments"),
    "undeclared anchor table": (_set(["state", "anchors", 0, "table"], "ghosts"), "/state/anchors/0"),
    "row of the wrong width": (lambda w: w["state"]["rows"]["orders"][0].pop(), "/state/rows/orders/0"),
    "row of the wrong type": (_set(["state", "rows", "orders", 0, 3], "lots"), "/state/rows/orders/0"),
    "undeclared view in rows form": (lambda w: w["state"]["rows"].update({"v": []}), "undeclared table"),
    "open parameter schema": (_set(["tools", 0, "parameters", "additionalProperties"], True),
                              "additionalProperties"),
}


@pytest.mark.parametrize("name", sorted(BAD_WORLDS))
def test_bad_world_is_refused_with_a_pointer(name: str, tmp_path: Path) -> None:
    change, where = BAD_WORLDS[name]
    path = write_world(tmp_path, _mutated(change))
    with pytest.raises(WorldFormatError, match=where.replace("[", r"\[")):
        load_world(path)


def _package(tmp_path: Path) -> Path:
    return write_package(load_world(write_world(tmp_path / "src", small_world())), tmp_path / "pkg")


def _rewrite_seed(package: Path, statement: str) -> None:
    seed = package / "seed.sqlite"
    conn = sqlite3.connect(seed)
    conn.execute(statement)
    conn.commit()
    conn.close()
    manifest = json.loads((package / "manifest.json").read_text())
    import hashlib
    data = seed.read_bytes()
    manifest["files"]["seed.sqlite"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (package / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("statement", "message"), [
    ("CREATE TRIGGER t AFTER UPDATE ON orders BEGIN DELETE FROM customers; END", "undeclared trigger"),
    ("CREATE VIEW v AS SELECT * FROM orders", "undeclared view"),
    ("ALTER TABLE orders RENAME TO orders_real", "not declared"),
])
def test_hostile_seed_objects_are_refused(tmp_path: Path, statement: str, message: str) -> None:
    package = _package(tmp_path)
    _rewrite_seed(package, statement)
    with pytest.raises(WorldFormatError, match=message):
        load_world(package)


def test_a_table_shadowed_by_a_view_is_refused(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _rewrite_seed(package, "ALTER TABLE orders RENAME TO orders_real")
    _rewrite_seed(package, "CREATE VIEW orders AS SELECT * FROM orders_real")
    with pytest.raises(WorldFormatError):
        load_world(package)


def test_a_corrupted_page_is_refused(tmp_path: Path) -> None:
    package = _package(tmp_path)
    seed = package / "seed.sqlite"
    data = bytearray(seed.read_bytes())
    for offset in range(4096 + 8, 3 * 4096):
        data[offset] ^= 0x5A
    seed.write_bytes(bytes(data))
    manifest = json.loads((package / "manifest.json").read_text())
    import hashlib
    manifest["files"]["seed.sqlite"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (package / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(WorldFormatError):
        load_world(package)


def test_a_checksum_mismatch_is_refused(tmp_path: Path) -> None:
    package = _package(tmp_path)
    data = bytearray((package / "world.json").read_bytes())
    data[-3] ^= 1
    (package / "world.json").write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="world.json"):
        load_world(package)


def test_an_unlisted_file_is_refused(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / "notes.txt").write_text("hi")
    with pytest.raises(ChecksumError, match="notes.txt"):
        load_world(package)


def test_a_symlinked_file_is_refused(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / "extra").symlink_to(package / "world.json")
    with pytest.raises(ChecksumError):
        load_world(package)


def test_a_one_gigabyte_world_json_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "world.json"
    with open(path, "wb") as handle:
        handle.truncate(1 << 30)
    with pytest.raises(WorldSizeError, match="budget"):
        load_world(path)


def test_non_utf8_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "world.json"
    path.write_bytes(json.dumps(small_world()).encode("utf-8").replace(b"Acme", b"Acm\xe9"))
    with pytest.raises(WorldFormatError, match="UTF-8"):
        load_world(path)


def test_duplicate_json_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "world.json"
    path.write_text('{"format_version": "1", "format_version": "1"}')
    with pytest.raises(WorldFormatError, match="duplicate key"):
        load_world(path)


def test_cli_reports_one_line_exits_nonzero_and_writes_nothing(tmp_path: Path) -> None:
    path = write_world(tmp_path / "src", _mutated(_set(["surprise"], 1)))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", "pack", "--source", str(path), "--out", str(out)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "/surprise" in result.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=20),
                          st.floats(allow_nan=False, allow_infinity=False))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list) and value:
        found += _paths(value[0], (*prefix, 0))
    return found


BASE = small_world()
PATHS = [p for p in _paths(BASE) if p]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=_json_scalars, drop=st.booleans())
def test_random_mutations_give_a_typed_error_or_a_world(tmp_path: Path, path: tuple[Any, ...], value: Any,
                                                        drop: bool) -> None:
    world = copy.deepcopy(BASE)
    target = world
    for part in path[:-1]:
        target = target[part]
    if drop and isinstance(target, dict):
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    file = tmp_path / "mutant.json"
    file.write_text(json.dumps(world))
    with contextlib.suppress(BlobkitError):
        load_world(file)
