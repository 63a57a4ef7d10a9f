"""Reading and checking kits: directory or archive, every checksum, no unlisted files."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobkit.canonical import sha256_hex
from blobkit.errors import ChecksumError, KitError
from world_format.loader import LoadedWorld, load_world

from .archive import open_archive

KIT_FILE = "kit.json"
KIT_FORMAT = "blobkit-kit"
MAX_KIT_JSON_BYTES = 16 * 1024 * 1024


def file_table(files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file, by relative path (sorted)."""
    return {name: {"sha256": sha256_hex(data), "bytes": len(data)} for name, data in sorted(files.items())}


def _walk(root: Path) -> Iterator[str]:
    for directory, subdirs, names in os.walk(root, followlinks=False):
        subdirs.sort()
        for name in sorted(names) + [d for d in subdirs if (Path(directory) / d).is_symlink()]:
            path = Path(directory) / name
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise ChecksumError(f"{path}: not a regular file (links and special files are refused)")
            yield path.relative_to(root).as_posix()


@dataclass(frozen=True)
class Kit:
    """A verified kit directory: its kit.json and checked file contents on disk."""

    root: Path
    meta: dict[str, Any]

    def path(self, name: str) -> Path:
        """Absolute path of a listed file."""
        return self.root / name

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        """Parse a JSON Lines file of the kit."""
        text = self.path(name).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def world(self) -> LoadedWorld:
        """The packaged world inside the kit, loaded and validated."""
        return load_world(self.root / "world")

    @property
    def sha256(self) -> str:
        """Identity of the kit: sha256 of its kit.json."""
        return sha256_hex((self.root / KIT_FILE).read_bytes())


def verify_kit_dir(root: Path) -> Kit:
    """Check every listed file's sha256 and size, refuse unlisted files; all-or-nothing."""
    root = Path(root)
    kit_path = root / KIT_FILE
    if not kit_path.is_file() or kit_path.is_symlink():
        raise KitError(f"{root}: no {KIT_FILE}: not a kit (or an unfinished one)")
    data = kit_path.read_bytes()
    if len(data) > MAX_KIT_JSON_BYTES:
        raise KitError(f"{kit_path}: larger than {MAX_KIT_JSON_BYTES} bytes")
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KitError(f"{kit_path}: not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != KIT_FORMAT or not isinstance(meta.get("files"), dict):
        raise KitError(f"{kit_path}: not a {KIT_FORMAT} file")
    listed: dict[str, Any] = meta["files"]
    present = set(_walk(root)) - {KIT_FILE}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise ChecksumError(f"{root}: {unlisted[0]} is not listed in {KIT_FILE}")
    missing = sorted(set(listed) - present)
    if missing:
        raise ChecksumError(f"{root}: {missing[0]} is listed in {KIT_FILE} but missing")
    for name, entry in sorted(listed.items()):
        content = (root / name).read_bytes()
        if not isinstance(entry, dict) or len(content) != entry.get("bytes") or sha256_hex(content) != entry.get(
                "sha256"):
            raise ChecksumError(f"{root / name}: sha256 or size does not match {KIT_FILE}")
    return Kit(root, meta)


@contextmanager
def open_kit(path: Path) -> Iterator[Kit]:
    """A verified kit from a directory or a .tar.zst archive (extracted to a temp dir, removed after)."""
    path = Path(path)
    if path.is_dir():
        yield verify_kit_dir(path)
        return
    if not path.name.endswith(".tar.zst"):
        raise KitError(f"{path}: expected a kit directory or a .tar.zst kit archive")
    with open_archive(path) as root:
        yield verify_kit_dir(root)
