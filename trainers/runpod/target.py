"""The ``runpod`` target: gate the spend, ship the bundle, run the pod, collect verified results, terminate.

Only GRPO runs here, warm-started from an SFT export (``--init-adapter``); SFT runs locally first.
Whatever happens (success, an error, Ctrl-C, cancellation), the pod is terminated in a ``finally``
and the job's lease released once it is gone. ``OUT/runpod/run.json`` records the run: job and pod,
GPU, seconds, estimated cost and both checksums.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.config import TrainConfig
from trainers.errors import ConfigError
from trainers.eval_record import GRPOReport, RunPodRun
from trainers.plan_record import BaseRecord, RunPodLaunch
from world_format.canonical import atomic_write_json
from world_format.kit import Kit

from .api import API_KEY_ENV, RunPodClient
from .bundle import Bundle, build_bundle
from .leases import JobRegistry
from .pod import Job, Log, Stop, Watch, create_or_adopt, job_spec, new_job, pod_body, terminate
from .price import PriceQuote, check_spend_gate, describe_launch, quote_from_plan, quote_price
from .results import collect_results
from .settings import RunPodSettings
from .store import HttpStore


def require_runnable(config: TrainConfig) -> Path:
    """GRPO (the target's refusal rules, :meth:`trainers.targets.runpod.RunPod.refusal`) warm-started from an
    existing SFT export; returns the adapter directory."""
    refusal = config.unsupported()
    if refusal:
        raise ConfigError(refusal)
    if config.init_adapter is None:
        raise ConfigError("runpod needs --init-adapter: the export of a local SFT run (e.g. out/sft/export), which "
                          "GRPO warm-starts from")
    if not Path(config.init_adapter).is_dir():
        raise ConfigError(f"--init-adapter {config.init_adapter}: not a directory (expected an SFT run's export)")
    return Path(config.init_adapter)


def _run_record(job: Job, pod_id: str, config: TrainConfig, quote: PriceQuote, bundle: Bundle,
                started: float, results_sha256: str) -> RunPodRun:
    seconds = round(time.monotonic() - started, 1)
    cost = None if quote.hourly_usd is None else round(quote.hourly_usd * seconds / 3600, 4)
    return RunPodRun(job_id=job.id, pod_id=pod_id, pod_name=job.name, gpu_type=config.runpod.gpu_type,
                     gpu_count=config.runpod.gpu_count, hourly_price_usd=quote.hourly_usd, seconds=seconds,
                     estimated_cost_usd=cost, bundle_sha256=bundle.sha256, results_sha256=results_sha256)


def _run_job(client: RunPodClient, store: HttpStore, job: Job, bundle: Bundle, config: TrainConfig,
             settings: RunPodSettings, quote: PriceQuote, log: Log, stop: Stop | None) -> GRPOReport:
    registry = JobRegistry(settings.state_dir)
    registry.claim(job.name, pod_id=None)
    pod_id: str | None = None
    try:
        log(f"runpod: uploading bundle ({bundle.bytes} bytes, sha256 {bundle.sha256[:12]}...) to the store")
        store.put_file(f"{job.id}/bundle.tar.gz", bundle.path)
        log(f"runpod: launching {describe_launch(config, settings, quote)}")
        started = time.monotonic()
        pod = create_or_adopt(client, pod_body(job, config, settings, job_spec(job, config, settings, bundle)), log)
        pod_id = str(pod["id"])
        registry.claim(job.name, pod_id=pod_id)
        atomic_write_json(job.work / "job.json", {"job_id": job.id, "pod_id": pod_id, "pod_name": job.name,
                                                  "bundle_sha256": bundle.sha256})
        done = Watch(client, store, job, pod_id, config, settings, log, stop, registry, created=started).run()
        report, digest = collect_results(store, job, done, bundle, config.out)
        record = _run_record(job, pod_id, config, quote, bundle, started, digest)
        atomic_write_json(job.work / "run.json", record.to_json())
        return report.model_copy(update={"runpod": record})
    finally:
        if terminate(client, pod_id, job.name, log):
            registry.release(job.name)


def train_runpod(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], base: BaseRecord,
                 planned: RunPodLaunch | None, log: Log, stop: Stop | None = None, *,
                 settings: RunPodSettings | None = None, environ: Mapping[str, str] | None = None) -> GRPOReport:
    """Run GRPO on a RunPod pod and return the pod's eval.json record (plus a ``runpod`` section); ``base`` and
    ``planned`` (the launch, its price) are the plan's (:class:`~trainers.plan_record.PlanRecord`).

    Gates spend first (nothing is created on refusal), ships the bundle, creates the pod and
    watches it, collects verified results, and terminates the pod whatever happens.
    """
    environ = os.environ if environ is None else environ
    settings = settings or RunPodSettings.from_env(environ)
    require_runnable(config)
    quote = quote_from_plan(planned, config)
    if (quote is None or quote.per_gpu_usd is None) and environ.get(API_KEY_ENV):
        quote = quote_price(config, settings, environ)
    check_spend_gate(config, environ, quote)
    if not settings.store_url:
        raise ConfigError("set BLOBKIT_RUNPOD_STORE_URL to an HTTP store (PUT/GET) that this machine and the pod "
                          "can both reach; it carries the kit to the pod and the results back")
    quote = quote or PriceQuote(None, config.runpod.gpu_count, "unavailable")
    job = new_job(config.out)
    bundle = build_bundle(config, kit, rows, base, settings, job.work / "bundle.tar.gz")
    store = HttpStore(settings.store_url, settings.store_token, retry=settings.retry)
    client = RunPodClient(environ[API_KEY_ENV], settings.api_url, retry=settings.retry)
    try:
        return _run_job(client, store, job, bundle, config, settings, quote, log, stop)
    finally:
        store.close()
        client.close()
