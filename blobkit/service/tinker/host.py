"""The Tinker API's operations: plain functions on typed inputs that the routes call, over one engine thread.

:class:`TinkerHost` keeps the live sessions (:mod:`.sessions`), the futures (:mod:`.futures`) and one
engine thread: every model operation runs there, one at a time, so torch is driven from one thread
and requests of one model, released in ``seq_id`` order (:mod:`.ordering`), run in that order. Each
operation checks the caller's policy (:mod:`.policies`) when it runs, records usage on its train job,
and ends as an :class:`~.futures.Outcome`: a :class:`~blobkit.errors.BlobkitError` becomes the SDK's
``{"error", "category": "User"}`` (the client raises ``RequestFailedError``), anything else a
``Server`` error with a generic message (logged here).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobkit.errors import BlobkitError, ConflictError, LeaseExpiredError, NotFoundError
from trainers.errors import InputDataError
from trainers.tinker_engine.records import AdamSettings, LoraSettings, SamplingSettings

from ..records import Principal
from ..store import ServiceStore
from . import policies, tables
from .bases import ServedBase, served_base
from .checkpoints import open_folder, store_folder
from .futures import FutureTable, Outcome, Pending
from .records import Checkpoint, CheckpointKind
from .sessions import MAX_SAMPLERS, LiveSession, SamplingRun, TrainingRun
from .wire import (
    CreateModelBody,
    CreateSamplingSessionBody,
    ForwardBackwardCall,
    LoadWeightsBody,
    OptimStepBody,
    SampleBody,
    SamplingParamsBody,
    SaveSamplerBody,
    SaveWeightsBody,
    encode_forward_result,
    encode_sample_result,
)

LOG = logging.getLogger("blobkit.service.tinker")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
FINISH_STATUS = {"success": "succeeded", "errored": "errored", "interrupted": "interrupted"}
DEFAULT_MAX_TOKENS = 128


@dataclass(frozen=True)
class TinkerSettings:
    """Timing of the Tinker API (``BLOBKIT_TINKER_*`` environment variables override the defaults)."""

    poll_hold_s: float = 30.0
    """How long ``retrieve_future`` holds a poll before ``try_again`` (the SDK times out at 45 s)."""
    heartbeat_timeout_s: float = 120.0
    """A session without a heartbeat or a call for this long expires (the SDK heartbeats every 10 s)."""
    seq_wait_s: float = 300.0
    """A training request waits this long for a lower ``seq_id`` of its model before it fails."""
    result_ttl_s: float = 600.0
    """Finished requests are kept this long for their poll."""
    fwdbwd_max_chunk_len: int | None = None
    """Datums per forward/backward request the SDK sends (``client/config``); None: the SDK's default (1024)."""

    @classmethod
    def from_env(cls) -> TinkerSettings:
        """The defaults, with ``BLOBKIT_TINKER_POLL_HOLD_S`` etc. applied."""
        values: dict[str, float] = {}
        for name in ("poll_hold_s", "heartbeat_timeout_s", "seq_wait_s", "result_ttl_s"):
            raw = os.environ.get(f"BLOBKIT_TINKER_{name.upper()}")
            if raw:
                values[name] = float(raw)
        return cls(**values)  # type: ignore[arg-type]

    def client_config(self) -> dict[str, Any]:
        """The SDK's ``ClientConfigResponse``: no JWT exchange; the chunk size when set."""
        config: dict[str, Any] = {"pjwt_auth_enabled": False}
        if self.fwdbwd_max_chunk_len is not None:
            config["fwdbwd_max_chunk_len"] = self.fwdbwd_max_chunk_len
        return config


def checkpoint_name(name: str | None, fallback: str) -> str:
    """A checkpoint name (letters, digits, ``.``, ``_``, ``-``); InputDataError otherwise."""
    chosen = name if name is not None else fallback
    if not NAME.match(chosen):
        raise InputDataError(f"checkpoint name {chosen!r}: use up to 128 letters, digits, '.', '_' or '-' (no '/')")
    return chosen


