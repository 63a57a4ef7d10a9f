"""Finding and terminating leftover pods: ``blobkit-*`` pods that no live job owns.

Jobs hold a lease in ``BLOBKIT_RUNPOD_STATE_DIR`` while they run (:mod:`trainers.runpod.leases`);
their pods are left alone. Listing is free; terminating needs ``confirm`` (``blobkit runpod sweep --yes``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from trainers.errors import ConfigError

from .api import API_KEY_ENV, RunPodClient, RunPodError
from .leases import JobRegistry
from .pod import POD_PREFIX
from .settings import RunPodSettings, default_state_dir


def client_from_env(environ: Mapping[str, str]) -> RunPodClient:
    """A client for commands that only manage pods (no spend gate: they create nothing)."""
    if not environ.get(API_KEY_ENV):
        raise ConfigError(f"{API_KEY_ENV} is not set: export your RunPod API key to list or terminate pods")
    settings = RunPodSettings.from_env(environ)
    return RunPodClient(environ[API_KEY_ENV], settings.api_url, retry=settings.retry)


def sweep(client: RunPodClient, confirm: bool, *, registry: JobRegistry | None = None,
          prefix: str = POD_PREFIX) -> list[dict[str, Any]]:
    """Pods named ``blobkit-*`` that no live job owns; terminated only when ``confirm`` is true."""
    registry = registry or JobRegistry(default_state_dir(os.environ))
    found = []
    for pod in client.list_pods():
        name = str(pod.get("name", ""))
        if not name.startswith(prefix) or pod.get("status") == "TERMINATED" or registry.owns(name):
            continue
        entry = {"id": pod.get("id"), "name": name, "status": pod.get("status"), "cost_per_hour": pod.get("cost"),
                 "created_at": pod.get("createdAt"), "terminated": False}
        if confirm:
            try:
                client.terminate_pod(str(pod["id"]))
                entry["terminated"] = True
                registry.release(name)
            except RunPodError as exc:
                entry["error"] = str(exc)
        found.append(entry)
    return found


def sweep_from_env(environ: Mapping[str, str], confirm: bool) -> list[dict[str, Any]]:
    """:func:`sweep` with the key, API URL and lease directory from the environment."""
    with client_from_env(environ) as client:
        return sweep(client, confirm, registry=JobRegistry(default_state_dir(environ)))
