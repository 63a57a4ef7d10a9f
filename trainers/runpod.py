"""The ``runpod`` target: GRPO on a rented GPU pod, behind a spend gate, never left billing.

Spend gate
    Nothing is created unless ``RUNPOD_API_KEY`` is set *and* ``--confirm-spend`` is given
    (:func:`check_spend_gate`); the refusal says what would be launched and its estimated
    maximum cost. ``--dry-run`` writes the same facts into plan.json (:func:`launch_plan`). The
    hourly price is RunPod's catalog list price (``GET /v2/catalog/gpus``) times the GPU count,
    and the estimate is that rate for the whole ``--max-hours`` (GPU time only; container disk
    and the transfer store are not included). Without a key the catalog cannot be read and the
    plan says so instead of guessing a price. Only GRPO runs here, warm-started from an SFT
    export (``--init-adapter``); SFT runs locally first.

Transfer (documented, checksummed both ways)
    RunPod pods cannot reach this machine, so files travel through an HTTP object store that
    both sides can reach: ``BLOBKIT_RUNPOD_STORE_URL`` (any server that stores a ``PUT`` body
    and returns it on ``GET`` — a WebDAV share such as ``rclone serve webdav``, nginx with
    ``dav_methods PUT``, or an S3/R2 bucket behind a gateway that accepts a bearer token),
    optionally with ``BLOBKIT_RUNPOD_STORE_TOKEN`` sent as ``Authorization: Bearer``. This is the
    honest choice: environment variables cannot carry megabytes, SSH needs keys registered
    with the account and a public port, and a RunPod network volume's S3 API needs a second
    key and request signing. Objects live under ``{store}/{job_id}/``:

    1. The host writes ``bundle.tar.gz`` (reproducible: sorted members, zeroed metadata) holding
       the kit, the ``--init-adapter`` export, a local base model if one was given, custom
       ``--data`` rows and, unless ``BLOBKIT_RUNPOD_INSTALL=0``, this blobkit source tree;
       uploads it; and passes its sha256 to the pod in ``BLOBKIT_JOB``.
    2. The pod (:data:`POD_PROGRAM`, stdlib only) downloads the bundle and refuses it unless
       its sha256 matches, installs blobkit, runs ``blobkit train --method grpo --target
       local-torch --init-adapter init_adapter ...``, packs ``out/`` with
       :func:`pack_results` into ``results.tar.zst`` (blobkit's reproducible archive) and
       uploads it, then ``train.log`` and last ``done.json`` (status, the bundle sha256 it
       verified, the results' sha256 and size).
    3. The host reads ``done.json``, checks that the pod verified *this* bundle, downloads the
       results, refuses them unless the sha256 matches, and unpacks them with blobkit's hardened
       extractor into ``--out`` (the pod's plan.json is kept as ``runpod/pod_plan.json``).

    The checksums catch corruption and mix-ups between jobs; they do not defend against a
    store that is itself hostile — use a store you control.

Never left billing
    * a boot timeout terminates a pod that does not reach RUNNING;
    * ``--max-hours`` is enforced by the pod (a watchdog in :data:`POD_PROGRAM` terminates the
      pod through RunPod's API with the pod-scoped key RunPod injects, a little before the
      limit; training itself is given a ``--max-minutes`` budget inside that) and by the host
      (it terminates the pod when the limit passes);
    * Ctrl-C, errors and cancellation (``stop()`` returning a reason) terminate the pod in a
      ``finally``; a pod whose creation had an unknown outcome is found by its unique name;
    * every pod is named ``blobkit-<job id>``, and while a job runs it holds a lease file in
      ``BLOBKIT_RUNPOD_STATE_DIR``; :func:`sweep` lists blobkit pods that no live job owns and
      terminates them only when confirmed (``blobkit runpod sweep --yes``).

Network drops while polling are retried by the client; longer outages are tolerated for
``network_grace_seconds`` before the host gives up (and still tries to terminate).
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import shutil
import socket
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from trainers.errors import ConfigError, SpendGateError, TrainerError
from world_format.canonical import atomic_write_json, atomic_writer, file_sha256, fsync_dir, jsonl_bytes
from world_format.errors import ChecksumError
from world_format.kit import Kit

from .config import TrainConfig
from .runpod_api import (
    API_KEY_ENV,
    DEFAULT_BASE_URL,
    RetryPolicy,
    RunPodClient,
    RunPodError,
    RunPodNotFoundError,
    RunPodRequestError,
    RunPodUnavailableError,
    Sleep,
    send_with_retries,
)

Log = Callable[[str], None]
Stop = Callable[[], str | None]

POD_PREFIX = "blobkit-"
"""Name prefix of every pod blobkit creates (what :func:`sweep` looks for)."""
DEFAULT_IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
"""A RunPod PyTorch image (CUDA 12.8, torch 2.8, Python 3) as used in RunPod's v2 API examples."""
POD_COMMAND = "python3 -c \"import os; exec(os.environ['BLOBKIT_POD_PROGRAM'])\""
"""The container command (``args`` of the create request): run the bootstrap carried in the env."""
BOOTING = ("PROVISIONING", "STARTING")
ENDED = ("EXITED", "TERMINATED", "GONE")
LEASE_TTL_SECONDS = 600.0
MAX_RESULTS_BYTES = 64 << 30
MAX_DONE_BYTES = 1 << 20
SOURCE_MEMBERS = ("pyproject.toml", "README.md", "blobkit", "world_format", "trainers")


