"""The job bundle: everything the pod needs, in one reproducible ``.tar.gz`` (sorted members, zeroed metadata).

It holds the run's resolved config (``config.json``, with paths inside the bundle), the kit, the
``--init-adapter`` export, a local base model if one was given, custom ``--data`` rows and, unless
``BLOBKIT_RUNPOD_INSTALL=0``, this blobkit source tree (under ``src/``).
Every member lies under ``bundle/``; links and special files are refused, caches left out.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.config import TrainConfig
from trainers.errors import ConfigError
from trainers.plan_record import BaseRecord
from world_format.canonical import atomic_writer, canonical_bytes, file_sha256, jsonl_bytes
from world_format.kit import Kit

from .commands import CONFIG_FILE, pod_config
from .settings import RunPodSettings

SOURCE_MEMBERS = ("pyproject.toml", "README.md", "blobkit", "world_format", "trainers")
"""What of the source tree is shipped (and pip-installed on the pod)."""


@dataclass(frozen=True)
class Bundle:
    """The uploaded job bundle."""

    path: Path
    sha256: str
    bytes: int
    files: int


def _tree_files(root: Path, prefix: str) -> Iterator[tuple[str, Path]]:
    """Every regular file under ``root`` as (archive name, path); links and special files are refused."""
    if root.is_file():
        yield prefix, root
        return
    for directory, subdirs, names in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            path = Path(directory) / name
            if path.is_symlink() or not path.is_file():
                raise ConfigError(f"{path}: not a regular file (links and special files are not shipped)")
            if not name.endswith(".pyc"):
                yield f"{prefix}/{path.relative_to(root).as_posix()}", path


def source_root() -> Path:
    """The blobkit source tree this module runs from (shipped to the pod and pip-installed there)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "blobkit").is_dir():
        raise ConfigError("the blobkit source tree is not available to ship to the pod; use an image with blobkit "
                          "installed and set BLOBKIT_RUNPOD_INSTALL=0")
    return root


def _bundle_sources(config: TrainConfig, kit: Kit, base: BaseRecord,
                    settings: RunPodSettings) -> list[tuple[str, Path]]:
    assert config.init_adapter is not None
    sources = [("kit", kit.root), ("init_adapter", config.init_adapter)]
    if base.source in ("local", "registry"):
        sources.append(("base", Path(base.name_or_path)))
    if settings.install:
        root = source_root()
        sources += [(f"src/{name}", root / name) for name in SOURCE_MEMBERS if (root / name).exists()]
    return sources


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(f"bundle/{name}")
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = size, 0, 0o644, 0, 0, "", ""
    return info


def write_bundle(dest: Path, sources: list[tuple[str, Path]], extra: Mapping[str, bytes]) -> Bundle:
    """Write a reproducible ``.tar.gz`` of ``sources`` (plus in-memory ``extra`` files) atomically."""
    files = sorted([item for name, path in sources for item in _tree_files(path, name)] +
                   [(name, Path()) for name in extra])
    with atomic_writer(dest) as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as packed, \
                tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in files:
            if name in extra:
                tar.addfile(_tar_info(name, len(extra[name])), _BytesReader(extra[name]))
                continue
            with open(path, "rb") as handle:
                tar.addfile(_tar_info(name, os.fstat(handle.fileno()).st_size), handle)
    return Bundle(dest, file_sha256(dest), dest.stat().st_size, len(files))


class _BytesReader:
    """A minimal readable file over bytes (what tarfile.addfile needs)."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk, self._at = self._data[self._at:end], min(end, len(self._data))
        return chunk


def build_bundle(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], base: BaseRecord,
                 settings: RunPodSettings, dest: Path) -> Bundle:
    """Everything the pod needs, in one reproducible archive, with the config it trains with as config.json."""
    extra = {CONFIG_FILE: canonical_bytes(pod_config(config, base, settings).as_json()) + b"\n"}
    if config.data is not None:
        extra["data/rows.jsonl"] = jsonl_bytes(rows)
    return write_bundle(dest, _bundle_sources(config, kit, base, settings), extra)
