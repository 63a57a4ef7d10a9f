"""The kit builder's driver: load → candidates → gate → split → replay → write.

Every stage runs on one runtime of the world (each probe and replay an isolated episode: a
savepoint rolled back when it ends); nothing is written until every stage has succeeded, and
then the kit folder and its reproducible archive are written atomically.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blobkit.errors import KitError
from blobkit.wording import task_defects, world_words
from world_format.archive import write_tar_zst
from world_format.background import start_import
from world_format.canonical import canonical_bytes
from world_format.family import remember_family_rows
from world_format.jsontext import json_lines
from world_format.kit import KIT_FILE
from world_format.loaded import LoadedWorld
from world_format.loader import SEED_FILE, load_world
from world_format.manifest import FileTable, write_manifested_dir
from world_format.runtime import WorldRuntime
from world_format.validate import validate_world
from world_format.writable import check_writable

from .candidates import candidates, gate_candidates
from .config import BuildConfig, Progress, no_progress
from .coverage import tool_coverage
from .kit_files import Executed, build_record, kit_files, kit_meta
from .leakage import leakage_report, withhold_training
from .mint import Minter
from .rename import renamed_replays
from .rows import replay_rows
from .split import Case, split_cases


def _load(world_path: Path, progress: Progress) -> tuple[LoadedWorld, WorldRuntime]:
    """Load and validate the world on the runtime the build then uses.

    Here the build reads the seed (checksum, integrity check and schema); a packaged seed's checks that read
    every row, with the seed digest, go on on a thread (:mod:`world_format.seed_checks`) while the build mints:
    the first probe waits for the digest, publishing for the verdict (:func:`_checks_first`). After it, probes
    and replays are episodes (savepoints) that read and hash changed rows only.
    """
    progress("load", 0, 1)
    start_import("inflect")  # the wording check's grammar (seconds of import), loaded while SQLite works
    loaded = load_world(world_path, validate=False, background_checks=True)
    with _checks_first(loaded):
        runtime = loaded.runtime()
        remember_family_rows(runtime)  # validation reads each family query's first row, minting all its rows: one run
        try:
            validate_world(loaded, runtime)
        except BaseException:
            runtime.close()
            raise
    progress("load", 1, 1)
    return loaded, runtime


@contextmanager
def _checks_first(loaded: LoadedWorld | None) -> Iterator[None]:
    """A failure while the seed's checks still run is reported as theirs when they fail: a seed that breaks a
    foreign key or holds text that is not UTF-8 is refused as such, whatever it made minting do meanwhile."""
    try:
        yield
    except Exception:
        failure = None if loaded is None else loaded.check_failure()
        if failure is not None:
            raise failure from None
        raise
    except BaseException:
        if loaded is not None and loaded.checks is not None:
            loaded.checks.cancel()
        raise


def _execute(loaded: LoadedWorld, runtime: WorldRuntime, config: BuildConfig, progress: Progress) -> Executed:
    """Mint, gate, split and replay: every step an episode of ``runtime``, never a copy of the seed."""
    minter = Minter(loaded.world, runtime, config.seed, config.eval_percent, loaded.seed_copy)
    entries = candidates(loaded, minter, config, progress)
    gate_candidates(runtime, minter, entries, progress)
    admitted = [entry for entry in entries if not entry.reasons and entry.instances]
    if not admitted:
        raise KitError(f"{loaded.path}: no task passed the discrimination gate; see the reasons with --json")
    train, held_out = split_cases(admitted, progress)
    _check_wording(loaded, train + held_out)
    replayed = replay_rows(runtime, train, progress)
    kept, rows = withhold_training(runtime, minter.sides, train, held_out, replayed)
    withheld = len(train) - len(kept)
    if not kept:
        raise KitError(f"{loaded.path}: every training row states an identifier of a held-out case; "
                       "add anchor rows so that entities do not all share the same reference rows")
    renamed = None
    if config.renamed_replays:
        rows, renamed = renamed_replays(runtime, minter.sides, kept, held_out, rows, config.seed,
                                        config.renamed_replays, progress)
    return Executed(entries, kept, held_out, rows, leakage_report(runtime, minter.sides, kept, held_out, rows),
                    withheld, renamed)


def _check_wording(loaded: LoadedWorld, cases: list[Case]) -> None:
    """Minted text is what a model learns to say: a wording defect in it fails the build (KitError)."""
    words = world_words(loaded.world)
    for case in cases:
        task = case.instance.task
        found = task_defects(loaded.world, task, words)
        if found:
            kind, text = found[0]
            raise KitError(f"{loaded.path}: minted {task.template} text has a wording defect ({kind}): "
                           f"{text!r}; reword the world's label, result_noun, action or explanation that it "
                           "comes from")


@dataclass(frozen=True)
class BuiltKit:
    """A kit executed in memory: every file but kit.json, kit.json less its file table, and the build record.

    :func:`execute_build` makes one without writing anything (``company inspect`` stops there);
    :func:`write_kit` writes it (the folder, then its reproducible archive).
    """

    world_id: str
    files: dict[str, bytes]
    meta: dict[str, Any]
    record: dict[str, Any]
    hashed: dict[str, str] = field(default_factory=dict)
    """The sha256 of files whose very bytes the build already hashed (the seed, checked against its package)."""
    loaded: LoadedWorld | None = field(default=None, compare=False, repr=False)
    """The world it was built from, whose seed checks :meth:`verdict` waits for."""

    def verdict(self) -> None:
        """Wait for the seed's checks still running; raise their first failure (WorldFormatError)."""
        failure = None if self.loaded is None else self.loaded.check_failure()
        if failure is not None:
            raise failure

    def rejected(self) -> list[dict[str, Any]]:
        """The rejected candidates' task records (as rejected.jsonl holds them)."""
        return [json.loads(line) for _, line in json_lines(self.files["rejected.jsonl"].decode("utf-8"))]


