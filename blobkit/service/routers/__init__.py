"""The router registry: every resource's router and the prefix it is mounted at.

One module per resource, one line here per router. :func:`blobkit.service.app.create_app` mounts
:data:`ROUTERS` in order. A new API (the Tinker-compatible one at ``/tinker``, the Train panel's
pages at ``/``) is one module with an ``APIRouter`` plus one :class:`Mount` appended below (or with
:func:`register` from its own module); it reuses :func:`blobkit.service.auth.principal` and
:func:`blobkit.service.auth.get_store`, and appends its tables to
:data:`blobkit.service.migrations.MIGRATIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter

from ..panel import router as panel
from ..tinker import router as tinker
from . import all_jobs, attempts, environments, models, training_jobs, workers


@dataclass(frozen=True)
class Mount:
    """A router and the path prefix it is mounted under."""

    prefix: str
    router: APIRouter


ROUTERS: list[Mount] = [
    Mount("/api/v1", models.router),
    Mount("/api/v1", environments.router),
    Mount("/api/v1", training_jobs.router),
    Mount("/api/v1", all_jobs.router),
    Mount("/api/v1", workers.router),
    Mount("/api/v1", attempts.router),
    Mount("/tinker/api/v1", tinker.router),
    Mount("", panel.router),
]
"""Every router of the service, in mount order."""


def register(mount: Mount) -> Mount:
    """Append ``mount`` to :data:`ROUTERS` (once)."""
    if mount not in ROUTERS:
        ROUTERS.append(mount)
    return mount