# --------------------------------------------------------------------------- settings


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


# --------------------------------------------------------------------------- price, plan, gate


@dataclass(frozen=True)
class PriceQuote:
    """An hourly price for the planned pod and where it came from."""

    per_gpu_usd: float | None
    """List price of one GPU-hour, or None when unknown."""
    gpu_count: int
    """GPUs in the pod."""
    source: str
    """Where the price came from, or why it is unknown."""

    @property
    def hourly_usd(self) -> float | None:
        """Price of one pod-hour."""
        return None if self.per_gpu_usd is None else round(self.per_gpu_usd * self.gpu_count, 4)

    def max_cost_usd(self, hours: float) -> float | None:
        """Price of ``hours`` pod-hours (GPU time only)."""
        return None if self.hourly_usd is None else round(self.hourly_usd * hours, 2)


def price_from_catalog(gpus: list[dict[str, Any]], config: TrainConfig, settings: RunPodSettings) -> PriceQuote:
    """The list price of ``config.gpu_type`` in the chosen cloud; ConfigError when it cannot be launched."""
    entry = next((gpu for gpu in gpus if gpu.get("id") == config.gpu_type), None)
    if entry is None:
        known = ", ".join(sorted(str(gpu.get("id")) for gpu in gpus)[:20])
        raise ConfigError(f"--gpu-type {config.gpu_type!r} is not in RunPod's GPU catalog; ids include: {known}")
    cloud = settings.cloud.lower()
    if entry.get(cloud) is False:
        other = "COMMUNITY" if cloud == "secure" else "SECURE"
        raise ConfigError(f"{config.gpu_type} is not offered on RunPod's {settings.cloud} cloud; choose another "
                          f"--gpu-type or set BLOBKIT_RUNPOD_CLOUD={other}")
    max_count = (entry.get("maxCount") or {}).get(cloud)
    if isinstance(max_count, int) and config.gpu_count > max_count:
        raise ConfigError(f"--gpu-count {config.gpu_count}: RunPod's largest {config.gpu_type} machine on the "
                          f"{settings.cloud} cloud has {max_count} GPUs")
    price = (entry.get("price") or {}).get(cloud)
    if isinstance(price, bool) or not isinstance(price, int | float) or price <= 0:
        return PriceQuote(None, config.gpu_count, f"unavailable: the catalog lists no {cloud} price for "
                                                  f"{config.gpu_type}")
    return PriceQuote(float(price), config.gpu_count,
                      f"RunPod GPU catalog (GET {settings.api_url}/v2/catalog/gpus), {cloud} cloud list price "
                      "per GPU-hour; the rate actually billed is the pod's own 'cost'")


def quote_price(config: TrainConfig, settings: RunPodSettings, environ: Mapping[str, str]) -> PriceQuote:
    """Read the price from RunPod's catalog (free, read-only); say why when that is not possible."""
    key = environ.get(API_KEY_ENV)
    if not key:
        return PriceQuote(None, config.gpu_count, f"unavailable: {API_KEY_ENV} is not set (RunPod's catalog "
                                                  "needs an API key)")
    try:
        with RunPodClient(key, settings.api_url, retry=settings.retry, timeout=20.0) as client:
            gpus = client.gpu_types()
    except RunPodError as exc:
        return PriceQuote(None, config.gpu_count, f"unavailable: {exc}")
    return price_from_catalog(gpus, config, settings)