def execute_build(world_path: Path, config: BuildConfig = BuildConfig(), progress: Progress = no_progress) -> BuiltKit:
    """Load, mint, gate, split and replay; return the kit's content without writing anything.

    ``progress(stage, done, total)`` is called as the build goes through its stages:
    ``load``, ``mint`` (per task family), ``gate`` (per task), ``split`` (per case),
    ``replay`` (per training case) and, with ``renamed_replays``, ``rename`` (per training case with a row).
    """
    built = _execute_build(Path(world_path), config, progress)
    with _checks_first(built.loaded):
        built.verdict()
    return built


def _execute_build(world_path: Path, config: BuildConfig, progress: Progress) -> BuiltKit:
    """:func:`execute_build` with the seed's checks perhaps still running (``built.verdict()`` waits for them)."""
    loaded, runtime = _load(world_path, progress)
    with _checks_first(loaded):
        try:
            done = _execute(loaded, runtime, config, progress)
        finally:
            runtime.close()
        record = {**build_record(done), "tool_coverage": tool_coverage(loaded.world, done, config)}
        files, meta = kit_files(loaded, done), kit_meta(loaded, config, done, record)
    hashed = {f"world/{SEED_FILE}": loaded.seed_sha256} if loaded.seed_sha256 else {}
    return BuiltKit(loaded.world.identity.id, files, meta, record, hashed, loaded)


def build_kit(world_path: Path, out_dir: Path, config: BuildConfig = BuildConfig(),
              progress: Progress = no_progress) -> dict[str, Any]:
    """Build a kit into ``out_dir``; return the build record. Nothing is written unless every stage succeeds.

    The stages of :func:`execute_build`, then ``write`` (the folder, then the archive). OutputError before
    any stage when ``out_dir`` cannot be written (:func:`world_format.writable.check_writable`).
    """
    check_writable(out_dir)
    built = _execute_build(Path(world_path), config, progress)
    with _checks_first(built.loaded):
        return write_kit(built, out_dir, progress)


def write_kit(built: BuiltKit, out_dir: Path, progress: Progress = no_progress) -> dict[str, Any]:
    """Write the kit folder (kit.json last) and its archive, made from the finished folder, atomically."""
    name = f"{built.world_id}-train-kit"
    final, archive = Path(out_dir) / name, Path(out_dir) / f"{name}.tar.zst"
    written: dict[str, Any] = {}

    def render(table: FileTable) -> bytes:
        return canonical_bytes({**built.meta, "files": table}) + b"\n"

    def archive_it(staging: Path) -> None:
        progress("write", 1, 2)
        written["sha256"], written["bytes"] = write_tar_zst(staging, archive, name, before_replace=built.verdict)

    progress("write", 0, 2)
    write_manifested_dir(final, built.files, KIT_FILE, render, before_publish=archive_it, hashed=built.hashed)
    progress("write", 2, 2)
    return {**built.record, "kit": {"path": str(final), "archive": str(archive), **written}}
