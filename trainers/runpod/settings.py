"""Deployment settings of the runpod target, read from ``BLOBKIT_RUNPOD_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainers.errors import ConfigError

from .api import DEFAULT_BASE_URL, RetryPolicy

DEFAULT_IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
"""A RunPod PyTorch image (CUDA 12.8, torch 2.8, Python 3) as used in RunPod's v2 API examples."""


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """Where job leases live: ``BLOBKIT_RUNPOD_STATE_DIR``, else ``$XDG_STATE_HOME/blobkit/runpod``."""
    if environ.get("BLOBKIT_RUNPOD_STATE_DIR"):
        return Path(environ["BLOBKIT_RUNPOD_STATE_DIR"])
    state_home = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "blobkit" / "runpod"


@dataclass(frozen=True)
class RunPodSettings:
    """Deployment settings of the runpod target (from ``BLOBKIT_RUNPOD_*`` variables; tests pass their own)."""

    api_url: str = DEFAULT_BASE_URL
    """RunPod API host (``BLOBKIT_RUNPOD_API_URL``)."""
    store_url: str | None = None
    """Transfer store base URL (``BLOBKIT_RUNPOD_STORE_URL``)."""
    store_token: str | None = field(default=None, repr=False)
    """Bearer token for the store (``BLOBKIT_RUNPOD_STORE_TOKEN``); also given to the pod."""
    image: str = DEFAULT_IMAGE
    """Container image (``BLOBKIT_RUNPOD_IMAGE``)."""
    cloud: str = "SECURE"
    """SECURE or COMMUNITY (``BLOBKIT_RUNPOD_CLOUD``)."""
    disk_gb: int = 80
    """Container disk in GB (``BLOBKIT_RUNPOD_DISK_GB``)."""
    install: bool = True
    """Ship this source tree and pip-install it on the pod (``BLOBKIT_RUNPOD_INSTALL=0`` when the image has blobkit)."""
    poll_seconds: float = 15.0
    """Seconds between status polls (``BLOBKIT_RUNPOD_POLL_SECONDS``)."""
    boot_timeout_seconds: float = 900.0
    """Terminate a pod that is not RUNNING this long after creation (``BLOBKIT_RUNPOD_BOOT_TIMEOUT``)."""
    network_grace_seconds: float = 600.0
    """Tolerate this long without reaching RunPod or the store before giving up."""
    pod_margin_seconds: float | None = None
    """The pod's watchdog fires this long before --max-hours (default: 5%, at most 300 s)."""
    state_dir: Path = field(default_factory=lambda: default_state_dir(os.environ))
    """Directory of job leases (``BLOBKIT_RUNPOD_STATE_DIR``)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of API and store requests."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunPodSettings:
        """Settings from ``BLOBKIT_RUNPOD_*`` environment variables, defaults elsewhere."""
        cloud = (environ.get("BLOBKIT_RUNPOD_CLOUD") or "SECURE").upper()
        if cloud not in ("SECURE", "COMMUNITY"):
            raise ConfigError(f"BLOBKIT_RUNPOD_CLOUD={cloud!r}: use SECURE or COMMUNITY")
        return cls(api_url=environ.get("BLOBKIT_RUNPOD_API_URL") or DEFAULT_BASE_URL,
                   store_url=environ.get("BLOBKIT_RUNPOD_STORE_URL") or None,
                   store_token=environ.get("BLOBKIT_RUNPOD_STORE_TOKEN") or None,
                   image=environ.get("BLOBKIT_RUNPOD_IMAGE") or DEFAULT_IMAGE, cloud=cloud,
                   disk_gb=int(_env_float(environ, "BLOBKIT_RUNPOD_DISK_GB", 80)),
                   install=environ.get("BLOBKIT_RUNPOD_INSTALL", "1") not in ("0", "false", "no"),
                   poll_seconds=_env_float(environ, "BLOBKIT_RUNPOD_POLL_SECONDS", 15.0),
                   boot_timeout_seconds=_env_float(environ, "BLOBKIT_RUNPOD_BOOT_TIMEOUT", 900.0),
                   state_dir=default_state_dir(environ))

    def pod_margin(self, max_seconds: float) -> float:
        """Seconds by which the pod's own watchdog precedes the host's --max-hours limit."""
        if self.pod_margin_seconds is not None:
            return min(self.pod_margin_seconds, max_seconds * 0.9)
        return min(300.0, max_seconds * 0.05)