def _quote_from_plan(plan_record: Mapping[str, Any], config: TrainConfig) -> PriceQuote | None:
    entry = plan_record.get("runpod")
    if not isinstance(entry, dict) or entry.get("gpu_type") != config.gpu_type:
        return None
    per_gpu = entry.get("price_per_gpu_usd")
    price = float(per_gpu) if isinstance(per_gpu, int | float) and not isinstance(per_gpu, bool) else None
    return PriceQuote(price, config.gpu_count, str(entry.get("price_source", "plan.json")))


def describe_launch(config: TrainConfig, settings: RunPodSettings, quote: PriceQuote) -> str:
    """One sentence: what would be launched, for how long, and what it would cost at most."""
    what = (f"{config.gpu_count} x {config.gpu_type} pod on RunPod's {settings.cloud} cloud (image "
            f"{settings.image}, {settings.disk_gb} GB disk) for at most {config.max_hours:g} h")
    cost = quote.max_cost_usd(config.max_hours)
    if cost is None:
        return f"{what}; estimated maximum cost unknown (price {quote.source}): at most {config.max_hours:g} h " \
               "times the pod's hourly price"
    return f"{what} at ${quote.hourly_usd:.2f}/h, estimated maximum cost ${cost:.2f} (price: {quote.source})"


def missing_for_launch(config: TrainConfig, settings: RunPodSettings, environ: Mapping[str, str]) -> list[str]:
    """What still stands between this configuration and a launch (empty when it can launch)."""
    missing = []
    if not environ.get(API_KEY_ENV):
        missing.append(f"{API_KEY_ENV} (RunPod API key)")
    if not config.confirm_spend:
        missing.append("--confirm-spend")
    if config.method != "grpo":
        missing.append("--method grpo (SFT runs locally first)")
    if config.init_adapter is None:
        missing.append("--init-adapter (the export of a local SFT run)")
    if not settings.store_url:
        missing.append("BLOBKIT_RUNPOD_STORE_URL (transfer store the pod can reach)")
    return missing


def gate_spend(config: TrainConfig, environ: Mapping[str, str]) -> None:
    """The spend gate with the catalog price when it can be read: run before anything is written."""
    quote = quote_price(config, RunPodSettings.from_env(environ), environ)
    check_spend_gate(config, environ, quote)


def check_spend_gate(config: TrainConfig, environ: Mapping[str, str], quote: PriceQuote | None = None) -> None:
    """Refuse (SpendGateError) unless RUNPOD_API_KEY is set and --confirm-spend was given; creates nothing."""
    reasons = []
    if not environ.get(API_KEY_ENV):
        reasons.append(f"{API_KEY_ENV} is not set")
    if not config.confirm_spend:
        reasons.append("--confirm-spend was not given")
    if not reasons:
        return
    settings = RunPodSettings.from_env(environ)
    quote = quote or PriceQuote(None, config.gpu_count, "unavailable: not looked up")
    raise SpendGateError(f"refusing to spend money on RunPod: {' and '.join(reasons)}. This run would launch a "
                         f"{describe_launch(config, settings, quote)}. Nothing was created. Check the plan with "
                         f"--dry-run, then set {API_KEY_ENV} and pass --confirm-spend.")


def _train_budget_minutes(config: TrainConfig, settings: RunPodSettings) -> float:
    max_seconds = config.max_hours * 3600
    budget = (max_seconds - settings.pod_margin(max_seconds)) * 0.85 / 60
    return max(0.01, round(min(budget, config.max_minutes) if config.max_minutes else budget, 2))


def pod_train_args(config: TrainConfig, plan_record: Mapping[str, Any], settings: RunPodSettings) -> list[str]:
    """The ``blobkit train`` arguments the pod runs (paths relative to the unpacked bundle)."""
    local_base = (plan_record.get("base") or {}).get("source") == "local"
    args = ["train", "--kit", "kit", "--base", "base" if local_base else config.base, "--method", "grpo",
            "--target", "local-torch", "--out", "out", "--init-adapter", "init_adapter",
            "--lora-rank", str(config.lora_rank), "--steps", str(config.steps), "--seed", str(config.seed),
            "--lr", repr(config.learning_rate), "--batch-size", str(config.batch_size),
            "--max-length", str(config.max_length), "--max-turns", str(config.max_turns),
            "--max-new-tokens", str(config.max_new_tokens), "--group-size", str(config.group_size),
            "--temperature", repr(config.temperature),
            "--max-minutes", repr(_train_budget_minutes(config, settings)), "--json"]
    if config.eval_limit is not None:
        args += ["--eval-limit", str(config.eval_limit)]
    if config.max_model_calls is not None:
        args += ["--max-model-calls", str(config.max_model_calls)]
    if config.full:
        args.append("--full")
    if config.data is not None:
        args += ["--data", "data/rows.jsonl"]
    return args