def _tokenizer(base: ServedBase) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base.path)


class TinkerHost:
    """Live sessions, futures and the engine thread of one service store."""

    def __init__(self, store: ServiceStore, settings: TinkerSettings | None = None) -> None:
        self.store, self.settings = store, settings or TinkerSettings.from_env()
        self.futures = FutureTable(self.settings.result_ttl_s)
        self.engine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-engine")
        self.sessions: dict[str, LiveSession] = {}
        self.lock = threading.Lock()
        self._tokenizers: dict[str, Any] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="tinker-reaper", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        """Stop the reaper and the engine thread (after the operation in progress)."""
        self._stop.set()
        self.engine.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------------------ sessions

    def create_session(self, caller: Principal) -> str:
        """A new session and its train job; returns their id."""
        session_id = "tj-" + secrets.token_hex(8)
        tables.create_job(self.store, session_id, caller.workspace, caller.key_id)
        with self.lock:
            self.sessions[session_id] = LiveSession(session_id, caller.workspace, caller.key_id)
        return session_id

    def session(self, caller: Principal, session_id: str) -> LiveSession:
        """The caller's live session (touched); LeaseExpiredError (410) when it ended or expired, NotFoundError for
        another workspace's or an unknown one."""
        with self.lock:
            live = self.sessions.get(session_id)
        if live is None or live.workspace != caller.workspace:
            job = tables.get_job(self.store, caller.workspace, session_id)
            raise LeaseExpiredError(f"session {session_id} has ended ({job.status}); start a new ServiceClient")
        live.touch()
        return live

    def finish(self, caller: Principal, session_id: str, reason: str) -> None:
        """End the session as the script said (``success``/``errored``/``interrupted``) and free its models."""
        live = self.session(caller, session_id)
        self._end(live, FINISH_STATUS[reason], f"the session ended ({reason})")

    def _end(self, live: LiveSession, status: str, why: str) -> None:
        with self.lock:
            self.sessions.pop(live.session_id, None)
        tables.finish_job(self.store, live.session_id, status)
        live.release(why)

    def _reap(self) -> None:
        period = max(0.2, min(5.0, self.settings.heartbeat_timeout_s / 4))
        while not self._stop.wait(period):
            try:
                now = time.monotonic()
                with self.lock:
                    sessions = list(self.sessions.values())
                for live in sessions:
                    if now - live.seen_at > self.settings.heartbeat_timeout_s:
                        LOG.warning("session %s: no heartbeat for %.0f s; expired", live.session_id,
                                    now - live.seen_at)
                        self._end(live, "expired", "the session expired (no heartbeat)")
                        continue
                    for run in list(live.runs.values()):
                        run.queue.expire(self.settings.seq_wait_s)
                self.futures.sweep()
            except Exception:  # the reaper must outlive one bad round
                LOG.exception("tinker reaper round failed")

    # ------------------------------------------------------------------------------------------- futures

    def _submit(self, caller: Principal, idempotency_key: str | None, work: Callable[[], Outcome], *,
                run: TrainingRun | None = None, seq_id: int | None = None) -> Pending:
        pending, new = self.futures.submit(caller.workspace, idempotency_key)
        if not new:
            return pending

        def execute() -> None:
            if pending.future.done():
                return
            try:
                outcome = work()
            except BlobkitError as exc:
                outcome = Outcome.error(str(exc) or type(exc).__name__, "User")
            except Exception:
                LOG.exception("tinker request %s failed", pending.request_id)
                outcome = Outcome.error("the server failed on this request (see the server's log)", "Server")
            if not pending.future.done():
                pending.future.set_result(outcome)

        def fail(message: str) -> None:
            if not pending.future.done():
                pending.future.set_result(Outcome.error(message, "User"))

        def dispatch() -> None:
            self.engine.submit(execute)

        if run is None:
            dispatch()
            return pending
        try:
            ready = run.queue.offer(seq_id, dispatch, fail)
        except ValueError as exc:
            fail(str(exc))
            return pending
        for release in ready:
            release()
        return pending

    def _policy(self, caller: Principal, tokens: int = 0) -> Any:
        policy = policies.binding(self.store, caller)
        policies.check_operation(self.store, policy, tokens)
        return policy

    def _usage(self, session_id: str, started: float, **counts: int) -> None:
        tables.add_usage(self.store, session_id, wall_seconds=time.monotonic() - started, **counts)

    # -------------------------------------------------------------------------------------------- models

    def run(self, caller: Principal, model_id: str) -> tuple[LiveSession, TrainingRun]:
        """The caller's live training run ``model_id``; NotFoundError otherwise."""
        session_id = model_id.split(":train:")[0]
        live = self.session(caller, session_id)
        with live.lock:
            run = live.runs.get(model_id)
        if run is None:
            raise NotFoundError(f"no training run {model_id!r} in this session (create it first)")
        return live, run

    def _add_run(self, caller: Principal, live: LiveSession, model_id: str, base: ServedBase, lora: LoraSettings,
                 engine: Any) -> None:
        with live.lock:
            if model_id in live.runs:
                raise ConflictError(f"training run {model_id} already exists in this session")
            live.runs[model_id] = TrainingRun(model_id, base, lora, engine)
        tables.add_run(self.store, model_id, live.session_id, caller.workspace, caller.key_id, base.name,
                       lora.model_dump())

    def create_model(self, caller: Principal, body: CreateModelBody, idempotency_key: str | None) -> Pending:
        """A fresh LoRA training run on ``body.base_model``, within the caller's policy."""
        from trainers.tinker_engine import TrainingSession

        live = self.session(caller, body.session_id)
        model_id = f"{live.session_id}:train:{body.model_seq_id}"

        def work() -> Outcome:
            started = time.monotonic()
            config = body.lora_config
            if config is None:
                raise InputDataError("create_model needs lora_config: this server trains LoRA adapters")
            if body.optimizer_config.type != "adamw":
                raise InputDataError(f"optimizer {body.optimizer_config.type!r} is not served here (adamw only)")
            policy = self._policy(caller)
            policies.check_model(policy, body.base_model, config.rank)
            base = served_base(self.store, body.base_model)
            lora = LoraSettings(rank=config.rank, seed=config.seed or 0, train_attn=config.train_attn,
                                train_mlp=config.train_mlp, train_unembed=config.train_unembed)
            self._add_run(caller, live, model_id, base, lora, TrainingSession(base.path, lora))
            self._usage(live.session_id, started)
            return Outcome("json", json={"model_id": model_id, "type": "create_model"})

        return self._submit(caller, idempotency_key, work)

    def get_info(self, caller: Principal, model_id: str) -> dict[str, Any]:
        """``GetInfoResponse`` of a training run: its tokenizer is the base's directory on this server."""
        _, run = self.run(caller, model_id)
        arch = getattr(run.engine.model.config, "model_type", None)
        return {"type": "get_info", "model_id": model_id, "is_lora": True, "lora_rank": run.lora.rank,
                "model_name": run.base.name,
                "model_data": {"arch": arch, "model_name": run.base.name, "tokenizer_id": str(run.base.path)}}

    def forward_backward(self, caller: Principal, call: ForwardBackwardCall, idempotency_key: str | None) -> Pending:
        """Forward (``forward_only``) or forward/backward of a batch, in the model's ``seq_id`` order."""
        live, run = self.run(caller, call.model_id)

        def work() -> Outcome:
            started = time.monotonic()
            self._policy(caller, sum(example.length for example in call.examples))
            result = run.engine.forward_backward(call.examples, call.loss_fn, call.loss_config,
                                                 backward=not call.forward_only)
            self._usage(live.session_id, started, forward_backward_tokens=result.tokens)
            return Outcome("proto", proto=encode_forward_result(result))

        return self._submit(caller, idempotency_key, work, run=run, seq_id=call.seq_id)

    def optim_step(self, caller: Principal, body: OptimStepBody, idempotency_key: str | None) -> Pending:
        """One AdamW step with the SDK's ``AdamParams``."""
        live, run = self.run(caller, body.model_id)

        def work() -> Outcome:
            started = time.monotonic()
            if body.adam_params is None:
                raise InputDataError("optim_step needs adam_params: only AdamW is served here")
            self._policy(caller)
            metrics = run.engine.optim_step(AdamSettings(**body.adam_params.model_dump()))
            self._usage(live.session_id, started, optimizer_steps=1)
            return Outcome("json", json={"metrics": metrics, "type": "optim_step"})

        return self._submit(caller, idempotency_key, work, run=run, seq_id=body.seq_id)

    # ---------------------------------------------------------------------------------------- checkpoints

    def _save(self, caller: Principal, live: LiveSession, run: TrainingRun, kind: CheckpointKind, name: str,
              purpose: str,
              overwrite: bool) -> str:
        segment = "weights" if kind == "training" else "sampler_weights"
        path = f"tinker://{run.model_id}/{segment}/{name}"
        with tempfile.TemporaryDirectory(prefix="blobkit-tinker-save-") as scratch:
            run.engine.save(Path(scratch), optimizer=kind == "training")
            digest, size = store_folder(self.store.root, Path(scratch), kind, run.base, run.lora)
        tables.add_checkpoint(self.store, Checkpoint(
            tinker_path=path, kind=kind, training_run_id=run.model_id, train_job_id=live.session_id,
            workspace=caller.workspace, owner=caller.key_id, purpose=purpose, sha256=digest, bytes=size,
            base_model=run.base.name, created_at=time.time()), overwrite=overwrite)
        return path

    def save_weights(self, caller: Principal, body: SaveWeightsBody, idempotency_key: str | None) -> Pending:
        """Save the training state (adapter + AdamW state) as ``tinker://RUN/weights/NAME``."""
        live, run = self.run(caller, body.model_id)
        name = checkpoint_name(body.path, f"state-{body.seq_id}")

        def work() -> Outcome:
            started = time.monotonic()
            self._policy(caller)
            path = self._save(caller, live, run, "training", name, "state", body.overwrite)
            self._usage(live.session_id, started)
            return Outcome("json", json={"path": path, "type": "save_weights"})

        return self._submit(caller, idempotency_key, work, run=run, seq_id=body.seq_id)

    def save_for_sampler(self, caller: Principal, body: SaveSamplerBody, idempotency_key: str | None) -> Pending:
        """Named: save sampler weights as ``tinker://RUN/sampler_weights/NAME``. Unnamed: a sampling session on a
        snapshot of the current weights."""
        from trainers.tinker_engine import Sampler

        live, run = self.run(caller, body.model_id)
        if body.path is None and body.sampling_session_seq_id is None:
            raise InputDataError("save_weights_for_sampler needs a path (a name) or a sampling_session_seq_id")
        name = checkpoint_name(body.path, "unused") if body.path is not None else None

        def work() -> Outcome:
            started = time.monotonic()
            self._policy(caller)
            if name is not None:
                path = self._save(caller, live, run, "sampler", name, "sampler", False)
                self._usage(live.session_id, started)
                return Outcome("json", json={"path": path, "type": "save_weights_for_sampler"})
            sampler_id = f"{live.session_id}:sample:{body.sampling_session_seq_id}"
            engine = Sampler(run.base.path, run.lora, run.engine.adapter_state())
            self._add_sampler(live, SamplingRun(sampler_id, run.base, None, engine))
            self._usage(live.session_id, started)
            return Outcome("json", json={"sampling_session_id": sampler_id, "type": "save_weights_for_sampler"})

        return self._submit(caller, idempotency_key, work, run=run, seq_id=body.seq_id)

    def _checkpoint_folder(self, caller: Principal, path: str) -> tuple[Checkpoint, Path]:
        checkpoint = tables.get_checkpoint(self.store, caller.workspace, path)
        return checkpoint, open_folder(self.store.root, checkpoint.sha256)

    def load_weights(self, caller: Principal, body: LoadWeightsBody, idempotency_key: str | None) -> Pending:
        """Load a saved state into a run (``model_id``) or as a new run (``session_id`` + ``model_seq_id``), with or
        without its optimizer state."""
        from trainers.tinker_engine import TrainingSession, read_session_file

        if body.model_id is not None:
            live, run = self.run(caller, body.model_id)

            def into_run() -> Outcome:
                started = time.monotonic()
                self._policy(caller)
                checkpoint, folder = self._checkpoint_folder(caller, body.path)
                lora, steps = read_session_file(folder)
                if lora != run.lora or checkpoint.base_model != run.base.name:
                    raise InputDataError(f"{body.path} was saved from {checkpoint.base_model} with {lora}; this run "
                                         f"is {run.base.name} with {run.lora}")
                run.engine.load(folder, optimizer=body.optimizer, steps=steps)
                self._usage(live.session_id, started)
                return Outcome("json", json={"path": body.path, "type": "load_weights"})

            return self._submit(caller, idempotency_key, into_run, run=run, seq_id=body.seq_id)
        if body.session_id is None or body.model_seq_id is None:
            raise InputDataError("load_weights needs model_id, or session_id and model_seq_id")
        live = self.session(caller, body.session_id)
        model_id = f"{live.session_id}:train:{body.model_seq_id}"

        def new_run() -> Outcome:
            started = time.monotonic()
            policy = self._policy(caller)
            checkpoint, folder = self._checkpoint_folder(caller, body.path)
            if body.optimizer and checkpoint.kind != "training":
                raise InputDataError(f"{body.path} holds sampler weights without optimizer state; resume from a "
                                     "save_state checkpoint (tinker://RUN/weights/NAME)")
            lora, steps = read_session_file(folder)
            policies.check_model(policy, checkpoint.base_model, lora.rank)
            base = served_base(self.store, checkpoint.base_model)
            engine = TrainingSession(base.path, lora)
            engine.load(folder, optimizer=body.optimizer, steps=steps)
            self._add_run(caller, live, model_id, base, lora, engine)
            self._usage(live.session_id, started)
            return Outcome("json", json={"model_id": model_id, "path": body.path, "type": "load_weights"})

        return self._submit(caller, idempotency_key, new_run)

    # ------------------------------------------------------------------------------------------- sampling

    def _add_sampler(self, live: LiveSession, sampling: SamplingRun) -> None:
        with live.lock:
            live.samplers[sampling.sampling_session_id] = sampling
            while len(live.samplers) > MAX_SAMPLERS:
                live.samplers.pop(next(iter(live.samplers)))

    def create_sampling_session(self, caller: Principal, body: CreateSamplingSessionBody) -> str:
        """A sampler of a saved checkpoint (``model_path``) or of a base (``base_model``); returns its id."""
        from trainers.tinker_engine import Sampler, read_session_file
        from trainers.tinker_engine.state import adapter_tensors

        live = self.session(caller, body.session_id)
        policy = self._policy(caller)
        sampler_id = f"{live.session_id}:sample:{body.sampling_session_seq_id}"
        if body.model_path is not None:
            checkpoint, folder = self._checkpoint_folder(caller, body.model_path)
            lora, _ = read_session_file(folder)
            policies.check_model(policy, checkpoint.base_model, lora.rank)
            base = served_base(self.store, checkpoint.base_model)
            engine = Sampler(base.path, lora, adapter_tensors(folder))
        elif body.base_model is not None:
            policies.check_model(policy, body.base_model, None)
            base = served_base(self.store, body.base_model)
            engine = Sampler(base.path)
        else:
            raise InputDataError("create_sampling_session needs base_model or model_path")
        self._add_sampler(live, SamplingRun(sampler_id, base, body.model_path, engine))
        return sampler_id

    def sampler(self, caller: Principal, sampler_id: str) -> tuple[LiveSession, SamplingRun]:
        """The caller's live sampler; NotFoundError otherwise."""
        live = self.session(caller, sampler_id.split(":sample:")[0])
        with live.lock:
            sampling = live.samplers.get(sampler_id)
        if sampling is None:
            raise NotFoundError(f"no sampling session {sampler_id!r} (a session keeps its {MAX_SAMPLERS} newest)")
        return live, sampling

    def _settings(self, base: ServedBase, params: SamplingParamsBody) -> tuple[SamplingSettings, tuple[str, ...]]:
        if base.name not in self._tokenizers:
            self._tokenizers[base.name] = _tokenizer(base)
        tokenizer = self._tokenizers[base.name]
        stop = params.stop
        strings: tuple[str, ...] = ()
        tokens: list[tuple[int, ...]] = []
        if stop != []:
            if tokenizer.eos_token_id is not None:
                tokens.append((int(tokenizer.eos_token_id),))
            if isinstance(stop, str):
                strings = (stop,)
            elif stop:
                strings = tuple(s for s in stop if isinstance(s, str))
                tokens.extend((int(t),) for t in stop if isinstance(t, int))
        settings = SamplingSettings(max_tokens=params.max_tokens or DEFAULT_MAX_TOKENS, temperature=params.temperature,
                                    top_k=params.top_k, top_p=params.top_p, stop=tuple(tokens), seed=params.seed)
        return settings, strings

    def sample(self, caller: Principal, body: SampleBody, idempotency_key: str | None) -> tuple[Pending, list[str]]:
        """``num_samples`` sequences (and prompt logprobs when asked); (the request, its sequence ids)."""
        if body.sampling_session_id is None:
            raise InputDataError("asample needs a sampling_session_id (create_sampling_session first)")
        unserved = [name for name, value in (("topk_prompt_logprobs", body.topk_prompt_logprobs),
                                             ("topk_sample_logprobs", body.topk_sample_logprobs),
                                             ("prompt_alt_tokens_k", body.prompt_alt_tokens_k),
                                             ("target_prompt_logprobs", body.target_prompt_logprobs)) if value]
        if unserved:
            raise InputDataError(f"{', '.join(unserved)} are not served here")
        live, sampling = self.sampler(caller, body.sampling_session_id)
        prompt = body.prompt.tokens()

        def work() -> Outcome:
            started = time.monotonic()
            self._policy(caller, len(prompt))
            settings, strings = self._settings(sampling.base, body.sampling_params)
            tokenizer = self._tokenizers[sampling.base.name]
            sampling.engine.decode = tokenizer.decode
            result = sampling.engine.sample(prompt, body.num_samples, settings,
                                            prompt_logprobs=bool(body.prompt_logprobs), stop_strings=strings)
            if result.prompt_logprobs is not None and body.prompt_logprobs_last_n:
                keep = body.prompt_logprobs_last_n
                scored = result.prompt_logprobs
                result = type(result)(result.sequences, [float("nan")] * (len(scored) - keep) + scored[-keep:])
            sampled = sum(len(s.tokens) for s in result.sequences) + (len(prompt) if body.prompt_logprobs else 0)
            self._usage(live.session_id, started, sampled_tokens=sampled)
            return Outcome("proto", proto=encode_sample_result(result))

        pending = self._submit(caller, idempotency_key, work)
        return pending, [f"{pending.request_id}:{i}" for i in range(body.num_samples)]
