"""The Tinker-compatible API under ``/tinker/api/v1``: the routes the unmodified ``tinker`` SDK calls.

A script sets ``TINKER_BASE_URL=http://HOST:PORT/tinker`` and ``TINKER_API_KEY=tml-…`` (a key from
``blobkit serve keys create``). Routes only translate: parse the body (:mod:`.wire`), authenticate
(:func:`blobkit.service.auth.principal`), call :class:`~.host.TinkerHost`, answer. Operations return
``{request_id}`` at once and their outcome through ``retrieve_future`` (held up to
``poll_hold_s``, then ``try_again``); forward/backward bodies and the outcomes of forward/backward
and sampling are protobuf. The blobkit records (train jobs with their usage, checkpoints with owner
and content address) are under ``/tinker/api/v1/train_jobs``.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response

from ..auth import get_store, principal
from ..http_errors import ERROR_RESPONSES
from ..records import Principal
from ..store import ServiceStore
from . import tables
from .bases import accepted_names
from .host import TinkerHost
from .records import Checkpoint, TrainJob
from .rest import page, rest_checkpoint, rest_run
from .wire import (
    CreateModelBody,
    CreateSamplingSessionBody,
    CreateSessionBody,
    FinishBody,
    LoadWeightsBody,
    ModelBody,
    OptimStepBody,
    RetrieveBody,
    SampleBody,
    SaveSamplerBody,
    SaveWeightsBody,
    SdkVersionBody,
    SessionBody,
    TelemetryBody,
    decode_forward_backward,
)

router = APIRouter(tags=["tinker"], responses=ERROR_RESPONSES)
_HOST_LOCK = threading.Lock()
PROTO = "application/x-protobuf"
MAX_FORWARD_BYTES = 256 << 20


def get_host(request: Request, store: ServiceStore = Depends(get_store)) -> TinkerHost:
    """The app's Tinker host (created on first use)."""
    with _HOST_LOCK:
        host = getattr(request.app.state, "tinker", None)
        if host is None:
            host = request.app.state.tinker = TinkerHost(store)
    return host


def _future(request_id: str, **extra: Any) -> dict[str, Any]:
    return {"request_id": request_id, **extra}


IdempotencyKey = Header(None, alias="X-Idempotency-Key", include_in_schema=False)