def pod_steps(config: TrainConfig, plan_record: Mapping[str, Any], settings: RunPodSettings) -> list[dict[str, Any]]:
    """The commands the pod runs in the unpacked bundle, in order (``{python}`` is the pod's Python)."""
    steps = []
    if settings.install:
        steps.append({"name": "install", "argv": ["{python}", "-m", "pip", "install", "--quiet", "./src[train]"]})
    steps.append({"name": "train", "argv": ["{python}", "-m", "blobkit.cli", *pod_train_args(config, plan_record,
                                                                                             settings)]})
    steps.append({"name": "pack", "argv": ["{python}", "-m", "trainers.runpod", "pack-results", "out",
                                           "results.tar.zst", "results.json"]})
    return steps


def launch_plan(config: TrainConfig, kit: Kit, plan_record: dict[str, Any]) -> dict[str, Any]:
    """The launch facts for plan.json: GPU, image, command, disk, limits, price and its source, max cost."""
    environ = os.environ
    settings = RunPodSettings.from_env(environ)
    quote = quote_price(config, settings, environ)
    max_seconds = config.max_hours * 3600
    return {
        "api": f"{settings.api_url}/v2", "gpu_type": config.gpu_type, "gpu_count": config.gpu_count,
        "cloud": settings.cloud, "image": settings.image, "disk_gb": settings.disk_gb,
        "start_command": POD_COMMAND, "pod_steps": [step["argv"] for step in pod_steps(config, plan_record, settings)],
        "max_hours": config.max_hours, "boot_timeout_seconds": settings.boot_timeout_seconds,
        "pod_self_terminates_after_seconds": round(max_seconds - settings.pod_margin(max_seconds), 1),
        "price_per_gpu_usd": quote.per_gpu_usd, "hourly_price_usd": quote.hourly_usd,
        "price_source": quote.source, "estimated_max_cost_usd": quote.max_cost_usd(config.max_hours),
        "cost_note": "GPU time at list price for the whole --max-hours; disk and the transfer store not included",
        "transfer": {"store": _redact(settings.store_url) if settings.store_url else None,
                     "to_pod": "bundle.tar.gz (kit, init adapter, source), sha256 checked on the pod",
                     "from_pod": "results.tar.zst, sha256 from done.json checked here"},
        "kit_sha256": kit.sha256, "missing": missing_for_launch(config, settings, environ),
    }


# --------------------------------------------------------------------------- bundle


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
    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file() or not (root / "blobkit").is_dir():
        raise ConfigError("the blobkit source tree is not available to ship to the pod; use an image with blobkit "
                          "installed and set BLOBKIT_RUNPOD_INSTALL=0")
    return root


def _bundle_sources(config: TrainConfig, kit: Kit, plan_record: Mapping[str, Any],
                    settings: RunPodSettings) -> list[tuple[str, Path]]:
    assert config.init_adapter is not None
    sources = [("kit", kit.root), ("init_adapter", config.init_adapter)]
    base = plan_record.get("base") or {}
    if base.get("source") == "local":
        sources.append(("base", Path(base["name_or_path"])))
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


def build_bundle(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: Mapping[str, Any],
                 settings: RunPodSettings, dest: Path) -> Bundle:
    """Everything the pod needs, in one reproducible archive."""
    extra = {"data/rows.jsonl": jsonl_bytes(rows)} if config.data is not None else {}
    return write_bundle(dest, _bundle_sources(config, kit, plan_record, settings), extra)


# --------------------------------------------------------------------------- transfer store


