"""Kits built once per test run and shared by every test and every xdist worker that asks for the same build.

A build is named by the sha256 of its world's folder (every file beside ``world.json``) and the canonical
BuildConfig; the first worker to ask builds it under a file lock in the run's shared temporary folder, the others
wait and read it. A cached kit is shared: a test that changes a kit copies it first (``shutil.copytree``). The tests
whose subject is building (twice to identical bytes, interrupted, its progress, its errors) call ``build_kit``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import filelock
import pytest

if TYPE_CHECKING:
    from blobkit.builder import BuildConfig


def _cache_root(factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run shares (the run's own temporary folder, so nothing outlives the run's
    code: under xdist the workers' base folders sit in it; without xdist it is the base folder itself)."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kit-cache"
    root.mkdir(exist_ok=True)
    return root


def build_key(world: Path, config: BuildConfig) -> str:
    """The sha256 of a build's inputs: every file of the world's folder (by relative path) and the config."""
    digest = hashlib.sha256()
    folder = world.parent
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    digest.update(world.name.encode() + b"\0" + config.model_dump_json().encode())
    return digest.hexdigest()


def _tree(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder``, by relative path."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _cached(entry: Path, world: Path, config: BuildConfig, timeout: float) -> dict[str, Any]:
    with filelock.FileLock(f"{entry}.lock", timeout=timeout):
        record_file = entry / "record.json"
        if not record_file.exists():
            from blobkit.builder import build_kit

            record = build_kit(world, entry / "out", config)
            (entry / "tree.json").write_text(json.dumps(_tree(entry / "out")), encoding="utf-8")
            record_file.write_text(json.dumps(record), encoding="utf-8")
        record = json.loads(record_file.read_text(encoding="utf-8"))
        assert isinstance(record, dict)
        return record


def cached_builds(builds: list[tuple[Path, BuildConfig]], factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The build records of ``builds`` (each built once per run, whichever worker asks first); a build another worker
    is making is waited for only when no other is left to take, so two workers asking for the same set share it."""
    root = _cache_root(factory)
    entries = [root / build_key(Path(world), config) for world, config in builds]
    records: dict[int, dict[str, Any]] = {}
    while len(records) < len(builds):
        pending = [index for index in range(len(builds)) if index not in records]
        for index in pending:
            world, config = builds[index]
            try:
                records[index] = _cached(entries[index], Path(world), config, 0 if len(pending) > 1 else -1)
            except filelock.Timeout:
                continue
            break
        else:  # every pending build is being made elsewhere: wait for the first
            world, config = builds[pending[0]]
            records[pending[0]] = _cached(entries[pending[0]], Path(world), config, -1)
    return [records[index] for index in range(len(builds))]


def cached_build(world: Path, factory: pytest.TempPathFactory, config: BuildConfig | None = None) -> dict[str, Any]:
    """The record of ``build_kit(world, …, config)`` (the default config when None), built once per run; its kit is
    shared, not to be changed."""
    from blobkit.builder import BuildConfig

    return cached_builds([(world, config or BuildConfig())], factory)[0]


def cached_kit(world: Path, factory: pytest.TempPathFactory, config: BuildConfig | None = None) -> Path:
    """The folder of the shared kit :func:`cached_build` made."""
    return Path(cached_build(world, factory, config)["kit"]["path"])


def changed_kits(factory: pytest.TempPathFactory) -> list[str]:
    """The shared builds whose files a test changed, added or removed since they were made (none, when every test
    that changes a kit changed a copy)."""
    root = _cache_root(factory)
    return [entry.name for entry in sorted(root.iterdir()) if (entry / "record.json").is_file()
            and json.loads((entry / "tree.json").read_text(encoding="utf-8")) != _tree(entry / "out")]
