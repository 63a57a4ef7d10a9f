"""The base models a training job may name: the trainers' catalog, ``tiny``, and what workers advertise."""

from __future__ import annotations

import time

from blobkit.errors import UnknownBaseError

from .records import Record
from .store import ServiceStore

TINY = "tiny"
"""The offline tiny model a worker builds from the kit (as ``blobkit company train --base-model tiny``)."""
WORKER_SEEN_S = 600.0
"""A worker seen within this many seconds counts as connected."""


class CatalogModel(Record):
    """One accepted open-weight base."""

    id: str
    """Hub id (``Qwen/Qwen3-8B``)."""
    params_b: float
    """Parameters, in billions."""
    vram_lora_bf16_4k_gb: int
    """Approximate GPU memory for LoRA SFT at bf16 and 4k tokens, in GB."""
    vram_grpo_gb: int
    """Approximate GPU memory for LoRA GRPO, in GB."""
    offline: bool
    """Whether a copy ships in a registry package (usable without the hub)."""


class AdvertisedBases(Record):
    """The bases one connected worker said it can run."""

    worker_id: str
    """The worker."""
    name: str
    """Its name (the host, or what ``--name`` said)."""
    bases: list[str]
    """Base ids it advertised (catalog ids, ``tiny``, local models it holds)."""
    last_seen_at: float | None
    """Unix time of its last request."""


class ModelsList(Record):
    """``GET /api/v1/models``."""

    open_weight: list[CatalogModel]
    """The catalog."""
    workers: list[AdvertisedBases]
    """Connected workers of the caller's workspace and their bases."""


def catalog_ids() -> list[str]:
    """Every base a training job may name: the catalog's ids and ``tiny``."""
    from trainers.catalog import CATALOG

    return [entry.id for entry in CATALOG] + [TINY]


def check_base(base_model: str) -> str:
    """``base_model`` if accepted, else UnknownBaseError listing the accepted ids."""
    accepted = catalog_ids()
    if base_model not in accepted:
        error = UnknownBaseError(f"base_model {base_model!r} is not in the catalog; accepted: {', '.join(accepted)}")
        error.field, error.accepted = "base_model", accepted
        raise error
    return base_model


def models_list(store: ServiceStore, workspace: str) -> ModelsList:
    """The catalog and the workspace's connected workers' bases."""
    from trainers.catalog import CATALOG

    open_weight = [CatalogModel(id=e.id, params_b=e.params_b, vram_lora_bf16_4k_gb=e.vram_sft_gb,
                                vram_grpo_gb=e.vram_grpo_gb, offline=e.offline is not None) for e in CATALOG]
    rows = store.conn.execute("SELECT id, name, bases, last_seen_at FROM workers WHERE workspace = ? "
                              "AND last_seen_at >= ? ORDER BY id", (workspace, time.time() - WORKER_SEEN_S)).fetchall()
    workers = [AdvertisedBases(worker_id=wid, name=name, bases=store.cell(bases, f"worker {wid}", "bases") or [],
                               last_seen_at=seen) for wid, name, bases, seen in rows]
    return ModelsList(open_weight=open_weight, workers=workers)