def _redact(url: str) -> str:
    """A URL without user info, query or fragment (where presigned secrets would live)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class HttpStore:
    """Objects at ``{base}/{key}``: uploaded with PUT, read with GET, optional bearer token."""

    def __init__(self, base_url: str, token: str | None, *, retry: RetryPolicy, sleep: Sleep = time.sleep,
                 timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._retry, self._sleep = retry, sleep
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout), headers=headers)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def url(self, key: str) -> str:
        """The full URL of an object."""
        return f"{self.base_url}/{key}"

    def _fail(self, response: httpx.Response, what: str, key: str) -> TrainerError:
        return TrainerError(f"transfer store: {what} {_redact(self.url(key))} failed: HTTP {response.status_code} "
                            f"{response.reason_phrase}")

    def put_file(self, key: str, path: Path) -> None:
        """Upload a file (streamed; re-opened for every retry)."""
        def body() -> Iterator[bytes]:
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    yield block

        response = send_with_retries(self._http, "PUT", self.url(key), policy=self._retry, sleep=self._sleep,
                                     idempotent=True, content_factory=body,
                                     headers={"Content-Length": str(path.stat().st_size),
                                              "Content-Type": "application/octet-stream"})
        if response.status_code >= 300:
            raise self._fail(response, "upload to", key)

    def get_bytes(self, key: str, max_bytes: int) -> bytes | None:
        """A small object's bytes, or None when it does not exist (404)."""
        response = send_with_retries(self._http, "GET", self.url(key), policy=self._retry, sleep=self._sleep,
                                     idempotent=True)
        if response.status_code == 404:
            return None
        if response.status_code >= 300:
            raise self._fail(response, "download from", key)
        if len(response.content) > max_bytes:
            raise TrainerError(f"transfer store: {_redact(self.url(key))} is larger than {max_bytes} bytes")
        return response.content

    def get_file(self, key: str, dest: Path, max_bytes: int) -> None:
        """Download an object to ``dest`` (streamed, size-capped, atomic)."""
        for attempt in range(self._retry.attempts):
            try:
                self._stream_to(key, dest, max_bytes)
                return
            except (httpx.TransportError, RunPodUnavailableError) as exc:
                if attempt + 1 == self._retry.attempts:
                    raise TrainerError(f"transfer store: download of {_redact(self.url(key))} failed: {exc}") from None
                self._sleep(self._retry.backoff(attempt))

    def _stream_to(self, key: str, dest: Path, max_bytes: int) -> None:
        with self._http.stream("GET", self.url(key)) as response:
            if response.status_code == 429 or response.status_code >= 500:
                raise RunPodUnavailableError(f"HTTP {response.status_code}")
            if response.status_code >= 300:
                raise self._fail(response, "download from", key)
            written = 0
            with atomic_writer(dest) as out:
                for block in response.iter_bytes(1 << 20):
                    written += len(block)
                    if written > max_bytes:
                        raise TrainerError(f"transfer store: {_redact(self.url(key))} exceeds {max_bytes} bytes")
                    out.write(block)


# --------------------------------------------------------------------------- job leases


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobRegistry:
    """One lease file per running job (named like its pod): what :func:`sweep` must leave alone."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def claim(self, name: str, **fields: Any) -> None:
        """Create or refresh the lease of job ``name`` (pid, host and a heartbeat time)."""
        atomic_write_json(self._path(name), {"name": name, "pid": os.getpid(), "host": socket.gethostname(),
                                             "heartbeat": time.time(), **fields})

    def release(self, name: str) -> None:
        """Drop the lease (the pod is gone)."""
        self._path(name).unlink(missing_ok=True)

    def owns(self, name: str) -> bool:
        """True when a live job holds the lease: its process runs on this host, or another host renewed it lately."""
        try:
            lease = json.loads(self._path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if lease.get("host") == socket.gethostname():
            return isinstance(lease.get("pid"), int) and _pid_alive(lease["pid"])
        heartbeat = lease.get("heartbeat")
        return isinstance(heartbeat, int | float) and time.time() - heartbeat < LEASE_TTL_SECONDS


# --------------------------------------------------------------------------- pod lifecycle


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
    return {"name": job.name, "image": settings.image, "gpu": {"id": config.gpu_type, "count": config.gpu_count},
            "cloud": settings.cloud, "disk": settings.disk_gb, "env": env, "args": POD_COMMAND}


def job_spec(job: Job, config: TrainConfig, plan_record: Mapping[str, Any], settings: RunPodSettings,
             bundle: Bundle) -> dict[str, Any]:
    """What the pod program reads from ``BLOBKIT_JOB``: where things are, checksums, limits and steps."""
    max_seconds = config.max_hours * 3600 - settings.pod_margin(config.max_hours * 3600)
    return {"format": "blobkit-runpod-job/1", "job_id": job.id, "api_url": settings.api_url,
            "store_url": settings.store_url, "bundle_sha256": bundle.sha256, "max_seconds": round(max_seconds, 3),
            "deadline_epoch": round(time.time() + max_seconds, 3), "steps": pod_steps(config, plan_record, settings)}


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
        if elapsed >= self.config.max_hours * 3600:
            raise TrainerError(f"--max-hours {self.config.max_hours:g} reached: terminating pod {self.pod_id}; "
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
                               f"RunPod may lack capacity for {self.config.gpu_type}: try another --gpu-type or later")

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


# --------------------------------------------------------------------------- results


def _fetch_train_log(store: HttpStore, job: Job) -> str:
    try:
        store.get_file(f"{job.id}/train.log", job.work / "train.log", 256 << 20)
    except TrainerError:
        return ""
    lines = (job.work / "train.log").read_text(encoding="utf-8", errors="replace").splitlines()
    return f"; last log lines: {' | '.join(lines[-5:])} (full log in {job.work / 'train.log'})" if lines else ""


def _install_results(archive: Path, out: Path, work: Path) -> None:
    """Unpack the pod's ``out/`` into ``out`` with the hardened extractor (pod plan.json → runpod/pod_plan.json)."""
    from world_format.archive import extract_tar_zst, extracted_root_cleanup

    root = extract_tar_zst(archive, dest_parent=work)
    try:
        if not (root / "eval.json").is_file():
            raise TrainerError(f"{archive}: the pod's results have no eval.json; nothing was installed")
        for entry in sorted(root.iterdir()):
            if entry.name == work.name:
                continue
            target = work / "pod_plan.json" if entry.name == "plan.json" else out / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            os.replace(entry, target)
    finally:
        extracted_root_cleanup(root)
    fsync_dir(out)


