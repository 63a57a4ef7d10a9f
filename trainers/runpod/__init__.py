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
       the run's config as ``config.json``, the kit, the ``--init-adapter`` export, a local base
       model if one was given, custom ``--data`` rows and, unless ``BLOBKIT_RUNPOD_INSTALL=0``,
       this blobkit source tree; uploads it; and passes its sha256 to the pod in ``BLOBKIT_JOB``.
    2. The pod (:mod:`.pod_program`, stdlib only) downloads the bundle and refuses it unless
       its sha256 matches, installs blobkit, runs ``blobkit train --config config.json`` (the
       bundle carries the run's resolved TrainConfig with paths inside the bundle, GRPO on
       local-torch; see :func:`~.commands.pod_config`), packs ``out/`` with
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
    * ``--max-hours`` is enforced by the pod (a watchdog in :mod:`.pod_program` terminates the
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

Modules, one concept each
    ``api`` the RunPod REST v2 client; ``settings`` the ``BLOBKIT_RUNPOD_*`` settings; ``price``
    the catalog price, the spend gate and the plan.json section; ``commands`` what the pod is
    told to run; ``pod_program`` the pod's bootstrap itself; ``bundle`` the reproducible bundle;
    ``store`` the transfer store; ``leases`` job leases; ``pod`` one pod's life (create, watch,
    terminate); ``results`` packing and collecting results; ``target`` the target that ties them
    together; ``leftovers`` the sweep of pods no job owns. This module re-exports the public names.
"""

from .api import (
    API_KEY_ENV,
    DEFAULT_BASE_URL,
    RetryPolicy,
    RunPodAuthError,
    RunPodClient,
    RunPodError,
    RunPodNotFoundError,
    RunPodRequestError,
    RunPodUnavailableError,
)
from .bundle import Bundle, build_bundle, write_bundle
from .commands import CONFIG_FILE, POD_COMMAND, POD_PROGRAM, pod_config, pod_steps
from .leases import JobRegistry
from .leftovers import client_from_env, sweep, sweep_from_env
from .pod import POD_PREFIX, Job, Watch, create_or_adopt, job_spec, new_job, pod_body, terminate
from .price import (
    PriceQuote,
    check_spend_gate,
    describe_launch,
    gate_spend,
    launch_plan,
    missing_for_launch,
    price_from_catalog,
    quote_price,
)
from .results import collect_results, pack_results
from .settings import DEFAULT_IMAGE, RunPodSettings, default_state_dir
from .store import HttpStore
from .target import require_runnable, train_runpod

__all__ = [
    "API_KEY_ENV", "CONFIG_FILE", "DEFAULT_BASE_URL", "DEFAULT_IMAGE", "POD_COMMAND", "POD_PREFIX", "POD_PROGRAM",
    "Bundle", "HttpStore", "Job", "JobRegistry", "PriceQuote", "RetryPolicy", "RunPodAuthError", "RunPodClient",
    "RunPodError", "RunPodNotFoundError", "RunPodRequestError", "RunPodSettings", "RunPodUnavailableError", "Watch",
    "build_bundle", "check_spend_gate", "client_from_env", "collect_results", "create_or_adopt", "default_state_dir",
    "describe_launch", "gate_spend", "job_spec", "launch_plan", "missing_for_launch", "new_job", "pack_results",
    "pod_body", "pod_config", "pod_steps", "price_from_catalog", "quote_price", "require_runnable", "sweep",
    "sweep_from_env", "terminate", "train_runpod", "write_bundle",
]
