"""A stored checkpoint as a blobkit export: what ``blobkit tinker checkpoints export`` writes."""

from __future__ import annotations

from pathlib import Path

from ..store import ServiceStore
from . import tables
from .bases import served_base
from .checkpoints import export_sampler, open_folder


def export_checkpoint(store: ServiceStore, workspace: str, tinker_path: str, out: Path) -> Path:
    """Export the adapter of ``tinker_path`` (a checkpoint of ``workspace``) to ``out``; returns ``out``.

    Raises NotFoundError for a path the workspace does not have, ChecksumError when its folder was changed.
    """
    from trainers.tinker_engine import read_session_file

    checkpoint = tables.get_checkpoint(store, workspace, tinker_path)
    folder = open_folder(store.root, checkpoint.sha256)
    lora, _ = read_session_file(folder)
    return export_sampler(folder, served_base(store, checkpoint.base_model), lora.rank, Path(out))