def collect_results(store: HttpStore, job: Job, done: Mapping[str, Any], bundle: Bundle,
                    out: Path) -> dict[str, Any]:
    """Verify done.json against the bundle, download and verify the results, unpack them; return eval.json."""
    if done.get("bundle_sha256") != bundle.sha256:
        raise ChecksumError(f"the pod checked a bundle with sha256 {done.get('bundle_sha256')}, but this job uploaded "
                            f"{bundle.sha256}; results refused")
    log_hint = _fetch_train_log(store, job)
    if done.get("status") != "ok":
        raise TrainerError(f"training on the pod failed: {done.get('error', 'no reason given')}{log_hint}")
    results = done.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("sha256"), str):
        raise TrainerError("the pod's done.json lists no results checksum")
    archive = job.work / "results.tar.zst"
    store.get_file(f"{job.id}/results.tar.zst", archive, MAX_RESULTS_BYTES)
    digest = file_sha256(archive)
    if digest != results["sha256"]:
        raise ChecksumError(f"{archive}: sha256 {digest} does not match {results['sha256']} reported by the pod")
    _install_results(archive, out, job.work)
    try:
        report = json.loads((out / "eval.json").read_text(encoding="utf-8"))
        assert isinstance(report, dict)
    except (OSError, ValueError, AssertionError) as exc:
        raise TrainerError(f"the pod's results have no readable eval.json: {exc}") from None
    return {**report, "results_sha256": digest}


# --------------------------------------------------------------------------- the target


def require_runnable(config: TrainConfig) -> Path:
    """GRPO warm-started from an existing SFT export; returns the adapter directory."""
    if config.method != "grpo":
        raise ConfigError("runpod runs GRPO only: train SFT locally first (--target local-torch or local-mlx), then "
                          "pass its export with --init-adapter to --method grpo --target runpod")
    if config.init_adapter is None:
        raise ConfigError("runpod needs --init-adapter: the export of a local SFT run (e.g. out/sft/export), which "
                          "GRPO warm-starts from")
    if not Path(config.init_adapter).is_dir():
        raise ConfigError(f"--init-adapter {config.init_adapter}: not a directory (expected an SFT run's export)")
    return Path(config.init_adapter)


def _run_record(job: Job, pod_id: str, config: TrainConfig, quote: PriceQuote, bundle: Bundle,
                started: float) -> dict[str, Any]:
    seconds = round(time.monotonic() - started, 1)
    cost = None if quote.hourly_usd is None else round(quote.hourly_usd * seconds / 3600, 4)
    return {"job_id": job.id, "pod_id": pod_id, "pod_name": job.name, "gpu_type": config.gpu_type,
            "gpu_count": config.gpu_count, "hourly_price_usd": quote.hourly_usd, "seconds": seconds,
            "estimated_cost_usd": cost, "bundle_sha256": bundle.sha256}


