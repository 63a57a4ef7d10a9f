"""One pod's life: the create request, creating it exactly once, watching it, and terminating it.

Every pod is named ``blobkit-<job id>``, so a pod whose creation had an unknown outcome is found
again by its name (:func:`create_or_adopt` never makes two), and :func:`terminate` can end it
even when its id is unknown. :class:`Watch` polls until the pod's done.json is in the store,
enforcing the boot timeout, ``--max-hours``, cancellation and the network grace period.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.config import TrainConfig
from trainers.errors import TrainerError

from .api import RunPodClient, RunPodError, RunPodNotFoundError, RunPodRequestError, RunPodUnavailableError
from .bundle import Bundle
from .commands import POD_COMMAND, POD_PROGRAM, pod_steps
from .leases import JobRegistry
from .settings import RunPodSettings
from .store import HttpStore

Log = Callable[[str], None]
Stop = Callable[[], str | None]

POD_PREFIX = "blobkit-"
"""Name prefix of every pod blobkit creates (what the sweep looks for)."""
BOOTING = ("PROVISIONING", "STARTING")
ENDED = ("EXITED", "TERMINATED", "GONE")
MAX_DONE_BYTES = 1 << 20


@dataclass(frozen=True)
class Job:
    """One launch: its id, pod name and where its files go."""

    id: str
    work: Path

    @property
    def name(self) -> str:
        """The pod's name (unique per launch, so a pod can be found again after an unknown outcome)."""
        return f"{POD_PREFIX}{self.id}"


def new_job(out: Path) -> Job:
    """A fresh job id (UTC time plus random hex: unique, and sortable by launch time)."""
    return Job(f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}", Path(out) / "runpod")


