"""The SDK's REST shapes (``tinker.types.TrainingRun``, ``Checkpoint``) built from the store's rows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..store import ServiceStore
from . import tables
from .records import Checkpoint


def _time(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat()


def rest_checkpoint(checkpoint: Checkpoint) -> dict[str, Any]:
    """``tinker.types.Checkpoint``: ``checkpoint_id`` is ``weights/NAME`` or ``sampler_weights/NAME``."""
    return {"checkpoint_id": checkpoint.tinker_path.split("/", 3)[3], "checkpoint_type": checkpoint.kind,
            "time": _time(checkpoint.created_at), "tinker_path": checkpoint.tinker_path,
            "size_bytes": checkpoint.bytes, "public": False}


def rest_run(store: ServiceStore, workspace: str, run: dict[str, Any]) -> dict[str, Any]:
    """``tinker.types.TrainingRun`` of a run row, with its newest training and sampler checkpoints."""
    checkpoints = tables.list_checkpoints(store, workspace, run["model_id"])
    last = next((rest_checkpoint(c) for c in checkpoints if c.kind == "training"), None)
    last_sampler = next((rest_checkpoint(c) for c in checkpoints if c.kind == "sampler"), None)
    newest = max([run["created_at"], *(c.created_at for c in checkpoints)])
    return {"training_run_id": run["model_id"], "base_model": run["base_model"], "model_owner": run["owner"],
            "is_lora": True, "corrupted": False, "lora_rank": run["lora"]["rank"], "last_request_time": _time(newest),
            "last_checkpoint": last, "last_sampler_checkpoint": last_sampler}


def page(items: list[Any], limit: int, offset: int) -> tuple[list[Any], dict[str, int]]:
    """One page of ``items`` and the SDK's ``Cursor``."""
    return items[offset:offset + limit], {"offset": offset, "limit": limit, "total_count": len(items)}
