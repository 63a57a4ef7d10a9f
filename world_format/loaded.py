"""A loaded world: the validated model, its seed database and the identity both on-disk forms share.

Both forms of the same world have the same ``sha256``: the hash of the canonical world
(without rows or seed reference) together with the seed's state hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from world_format.canonical import canonical_bytes, sha256_hex

from .errors import WorldFormatError
from .models import World
from .runtime import DigestCache, WorldRuntime, strict_tables
from .seed_copy import SeedCopies, SeedCopy
from .sqlguard import open_memory_copy
from .state import TableDigest, state_hash

if TYPE_CHECKING:
    from .seed_checks import SeedChecks


@dataclass(frozen=True)
class LoadedWorld:
    """A validated world and its seed database (serialized SQLite bytes)."""

    world: World
    seed: bytes
    form: Literal["file", "package"]
    path: Path
    digests: DigestCache = field(default_factory=DigestCache, compare=False, repr=False)
    """The seed's table digests, scanned once and shared by every runtime of this world."""
    checks: SeedChecks | None = field(default=None, compare=False, repr=False)
    """The seed's full-read checks still running (``load_world(..., background_checks=True)``), else None."""
    seed_sha256: str | None = field(default=None, compare=False, repr=False)
    """sha256 (hex) of :attr:`seed` when the loader already computed it (the package's checksum), else None."""
    copies: SeedCopies = field(default_factory=SeedCopies, compare=False, repr=False)
    """The seed's in-memory copies shared by its runtimes (:attr:`seed_copy`) or handed to the first one."""

    def check_failure(self) -> WorldFormatError | None:
        """Wait for the seed checks still running; their first failure, or None (also when none were running)."""
        return None if self.checks is None else self.checks.failure()

    @property
    def seed_digests(self) -> dict[str, TableDigest]:
        """Digests of the seed's tables (one scan per loaded world, whoever asks first)."""
        if self.digests.ready() is None:
            conn = open_memory_copy(self.seed)
            try:
                self.digests.get(conn, self.world.state.tables, strict_tables(conn))
            finally:
                conn.close()
        assert self.digests.value is not None
        return self.digests.value

    @cached_property
    def seed_state_hash(self) -> str:
        """Canonical state hash of the seed."""
        return state_hash(self.seed_digests)

    @cached_property
    def sha256(self) -> str:
        """Identity of the world, equal for both on-disk forms."""
        return sha256_hex(canonical_bytes({"world": world_document(self.world, None), "state": self.seed_state_hash}))

    @property
    def seed_copy(self) -> SeedCopy:
        """One read-only in-memory copy of the seed, made when first asked for and kept while this object lives:
        the pristine state of every runtime :meth:`runtime` makes, the build's entity lookups and a packaged seed's
        background checks read it."""
        return self.copies.shared(self.seed)

    def runtime(self, timeout_s: float = 2.0) -> WorldRuntime:
        """A fresh runtime for isolated episodes (sharing this world's seed digests and its read-only
        :attr:`seed_copy` for the starting state). Its working copy is its own: the loader's copy of the seed when
        the loader left one (``load_world(..., background_checks=True)``: the first runtime), else a new one."""
        return WorldRuntime(self.world, self.seed, timeout_s=timeout_s, digests=self.digests,
                            pristine=self.seed_copy, working=self.copies.take_spare())


def world_document(world: World, seed: str | None) -> dict[str, Any]:
    """The world as a JSON document without inline rows, pointing at ``seed`` (or nowhere).

    Fields left at their defaults are left out, so a world's identity does not change when the format
    gains an optional field (a default never changes what the world does).
    """
    document = world.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    document["state"].pop("rows", None)
    if seed is None:
        document["state"].pop("seed", None)
    else:
        document["state"]["seed"] = seed
    return document
