"""A build checks a packaged seed's rows on a thread while it mints: the same refusals as a full load, nothing
written, and the same digests."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from conftest import write_world
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.errors import WorldFormatError
from world_format.loader import load_world
from world_format.pack import write_package

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


def test_a_package_builds_the_kit_its_single_file_form_builds(tmp_path: Path) -> None:
    single = write_world(tmp_path / "src", small_world())
    package = write_package(load_world(single), tmp_path / "pkg")
    one = build_kit(single, tmp_path / "one", SMALL)["kit"]
    other = build_kit(package, tmp_path / "other", SMALL)["kit"]
    assert one["sha256"] == other["sha256"]
    assert hashlib.sha256(Path(other["archive"]).read_bytes()).hexdigest() == other["sha256"]