def pod_body(job: Job, config: TrainConfig, settings: RunPodSettings, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``POST /v2/pods`` body: GPU, image, disk, the bootstrap command and the job in the environment."""
    env = {"BLOBKIT_JOB": json.dumps(spec, sort_keys=True), "BLOBKIT_POD_PROGRAM": POD_PROGRAM,
           "BLOBKIT_JOB_ID": job.id}
    if settings.store_token:
        env["BLOBKIT_STORE_TOKEN"] = settings.store_token
    return {"name": job.name, "image": settings.image,
            "gpu": {"id": config.runpod.gpu_type, "count": config.runpod.gpu_count},
            "cloud": settings.cloud, "disk": settings.disk_gb, "env": env, "args": POD_COMMAND}


def job_spec(job: Job, config: TrainConfig, settings: RunPodSettings, bundle: Bundle) -> dict[str, Any]:
    """What the pod program reads from ``BLOBKIT_JOB``: where things are, checksums, limits and steps."""
    max_seconds = config.runpod.max_hours * 3600 - settings.pod_margin(config.runpod.max_hours * 3600)
    return {"format": "blobkit-runpod-job/1", "job_id": job.id, "api_url": settings.api_url,
            "store_url": settings.store_url, "bundle_sha256": bundle.sha256, "max_seconds": round(max_seconds, 3),
            "deadline_epoch": round(time.time() + max_seconds, 3), "steps": pod_steps(settings)}


def find_pod(client: RunPodClient, name: str) -> dict[str, Any] | None:
    """The live pod called ``name``, if any."""
    return next((pod for pod in client.list_pods() if pod.get("name") == name
                 and pod.get("status") != "TERMINATED"), None)


def create_or_adopt(client: RunPodClient, body: Mapping[str, Any], log: Log, attempts: int = 3) -> dict[str, Any]:
    """Create the pod; when the outcome is unknown, adopt the pod of that name or try again (never two pods)."""
    name = str(body["name"])
    for _ in range(attempts):
        try:
            return client.create_pod(body)
        except RunPodUnavailableError as exc:
            log(f"runpod: creating {name} had an unknown outcome ({exc}); looking it up by name")
            found = find_pod(client, name)
            if found is not None:
                log(f"runpod: found {name} as pod {found.get('id')}; using it")
                return found
        except RunPodRequestError as exc:
            raise RunPodRequestError(f"{exc} (if RunPod has no capacity for {body['gpu']['id']}, try another "
                                     "--gpu-type, BLOBKIT_RUNPOD_CLOUD, or later)", exc.status) from None
    raise TrainerError(f"could not create RunPod pod {name} after {attempts} attempts; nothing is running")


def terminate(client: RunPodClient, pod_id: str | None, name: str, log: Log) -> bool:
    """Terminate the job's pod (looked up by name when its id is unknown); False when that failed."""
    try:
        if pod_id is None:
            found = find_pod(client, name)
            if found is None:
                return True
            pod_id = str(found["id"])
        ended_here = client.terminate_pod(pod_id)
        log(f"runpod: pod {pod_id} {'terminated' if ended_here else 'already gone'}")
        return True
    except RunPodError as exc:
        log(f"runpod: WARNING: could not terminate pod {pod_id or name}: {exc}. Its own watchdog stops it at "
            "--max-hours; run `blobkit runpod sweep --yes` to terminate it now.")
        return False


@dataclass
class Watch:
    """Polls a pod until its results are ready, enforcing the boot timeout, --max-hours and ``stop``."""

    client: RunPodClient
    store: HttpStore
    job: Job
    pod_id: str
    config: TrainConfig
    settings: RunPodSettings
    log: Log
    stop: Stop | None = None
    registry: JobRegistry | None = None
    created: float = field(default_factory=time.monotonic)
    seen_running: bool = False
    last_status: str | None = None
    trouble_since: float | None = None

    def run(self) -> dict[str, Any]:
        """Return the pod's done.json once it is there; raise TrainerError on any way of not getting it."""
        while True:
            self._check_limits()
            done = self._step()
            if done is not None:
                return done
            if self.registry is not None:
                self.registry.claim(self.job.name, pod_id=self.pod_id)
            time.sleep(self.settings.poll_seconds)

    def _check_limits(self) -> None:
        reason = self.stop() if self.stop is not None else None
        if reason:
            raise TrainerError(f"runpod run stopped ({reason}): terminating pod {self.pod_id}; no results collected")
        elapsed = time.monotonic() - self.created
        if elapsed >= self.config.runpod.max_hours * 3600:
            raise TrainerError(f"--max-hours {self.config.runpod.max_hours:g} reached: terminating pod {self.pod_id}; "
                               "raise --max-hours or lower --steps")
        if self.trouble_since is not None and time.monotonic() - self.trouble_since > \
                self.settings.network_grace_seconds:
            raise TrainerError(f"lost contact with RunPod or the transfer store for over "
                               f"{self.settings.network_grace_seconds:g} s; terminating pod {self.pod_id}")

    def _trouble(self, what: str, exc: Exception) -> None:
        if self.trouble_since is None:
            self.trouble_since = time.monotonic()
        self.log(f"runpod: {what} failed ({exc}); retrying")

    def _status(self) -> str | None:
        try:
            return str(self.client.get_pod(self.pod_id).get("status", "UNKNOWN"))
        except RunPodNotFoundError:
            return "GONE"
        except RunPodUnavailableError as exc:
            self._trouble("status poll", exc)
            return None

    def _step(self) -> dict[str, Any] | None:
        status = self._status()
        if status is None:
            return None
        if status != self.last_status:
            self.log(f"runpod: pod {self.pod_id} is {status}")
            self.last_status = status
        if status == "ERROR":
            raise TrainerError(f"pod {self.pod_id} went to ERROR{_log_excerpt(self.client, self.pod_id, self.job)}")
        self.seen_running = self.seen_running or status == "RUNNING"
        if status in BOOTING and not self.seen_running:
            self.trouble_since = None
            self._check_boot(status)
            return None
        return self._done_or_none(status)

    def _check_boot(self, status: str) -> None:
        if time.monotonic() - self.created > self.settings.boot_timeout_seconds:
            raise TrainerError(f"pod {self.pod_id} did not reach RUNNING within "
                               f"{self.settings.boot_timeout_seconds:g} s (still {status}); terminating it. "
                               f"RunPod may lack capacity for {self.config.runpod.gpu_type}: try another "
                               "--gpu-type or later")

    def _done_or_none(self, status: str) -> dict[str, Any] | None:
        try:
            raw = self.store.get_bytes(f"{self.job.id}/done.json", MAX_DONE_BYTES)
        except RunPodUnavailableError as exc:
            self._trouble("reading done.json", exc)
            return None
        self.trouble_since = None
        if raw is not None:
            return _parse_done(raw)
        if status in ENDED:
            raise TrainerError(f"pod {self.pod_id} ended ({status}) without leaving results (no done.json): it was "
                               "terminated from outside or crashed" + _log_excerpt(self.client, self.pod_id, self.job))
        return None


def _parse_done(raw: bytes) -> dict[str, Any]:
    try:
        done = json.loads(raw)
    except ValueError:
        raise TrainerError("the pod's done.json is not JSON") from None
    if not isinstance(done, dict):
        raise TrainerError("the pod's done.json is not a JSON object")
    return done


def _log_excerpt(client: RunPodClient, pod_id: str, job: Job, lines: int = 5) -> str:
    """The pod's last log lines (also saved to runpod/pod.log), as a message suffix; best effort."""
    try:
        tail = client.pod_logs(pod_id, tail=200, max_seconds=3.0)
    except RunPodError:
        return ""
    if not tail:
        return ""
    job.work.mkdir(parents=True, exist_ok=True)
    (job.work / "pod.log").write_text("\n".join(tail) + "\n", encoding="utf-8")
    return f"; last log lines: {' | '.join(tail[-lines:])} (full tail in {job.work / 'pod.log'})"