def _run_job(client: RunPodClient, store: HttpStore, job: Job, bundle: Bundle, config: TrainConfig,
             plan_record: Mapping[str, Any], settings: RunPodSettings, quote: PriceQuote, log: Log,
             stop: Stop | None) -> dict[str, Any]:
    registry = JobRegistry(settings.state_dir)
    registry.claim(job.name, pod_id=None)
    pod_id: str | None = None
    try:
        log(f"runpod: uploading bundle ({bundle.bytes} bytes, sha256 {bundle.sha256[:12]}...) to the store")
        store.put_file(f"{job.id}/bundle.tar.gz", bundle.path)
        log(f"runpod: launching {describe_launch(config, settings, quote)}")
        started = time.monotonic()
        pod = create_or_adopt(client, pod_body(job, config, settings, job_spec(job, config, plan_record, settings,
                                                                               bundle)), log)
        pod_id = str(pod["id"])
        registry.claim(job.name, pod_id=pod_id)
        atomic_write_json(job.work / "job.json", {"job_id": job.id, "pod_id": pod_id, "pod_name": job.name,
                                                  "bundle_sha256": bundle.sha256})
        done = Watch(client, store, job, pod_id, config, settings, log, stop, registry, created=started).run()
        report = collect_results(store, job, done, bundle, config.out)
        record = {**_run_record(job, pod_id, config, quote, bundle, started), "results_sha256": report.pop(
            "results_sha256")}
        atomic_write_json(job.work / "run.json", record)
        return {**report, "runpod": record}
    finally:
        if terminate(client, pod_id, job.name, log):
            registry.release(job.name)


