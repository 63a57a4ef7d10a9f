"""What a launch costs and whether it may happen: the catalog price, the spend gate and the plan.

Nothing is created unless ``RUNPOD_API_KEY`` is set *and* ``--confirm-spend`` is given
(:func:`check_spend_gate`); the refusal says what would be launched and its estimated maximum
cost. ``--dry-run`` writes the same facts into plan.json (:func:`launch_plan`). The hourly price is
RunPod's catalog list price (``GET /v2/catalog/gpus``) times the GPU count, and the estimate is that
rate for the whole ``--max-hours`` (GPU time only; container disk and the transfer store are not
included). Without a key the catalog cannot be read and the plan says so instead of guessing a price.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainers.config import TrainConfig
from trainers.errors import ConfigError, SpendGateError
from trainers.plan_record import PlanBasis, RunPodLaunch, Transfer
from world_format.kit import Kit

from .api import API_KEY_ENV, RunPodClient, RunPodError
from .commands import CONFIG_FILE, POD_COMMAND, TRAIN_ARGV, pod_config, pod_steps
from .settings import RunPodSettings
from .store import redact


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
    """The list price of ``config.runpod.gpu_type`` in the chosen cloud; ConfigError when it cannot be launched."""
    entry = next((gpu for gpu in gpus if gpu.get("id") == config.runpod.gpu_type), None)
    if entry is None:
        known = ", ".join(sorted(str(gpu.get("id")) for gpu in gpus)[:20])
        raise ConfigError(f"--gpu-type {config.runpod.gpu_type!r} is not in RunPod's GPU catalog; ids include: {known}")
    cloud = settings.cloud.lower()
    if entry.get(cloud) is False:
        other = "COMMUNITY" if cloud == "secure" else "SECURE"
        raise ConfigError(f"{config.runpod.gpu_type} is not offered on RunPod's {settings.cloud} cloud; choose another "
                          f"--gpu-type or set BLOBKIT_RUNPOD_CLOUD={other}")
    max_count = (entry.get("maxCount") or {}).get(cloud)
    if isinstance(max_count, int) and config.runpod.gpu_count > max_count:
        raise ConfigError(f"--gpu-count {config.runpod.gpu_count}: RunPod's largest {config.runpod.gpu_type} "
                          "machine on the "
                          f"{settings.cloud} cloud has {max_count} GPUs")
    price = (entry.get("price") or {}).get(cloud)
    if isinstance(price, bool) or not isinstance(price, int | float) or price <= 0:
        return PriceQuote(None, config.runpod.gpu_count, f"unavailable: the catalog lists no {cloud} price for "
                                                  f"{config.runpod.gpu_type}")
    return PriceQuote(float(price), config.runpod.gpu_count,
                      f"RunPod GPU catalog (GET {settings.api_url}/v2/catalog/gpus), {cloud} cloud list price "
                      "per GPU-hour; the rate actually billed is the pod's own 'cost'")


def quote_price(config: TrainConfig, settings: RunPodSettings, environ: Mapping[str, str]) -> PriceQuote:
    """Read the price from RunPod's catalog (free, read-only); say why when that is not possible."""
    key = environ.get(API_KEY_ENV)
    if not key:
        return PriceQuote(None, config.runpod.gpu_count, f"unavailable: {API_KEY_ENV} is not set (RunPod's catalog "
                                                  "needs an API key)")
    try:
        with RunPodClient(key, settings.api_url, retry=settings.retry, timeout=20.0) as client:
            gpus = client.gpu_types()
    except RunPodError as exc:
        return PriceQuote(None, config.runpod.gpu_count, f"unavailable: {exc}")
    return price_from_catalog(gpus, config, settings)


def quote_from_plan(entry: RunPodLaunch | None, config: TrainConfig) -> PriceQuote | None:
    """The price the plan's launch quoted, when it planned this GPU type (else None: quote again)."""
    if entry is None or entry.gpu_type != config.runpod.gpu_type:
        return None
    return PriceQuote(entry.price_per_gpu_usd, config.runpod.gpu_count, entry.price_source)


def describe_launch(config: TrainConfig, settings: RunPodSettings, quote: PriceQuote) -> str:
    """One sentence: what would be launched, for how long, and what it would cost at most."""
    what = (f"{config.runpod.gpu_count} x {config.runpod.gpu_type} pod on RunPod's {settings.cloud} cloud (image "
            f"{settings.image}, {settings.disk_gb} GB disk) for at most {config.runpod.max_hours:g} h")
    cost = quote.max_cost_usd(config.runpod.max_hours)
    if cost is None:
        return f"{what}; estimated maximum cost unknown (price {quote.source}): at most " \
               f"{config.runpod.max_hours:g} h " \
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
    quote = quote or PriceQuote(None, config.runpod.gpu_count, "unavailable: not looked up")
    raise SpendGateError(f"refusing to spend money on RunPod: {' and '.join(reasons)}. This run would launch a "
                         f"{describe_launch(config, settings, quote)}. Nothing was created. Check the plan with "
                         f"--dry-run, then set {API_KEY_ENV} and pass --confirm-spend.")


def launch_plan(config: TrainConfig, kit: Kit, plan_record: PlanBasis) -> RunPodLaunch:
    """The launch facts for plan.json: GPU, image, commands, the pod's config, disk, limits, price and max cost."""
    environ = os.environ
    settings = RunPodSettings.from_env(environ)
    quote = quote_price(config, settings, environ)
    max_seconds = config.runpod.max_hours * 3600
    return RunPodLaunch(
        api=f"{settings.api_url}/v2", gpu_type=config.runpod.gpu_type, gpu_count=config.runpod.gpu_count,
        cloud=settings.cloud, image=settings.image, disk_gb=settings.disk_gb,
        start_command=POD_COMMAND, pod_steps=[step["argv"] for step in pod_steps(settings)],
        train_command=" ".join(TRAIN_ARGV),
        config_file=f"{CONFIG_FILE} in bundle.tar.gz: this run's config with paths inside the bundle, GRPO on "
                    "local-torch and max_minutes set to the pod's training budget (pod_config)",
        pod_config=pod_config(config, plan_record.base, settings),
        max_hours=config.runpod.max_hours, boot_timeout_seconds=settings.boot_timeout_seconds,
        pod_self_terminates_after_seconds=round(max_seconds - settings.pod_margin(max_seconds), 1),
        price_per_gpu_usd=quote.per_gpu_usd, hourly_price_usd=quote.hourly_usd,
        price_source=quote.source, estimated_max_cost_usd=quote.max_cost_usd(config.runpod.max_hours),
        cost_note="GPU time at list price for the whole --max-hours; disk and the transfer store not included",
        transfer=Transfer(store=redact(settings.store_url) if settings.store_url else None,
                          to_pod=f"bundle.tar.gz ({CONFIG_FILE}, kit, init adapter, source), sha256 checked on the "
                                 "pod",
                          from_pod="results.tar.zst, sha256 from done.json checked here"),
        kit_sha256=kit.sha256, missing=missing_for_launch(config, settings, environ))
