"""Loading a world from either on-disk form, with budgets and checksums.

* single-file export: ``world.json`` with the seed rows inline (``state.rows``);
* packaged world directory: ``world.json`` (``state.seed = "seed.sqlite"``), ``seed.sqlite``
  and ``manifest.json`` listing the sha256 and size of every other file.

Both forms of the same world have the same ``sha256`` (see :mod:`world_format.loaded`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from world_format.errors import WorldFormatError, WorldSizeError

from .declaration import check_declaration
from .jsontext import loads_strict
from .loaded import LoadedWorld
from .manifest import check_bytes, check_listing
from .models import World
from .runtime import DigestCache, text_checked_digests
from .seed_checks import SeedChecks
from .seed_copy import SeedCopies
from .sqlguard import open_memory_copy
from .state import TableDigest, build_seed, check_seed
from .validate import validate_world

WORLD_FILE = "world.json"
SEED_FILE = "seed.sqlite"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "blobkit-world-package"


@dataclass(frozen=True)
class Budget:
    """Size limits for untrusted world input."""

    max_world_json_bytes: int = 32 * 1024 * 1024
    max_seed_bytes: int = 2 * 1024 * 1024 * 1024
    max_manifest_bytes: int = 1024 * 1024


DEFAULT_BUDGET = Budget()


# --------------------------------------------------------------------------- reading


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """Read a regular file of at most ``limit`` bytes (refusing links and special files)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise WorldFormatError(f"{path}: {what} not found") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise WorldFormatError(f"{path}: {what} must be a regular file (no links or special files)")
    if info.st_size > limit:
        raise WorldSizeError(f"{path}: {what} is {info.st_size} bytes, over the {limit}-byte budget")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise WorldSizeError(f"{path}: {what} grew past the {limit}-byte budget while reading")
    return data