def train_runpod(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: dict[str, Any],
                 log: Log, stop: Stop | None = None, *, settings: RunPodSettings | None = None,
                 environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run GRPO on a RunPod pod and return the pod's eval.json record (plus a ``runpod`` section).

    Gates spend first (nothing is created on refusal), ships the bundle, creates the pod and
    watches it, collects verified results, and terminates the pod whatever happens.
    """
    environ = os.environ if environ is None else environ
    settings = settings or RunPodSettings.from_env(environ)
    require_runnable(config)
    quote = _quote_from_plan(plan_record, config)
    if (quote is None or quote.per_gpu_usd is None) and environ.get(API_KEY_ENV):
        quote = quote_price(config, settings, environ)
    check_spend_gate(config, environ, quote)
    if not settings.store_url:
        raise ConfigError("set BLOBKIT_RUNPOD_STORE_URL to an HTTP store (PUT/GET) that this machine and the pod "
                          "can both reach; it carries the kit to the pod and the results back")
    quote = quote or PriceQuote(None, config.gpu_count, "unavailable")
    job = new_job(config.out)
    bundle = build_bundle(config, kit, rows, plan_record, settings, job.work / "bundle.tar.gz")
    store = HttpStore(settings.store_url, settings.store_token, retry=settings.retry)
    client = RunPodClient(environ[API_KEY_ENV], settings.api_url, retry=settings.retry)
    try:
        return _run_job(client, store, job, bundle, config, plan_record, settings, quote, log, stop)
    finally:
        store.close()
        client.close()


# --------------------------------------------------------------------------- sweep


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


# --------------------------------------------------------------------------- pod side


def pack_results(out_dir: Path, archive: Path, record: Path) -> dict[str, Any]:
    """On the pod: archive ``out_dir`` reproducibly and write its sha256 and size to ``record``."""
    from world_format.archive import write_tar_zst

    digest, size = write_tar_zst(Path(out_dir), Path(archive), "out")
    result = {"name": Path(archive).name, "sha256": digest, "bytes": size}
    atomic_write_json(Path(record), result)
    return result


def main(argv: list[str]) -> int:
    """``python -m trainers.runpod pack-results OUT_DIR ARCHIVE RECORD`` (run by the pod program)."""
    if len(argv) == 4 and argv[0] == "pack-results":
        pack_results(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        return 0
    print("usage: python -m trainers.runpod pack-results OUT_DIR ARCHIVE RECORD", file=sys.stderr)
    return 2


POD_PROGRAM = r'''
"""blobkit pod program (stdlib only): verified bundle in, train, verified results out, then terminate this pod."""
import hashlib, json, os, shutil, subprocess, sys, tarfile, threading, time, urllib.error, urllib.request

JOB = json.loads(os.environ["BLOBKIT_JOB"])
STARTED = time.time()


def say(text):
    print("[blobkit-pod] " + text, flush=True)


def retrying(action, what, attempts=6):
    error = None
    for attempt in range(attempts):
        try:
            return action()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise
            error = exc
        except (urllib.error.URLError, OSError) as exc:
            error = exc
        if attempt + 1 < attempts:
            say(f"{what}: {error}; retrying")
            time.sleep(min(30, 2 ** attempt * 0.5))
    raise RuntimeError(f"{what}: gave up: {error}")


def store_request(name, method="GET", data=None, size=None):
    headers = {}
    if os.environ.get("BLOBKIT_STORE_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["BLOBKIT_STORE_TOKEN"]
    if size is not None:
        headers.update({"Content-Length": str(size), "Content-Type": "application/octet-stream"})
    url = JOB["store_url"].rstrip("/") + "/" + JOB["job_id"] + "/" + name
    return urllib.request.Request(url, data=data, method=method, headers=headers)


def download(name, dest):
    def go():
        with urllib.request.urlopen(store_request(name), timeout=300) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    retrying(go, "download " + name)


def upload(name, path, attempts=6):
    def go():
        with open(path, "rb") as handle:
            request = store_request(name, "PUT", handle, os.path.getsize(path))
            urllib.request.urlopen(request, timeout=600).read()
    retrying(go, "upload " + name, attempts)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_done(done, attempts=6):
    done["seconds"] = round(time.time() - STARTED, 1)
    with open(os.path.join(HOME, "done.json"), "w") as handle:
        json.dump(done, handle, sort_keys=True)
    upload("done.json", os.path.join(HOME, "done.json"), attempts)


def terminate_self(reason, code):
    say(f"terminating this pod ({reason})")
    pod, key = os.environ.get("RUNPOD_POD_ID"), os.environ.get("RUNPOD_API_KEY")
    if pod and key:
        request = urllib.request.Request(JOB["api_url"].rstrip("/") + "/v2/pods/" + pod, method="DELETE",
                                         headers={"Authorization": "Bearer " + key})
        try:
            retrying(lambda: urllib.request.urlopen(request, timeout=60).read(), "terminate")
        except Exception as exc:
            say(f"self-terminate failed: {exc}")
    os._exit(code)


def watchdog():
    limit = min(JOB["deadline_epoch"] - time.time(), JOB["max_seconds"] - (time.time() - STARTED))
    time.sleep(max(0.0, limit))
    say("--max-hours reached")
    try:
        write_done({"job_id": JOB["job_id"], "status": "failed", "bundle_sha256": JOB["bundle_sha256"],
                    "error": "the pod's watchdog stopped it at --max-hours"}, attempts=1)
    except Exception as exc:
        say(f"could not record the stop: {exc}")
    terminate_self("max hours reached", 3)


def run_step(step, log):
    argv = [sys.executable if part == "{python}" else part for part in step["argv"]]
    say("step " + step["name"] + ": " + " ".join(argv))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
    if process.wait() != 0:
        raise RuntimeError(f"step {step['name']} exited with code {process.returncode}")


def work(done):
    download("bundle.tar.gz", "bundle.tar.gz")
    done["bundle_sha256"] = sha256("bundle.tar.gz")
    if done["bundle_sha256"] != JOB["bundle_sha256"]:
        raise RuntimeError(f"bundle sha256 mismatch: expected {JOB['bundle_sha256']}, got {done['bundle_sha256']}")
    with tarfile.open("bundle.tar.gz", "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall("job", filter="data")
        else:
            tar.extractall("job")
    os.chdir(os.path.join("job", "bundle"))
    with open(os.path.join(HOME, "train.log"), "w") as log:
        for step in JOB["steps"]:
            run_step(step, log)
    with open("results.json") as handle:
        done["results"] = json.load(handle)
    upload("results.tar.zst", "results.tar.zst")
    done["status"] = "ok"


def main():
    threading.Thread(target=watchdog, daemon=True).start()
    done = {"job_id": JOB["job_id"], "status": "failed", "bundle_sha256": None}
    try:
        work(done)
    except Exception as exc:
        done["error"] = f"{type(exc).__name__}: {exc}"
        say(done["error"])
    if os.path.exists(os.path.join(HOME, "train.log")):
        try:
            upload("train.log", os.path.join(HOME, "train.log"))
        except Exception as exc:
            say(f"could not upload train.log: {exc}")
    try:
        write_done(done)
    except Exception as exc:
        say(f"could not upload done.json: {exc}")
    terminate_self("finished", 0 if done["status"] == "ok" else 1)


HOME = os.getcwd()
main()
'''
"""The pod's bootstrap (stdlib only), carried in ``BLOBKIT_POD_PROGRAM`` and run by :data:`POD_COMMAND`."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