@router.post("/client/config", summary="Client configuration")
def client_config(body: SdkVersionBody, caller: Principal = Depends(principal),
                  host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """The SDK's ``ClientConfigResponse``: no JWT exchange, defaults otherwise."""
    return host.settings.client_config()


@router.post("/client/dynamic_config", summary="Dynamic client configuration")
def dynamic_config(body: SdkVersionBody, caller: Principal = Depends(principal)) -> dict[str, Any]:
    """Defaults (no sample cancellation)."""
    return {}


@router.get("/healthz", summary="Health")
def healthz(caller: Principal = Depends(principal)) -> dict[str, str]:
    """``{"status": "ok"}``."""
    return {"status": "ok"}


@router.post("/telemetry", summary="SDK telemetry (accepted, not kept)")
def telemetry(body: TelemetryBody, caller: Principal = Depends(principal)) -> dict[str, str]:
    """Accepted and dropped."""
    return {"status": "accepted"}


@router.get("/get_server_capabilities", summary="Bases this server trains")
def capabilities(caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> dict[str, Any]:
    """Registered bases and catalog ids, each trainable and sampleable."""
    return {"supported_models": [{"model_name": name, "trainable": True, "sampleable": True}
                                 for name in accepted_names(store)]}


@router.post("/create_session", summary="Start a session (a train job)")
def create_session(body: CreateSessionBody, caller: Principal = Depends(principal),
                   host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """A new session; its id is also the train job's."""
    return {"session_id": host.create_session(caller), "type": "create_session"}


@router.post("/session_heartbeat", summary="Keep a session alive (410 once it ended)")
def heartbeat(body: SessionBody, caller: Principal = Depends(principal),
              host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """The session stays alive; 410 when it has ended or expired."""
    host.session(caller, body.session_id)
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish", summary="End a session",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                 "type": "object", "description": "{reason: {type: success|errored|interrupted}, detail?}"}}}}})
async def finish(session_id: str, request: Request, caller: Principal = Depends(principal),
                 host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """The script is done (``close()``): the train job ends with its reason, its models are freed. The session is
    looked up before the body is read, so another workspace's session is not found whatever the body."""
    from pydantic import ValidationError

    from blobkit.errors import ConfigError

    host.session(caller, session_id)
    try:
        body = FinishBody.model_validate_json(await request.body())
    except ValidationError as exc:
        raise ConfigError(f"finish body: {exc.errors()[0]['msg']}") from None
    host.finish(caller, session_id, body.reason.type)
    return {}


@router.post("/create_model", summary="Create a LoRA training run (future)")
def create_model(body: CreateModelBody, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
                 idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Checked against the caller's policy (models, rank, budget, deadline) when it runs."""
    pending = host.create_model(caller, body, idempotency)
    return _future(pending.request_id, model_id=f"{body.session_id}:train:{body.model_seq_id}")


@router.post("/get_info", summary="A training run's model and tokenizer")
def get_info(body: ModelBody, caller: Principal = Depends(principal),
             host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """``GetInfoResponse``; ``tokenizer_id`` is the base's directory on this server."""
    return host.get_info(caller, body.model_id)


async def _forward(request: Request, caller: Principal, host: TinkerHost, idempotency: str | None) -> dict[str, Any]:
    from blobkit.errors import PayloadTooLargeError

    body = await request.body()
    if len(body) > MAX_FORWARD_BYTES:
        raise PayloadTooLargeError(f"forward_backward body is over {MAX_FORWARD_BYTES} bytes; send smaller chunks")
    call = decode_forward_backward(body)
    return _future(host.forward_backward(caller, call, idempotency).request_id)


PROTO_BODY = {"requestBody": {"required": True, "content": {PROTO: {"schema": {
    "type": "string", "format": "binary", "description": "tinker_public.ForwardBackwardRequest"}}}}}


@router.post("/forward_backward", summary="Forward/backward of a batch (protobuf body; future)",
             openapi_extra=PROTO_BODY)
async def forward_backward(request: Request, caller: Principal = Depends(principal),
                           host: TinkerHost = Depends(get_host),
                           idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Run in the model's ``seq_id`` order; gradients accumulate until ``optim_step``."""
    return await _forward(request, caller, host, idempotency)


@router.post("/forward", summary="Forward only (protobuf body; future)", openapi_extra=PROTO_BODY)
async def forward(request: Request, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
                  idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """As ``forward_backward`` with ``forward_only``."""
    return await _forward(request, caller, host, idempotency)


@router.post("/optim_step", summary="One AdamW step (future)")
def optim_step(body: OptimStepBody, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
               idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Applies and clears the accumulated gradients."""
    return _future(host.optim_step(caller, body, idempotency).request_id)


@router.post("/save_weights", summary="Save training state (future)")
def save_weights(body: SaveWeightsBody, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
                 idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Adapter and AdamW state as ``tinker://RUN/weights/NAME``."""
    return _future(host.save_weights(caller, body, idempotency).request_id)


@router.post("/save_weights_for_sampler", summary="Save sampler weights (future)")
def save_for_sampler(body: SaveSamplerBody, caller: Principal = Depends(principal),
                     host: TinkerHost = Depends(get_host),
                     idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Named: ``tinker://RUN/sampler_weights/NAME``; unnamed: a sampling session on a snapshot."""
    return _future(host.save_for_sampler(caller, body, idempotency).request_id)


@router.post("/load_weights", summary="Load saved state (future)")
def load_weights(body: LoadWeightsBody, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
                 idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """Into an existing run, or as a new run ``SESSION:train:N``; optimizer state when ``optimizer``."""
    pending = host.load_weights(caller, body, idempotency)
    extra = {"model_id": f"{body.session_id}:train:{body.model_seq_id}"} if body.model_id is None else {}
    return _future(pending.request_id, **extra)


@router.post("/create_sampling_session", summary="A sampler of a base or a checkpoint")
def create_sampling_session(body: CreateSamplingSessionBody, caller: Principal = Depends(principal),
                            host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """Its weights are frozen: training the run it came from does not change it."""
    return {"sampling_session_id": host.create_sampling_session(caller, body), "type": "create_sampling_session"}


@router.get("/samplers/{sampler_id}", summary="A sampler's base and checkpoint")
def get_sampler(sampler_id: str, caller: Principal = Depends(principal),
                host: TinkerHost = Depends(get_host)) -> dict[str, Any]:
    """``GetSamplerResponse``."""
    _, sampling = host.sampler(caller, sampler_id)
    return {"sampler_id": sampler_id, "base_model": sampling.base.name, "model_path": sampling.model_path}


@router.post("/asample", summary="Sample (future; protobuf outcome)")
def asample(body: SampleBody, caller: Principal = Depends(principal), host: TinkerHost = Depends(get_host),
            idempotency: str | None = IdempotencyKey) -> dict[str, Any]:
    """``num_samples`` sequences with their logprobs (and the prompt's when asked)."""
    pending, ids = host.sample(caller, body, idempotency)
    return _future(pending.request_id, sample_sequence_ids=ids)


@router.post("/retrieve_future", summary="The outcome of a request (long poll)")
async def retrieve_future(body: RetrieveBody, caller: Principal = Depends(principal),
                          host: TinkerHost = Depends(get_host)) -> Response:
    """The outcome when ready (JSON, protobuf, or ``{"error", "category"}``); ``try_again`` after the hold."""
    outcome = await host.futures.wait(caller.workspace, body.request_id, host.settings.poll_hold_s)
    if outcome is None:
        return JSONResponse({"type": "try_again", "request_id": body.request_id, "queue_state": "active"})
    if outcome.kind == "proto":
        return Response(outcome.proto, media_type=PROTO)
    return JSONResponse(outcome.json)


# ------------------------------------------------------------------------------------- REST (SDK shapes)


@router.get("/training_runs", summary="Training runs (SDK shape)")
def training_runs(limit: int = Query(20, ge=1, le=1000), offset: int = Query(0, ge=0),
                  caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> dict[str, Any]:
    """``TrainingRunsResponse`` of the caller's workspace."""
    items, cursor = page(tables.list_runs(store, caller.workspace), limit, offset)
    return {"training_runs": [rest_run(store, caller.workspace, run) for run in items], "cursor": cursor}


@router.get("/training_runs/{run_id}", summary="A training run (SDK shape)")
def training_run(run_id: str, caller: Principal = Depends(principal),
                 store: ServiceStore = Depends(get_store)) -> dict[str, Any]:
    """``TrainingRun``."""
    return rest_run(store, caller.workspace, tables.get_run(store, caller.workspace, run_id))


@router.get("/training_runs/{run_id}/checkpoints", summary="A run's checkpoints (SDK shape)")
def run_checkpoints(run_id: str, caller: Principal = Depends(principal),
                    store: ServiceStore = Depends(get_store)) -> dict[str, Any]:
    """``CheckpointsListResponse``."""
    tables.get_run(store, caller.workspace, run_id)
    return {"checkpoints": [rest_checkpoint(c) for c in tables.list_checkpoints(store, caller.workspace, run_id)]}


@router.get("/checkpoints", summary="The workspace's checkpoints (SDK shape)")
def user_checkpoints(limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
                     caller: Principal = Depends(principal),
                     store: ServiceStore = Depends(get_store)) -> dict[str, Any]:
    """``CheckpointsListResponse`` with a cursor."""
    items, cursor = page(tables.list_checkpoints(store, caller.workspace), limit, offset)
    return {"checkpoints": [rest_checkpoint(c) for c in items], "cursor": cursor}


# --------------------------------------------------------------------------------- blobkit's own records


@router.get("/train_jobs", response_model=list[TrainJob], summary="Train jobs with their usage")
def train_jobs(caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> list[TrainJob]:
    """The workspace's train jobs, newest first (what ``blobkit tinker jobs list`` prints)."""
    return tables.list_jobs(store, caller.workspace)


@router.get("/train_jobs/{job_id}", response_model=TrainJob, summary="One train job")
def train_job(job_id: str, caller: Principal = Depends(principal),
              store: ServiceStore = Depends(get_store)) -> TrainJob:
    """Status, owner, base, last checkpoint and usage."""
    return tables.get_job(store, caller.workspace, job_id)


@router.get("/train_jobs/{job_id}/checkpoints", response_model=list[Checkpoint], summary="A train job's checkpoints")
def train_job_checkpoints(job_id: str, caller: Principal = Depends(principal),
                          store: ServiceStore = Depends(get_store)) -> list[Checkpoint]:
    """Kind, owner, purpose and content address of each."""
    tables.get_job(store, caller.workspace, job_id)
    return [c for c in tables.list_checkpoints(store, caller.workspace) if c.train_job_id == job_id]