def parse_json(data: bytes, source: str) -> Any:
    """Strict JSON (:func:`world_format.jsontext.loads_strict`): UTF-8 only, no duplicate keys, no NaN/Infinity, no
    lone surrogates."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorldFormatError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    try:
        return loads_strict(text)
    except ValueError as exc:
        raise WorldFormatError(f"{source}: invalid JSON: {exc}") from None
    except RecursionError:
        raise WorldFormatError(f"{source}: JSON nested too deeply") from None


def _pointer(location: tuple[Any, ...]) -> str:
    parts = [str(part) for part in location if not (isinstance(part, str) and part[:1].isupper() or "[" in str(part))]
    return "/" + "/".join(parts)


def parse_world(document: Any, source: str) -> World:
    """Validate a parsed document against the models; one-line error with a JSON pointer."""
    try:
        return World.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise WorldFormatError(f"{source}: {_pointer(first['loc'])}: {first['msg']}{more}") from None
    except RecursionError:
        raise WorldFormatError(f"{source}: document nested too deeply") from None


# --------------------------------------------------------------------------- the two forms


def load_world(path: Path | str, budget: Budget = DEFAULT_BUDGET, *, validate: bool = True,
               background_checks: bool = False) -> LoadedWorld:
    """Load a world from a packaged directory or a single-file export, fully checked.

    With ``background_checks`` a packaged seed's checks that read every row (and its digest) go on on a thread
    (:class:`world_format.seed_checks.SeedChecks`) after this returns: the caller must wait for
    :meth:`LoadedWorld.check_failure` before it trusts the world (the builder does, before it publishes a kit).
    """
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        loaded = _load_package(path, budget, background_checks)
    else:
        loaded = _load_single_file(path, budget)
    if validate:
        validate_world(loaded)
    return loaded


def _load_single_file(path: Path, budget: Budget) -> LoadedWorld:
    source = str(path)
    document = parse_json(read_bounded(path, budget.max_world_json_bytes, "world.json"), source)
    world = parse_world(document, source)
    check_declaration(world, source)
    if world.state.rows is None:
        raise WorldFormatError(f"{source}: /state/seed: a single-file world needs inline rows in /state/rows; "
                               "load the packaged directory instead")
    return LoadedWorld(world, build_seed(world.state, source), "file", path)


def read_manifest(directory: Path, budget: Budget) -> dict[str, dict[str, Any]]:
    """Read and shape-check a package manifest; return its file table."""
    source = str(directory / MANIFEST_FILE)
    manifest = parse_json(read_bounded(directory / MANIFEST_FILE, budget.max_manifest_bytes, "manifest.json"), source)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT or manifest.get("version") != 1:
        raise WorldFormatError(f"{source}: not a blobkit world manifest (format {MANIFEST_FORMAT!r}, version 1)")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(manifest) != {"format", "version", "files"}:
        raise WorldFormatError(f"{source}: /files must be an object and no other keys are allowed")
    for name, entry in files.items():
        ok = isinstance(entry, dict) and set(entry) == {"sha256", "bytes"} and isinstance(entry["bytes"], int)
        if not ok:
            raise WorldFormatError(f"{source}: /files/{name}: needs exactly sha256 and bytes")
    return files


SQLITE_HEADER = b"SQLite format 3\x00"
_WAL_VERSIONS = b"\x02\x02"
_ROLLBACK_VERSIONS = b"\x01\x01"


def rollback_journal_copy(seed: bytes) -> bytes:
    """The seed with a WAL-mode header read as the same database in rollback-journal mode.

    Bytes 18 and 19 of an SQLite header are the file format's write and read versions: 2 in WAL mode,
    1 otherwise (https://www.sqlite.org/fileformat2.html#database_header). A package holds the main
    file alone, so its content is complete; the journal mode says how a writer would commit, which
    an in-memory copy never does, and SQLite refuses to deserialize a WAL-mode image. The identity is
    unaffected (it is the state hash of the rows), and a re-packed world stores the rollback form.
    """
    if seed[:16] == SQLITE_HEADER and seed[18:20] == _WAL_VERSIONS:
        return seed[:18] + _ROLLBACK_VERSIONS + seed[20:]
    return seed


def _load_package(directory: Path, budget: Budget, background_checks: bool = False) -> LoadedWorld:
    files = read_manifest(directory, budget)
    check_listing(directory, files, MANIFEST_FILE, recursive=False)
    if set(files) != {WORLD_FILE, SEED_FILE}:
        raise WorldFormatError(f"{directory}: a packaged world holds exactly {WORLD_FILE} and {SEED_FILE}")
    world_bytes = read_bounded(directory / WORLD_FILE, budget.max_world_json_bytes, "world.json")
    check_bytes(directory / WORLD_FILE, world_bytes, files[WORLD_FILE], MANIFEST_FILE)
    read = read_bounded(directory / SEED_FILE, budget.max_seed_bytes, "seed.sqlite")
    seed_sha256 = check_bytes(directory / SEED_FILE, read, files[SEED_FILE], MANIFEST_FILE)
    seed = rollback_journal_copy(read)
    source = str(directory / WORLD_FILE)
    world = parse_world(parse_json(world_bytes, source), source)
    check_declaration(world, source)
    if world.state.seed is None:
        raise WorldFormatError(f"{source}: /state/rows: a packaged world keeps its rows in seed.sqlite")
    conn = open_memory_copy(seed) if seed[:16] == SQLITE_HEADER else None
    if conn is None:
        raise WorldFormatError(f"{directory / SEED_FILE}: not an SQLite database")
    known = seed_sha256 if seed is read else None
    if background_checks:
        try:
            check_seed(conn, world.state, str(directory), rows=False)
        except BaseException:
            conn.close()
            raise
        # the checks read a private copy of their own, made on their thread and closed when they end, so the
        # runtimes' reads of their starting state (the shared copy) never wait for a check's statement; the
        # loader's copy, which the checks above only read, becomes the first runtime's working copy
        copies = SeedCopies(spare=conn)
        checks = SeedChecks(lambda: open_memory_copy(seed), world.state, str(directory))
        return LoadedWorld(world, seed, "package", directory, DigestCache(pending=checks.digests), checks, known,
                           copies)
    digests: dict[str, TableDigest] = {}
    try:  # the text check is the seed digest's pass (one pass over the rows for both)
        check_seed(conn, world.state, str(directory),
                   check_text=lambda: digests.update(text_checked_digests(conn, world.state, str(directory))))
    finally:
        conn.close()
    return LoadedWorld(world, seed, "package", directory, DigestCache(digests), seed_sha256=known)
