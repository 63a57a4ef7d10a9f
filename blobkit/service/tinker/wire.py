"""The Tinker SDK's wire format (tinker 0.38): JSON request bodies as strict models, protobuf in and out.

The JSON models list exactly the fields the SDK sends (its ``StrictBase`` request types); a field this
server does not know is refused with 422, so a newer SDK's change shows up as a clear error, not as
a silently dropped setting. Forward/backward requests and the results of forward/backward and
sampling are protobuf messages of the schema the SDK ships (``tinker.proto.tinker_public_pb2``),
decoded and encoded here with bounds checked: token ids are int32 little-endian, loss inputs dense or
CSR tensors of float32/int64 with a declared shape, one value per input position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainers.errors import InputDataError
from trainers.tinker_engine.records import Example, ForwardResult, SampleResult


class Body(BaseModel):
    """A request body of the SDK: unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class SdkVersionBody(Body):
    """``client/config`` and ``client/dynamic_config``."""

    sdk_version: str | None = None
    """The SDK's version."""


class CreateSessionBody(Body):
    """``create_session``."""

    tags: list[str] = Field(default_factory=list)
    """``$TINKER_TAGS``."""
    user_metadata: dict[str, Any] | None = None
    """Free-form metadata of the caller."""
    sdk_version: str | None = None
    """The SDK's version."""
    project_id: str | None = None
    """``$TINKER_PROJECT_ID``."""
    display_name: str | None = None
    """A name for the session."""
    type: Literal["create_session"] = "create_session"


class SessionBody(Body):
    """``session_heartbeat``."""

    session_id: str
    type: Literal["session_heartbeat"] = "session_heartbeat"


class FinishReason(Body):
    type: Literal["success", "errored", "interrupted"]
    """How the script ended."""


class FinishBody(Body):
    """``sessions/{id}/finish``."""

    reason: FinishReason
    detail: str | None = None


class TelemetryBody(BaseModel):
    """``telemetry``: accepted and dropped (the SDK batches its own events here)."""

    model_config = ConfigDict(extra="allow")


class LoraConfigBody(Body):
    rank: int
    seed: int | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigBody(Body):
    type: str = "adamw"
    """Only ``adamw`` is served."""
    version: int | None = None


class CreateModelBody(Body):
    """``create_model``: a LoRA training run on ``base_model``."""

    session_id: str
    model_seq_id: int = Field(ge=0)
    base_model: str
    user_metadata: dict[str, Any] | None = None
    lora_config: LoraConfigBody | None = None
    optimizer_config: OptimizerConfigBody = OptimizerConfigBody()
    type: Literal["create_model"] = "create_model"


class ModelBody(Body):
    """``get_info`` and ``unload_model``."""

    model_id: str
    type: Literal["get_info", "unload_model"] = "get_info"


class AdamParamsBody(Body):
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


class OptimStepBody(Body):
    """``optim_step``."""

    model_id: str
    seq_id: int | None = None
    adam_params: AdamParamsBody | None = None
    optimizer_params: dict[str, Any] | None = None
    """A non-Adam optimizer's step (refused: only AdamW is served)."""
    type: Literal["optim_step"] = "optim_step"


class SaveWeightsBody(Body):
    """``save_weights`` (training state, with optimizer state)."""

    model_id: str
    path: str | None = None
    seq_id: int | None = None
    ttl_seconds: int | None = None
    overwrite: bool = False
    user_metadata: dict[str, str] | None = None
    type: Literal["save_weights"] = "save_weights"


class SaveSamplerBody(Body):
    """``save_weights_for_sampler``: named (``path``) or for a sampling session (``sampling_session_seq_id``)."""

    model_id: str
    path: str | None = None
    sampling_session_seq_id: int | None = None
    kind: Literal["snapshot", "inflight"] = "snapshot"
    seq_id: int | None = None
    ttl_seconds: int | None = None
    user_metadata: dict[str, str] | None = None
    type: Literal["save_weights_for_sampler"] = "save_weights_for_sampler"


class LoadWeightsBody(Body):
    """``load_weights``: into an existing model (``model_id``) or as a new one (``session_id`` + ``model_seq_id``)."""

    model_id: str | None = None
    seq_id: int | None = None
    session_id: str | None = None
    model_seq_id: int | None = None
    base_model: str | None = None
    user_metadata: dict[str, Any] | None = None
    path: str
    optimizer: bool
    optimizer_config: OptimizerConfigBody | None = None
    weights_access_token: str | None = None
    type: Literal["load_weights"] = "load_weights"


class CreateSamplingSessionBody(Body):
    """``create_sampling_session``: a sampler of a base model, or of a saved sampler checkpoint."""

    session_id: str
    sampling_session_seq_id: int
    base_model: str | None = None
    model_path: str | None = None
    type: Literal["create_sampling_session"] = "create_sampling_session"


class TextChunk(Body):
    tokens: list[int]
    type: Literal["encoded_text"] = "encoded_text"


class ModelInputBody(Body):
    chunks: list[dict[str, Any]]
    """Chunks; only ``encoded_text`` is served (text models)."""

    def tokens(self) -> list[int]:
        """The prompt's token ids; InputDataError for a chunk that is not text."""
        out: list[int] = []
        for chunk in self.chunks:
            if chunk.get("type") != "encoded_text":
                raise InputDataError(f"model_input chunk of type {chunk.get('type')!r} is not served here (text "
                                     "models only: encoded_text)")
            out.extend(TextChunk.model_validate(chunk).tokens)
        return out


class SamplingParamsBody(Body):
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0


class SampleBody(Body):
    """``asample`` (also ``compute_logprobs``: one token with ``prompt_logprobs``)."""

    num_samples: int = Field(1, ge=1)
    prompt: ModelInputBody
    sampling_params: SamplingParamsBody
    base_model: str | None = None
    model_path: str | None = None
    sampling_session_id: str | None = None
    seq_id: int | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: int | None = None
    record_stability_info: bool | None = None
    type: Literal["sample"] = "sample"


class RetrieveBody(Body):
    """``retrieve_future``."""

    request_id: str
    allow_metadata_only: bool = False


# --------------------------------------------------------------------------------------------- protobuf


def _pb() -> Any:
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


def _tensor(pb: Any, message: Any, where: str) -> np.ndarray:
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
    if message.dtype not in dtypes:
        raise InputDataError(f"{where}: tensor dtype {message.dtype} is not float32 or int64")
    dtype = np.dtype(dtypes[message.dtype])
    shape = [int(n) for n in message.shape]
    if message.HasField("sparse_csr"):
        csr = message.sparse_csr
        values = _frombuffer(csr.values, dtype, where)
        rows = _frombuffer(csr.crow_indices, np.dtype(np.int64), where)
        cols = _frombuffer(csr.col_indices, np.dtype(np.int64), where)
        if len(shape) != 2 or len(rows) != shape[0] + 1 or len(cols) != len(values) or (
                len(cols) and (cols.min() < 0 or cols.max() >= shape[1])) or np.any(np.diff(rows) < 0) or (
                len(rows) and (rows[0] != 0 or rows[-1] != len(values))):
            raise InputDataError(f"{where}: malformed sparse (CSR) tensor")
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            dense[row, cols[rows[row]:rows[row + 1]]] = values[rows[row]:rows[row + 1]]
        return dense
    values = _frombuffer(message.dense, dtype, where)
    if shape and int(np.prod(shape)) != len(values):
        raise InputDataError(f"{where}: {len(values)} values for shape {shape}")
    return values.reshape(shape) if shape else values


def _frombuffer(data: bytes, dtype: np.dtype, where: str) -> np.ndarray:
    if len(data) % dtype.itemsize:
        raise InputDataError(f"{where}: {len(data)} bytes is not a whole number of {dtype.name} values")
    return np.frombuffer(data, dtype=dtype).copy()


class ForwardBackwardCall(BaseModel):
    """A decoded ``forward_backward`` request."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    model_id: str
    seq_id: int
    loss_fn: str
    loss_config: dict[str, float]
    forward_only: bool
    examples: list[Example]


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """The request in ``body`` (``tinker_public.ForwardBackwardRequest``); InputDataError when it is malformed."""
    from google.protobuf.message import DecodeError

    pb = _pb()
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise InputDataError(f"the forward_backward body is not a ForwardBackwardRequest message: {exc}") from None
    config: dict[str, float] = {key: float(value) for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        if value.HasField("number"):
            config[key] = float(value.number)
        else:
            raise InputDataError(f"loss_fn_config[{key!r}] is text ({value.text!r}); the served losses take numbers")
    examples = []
    for index, datum in enumerate(message.data):
        tokens: list[np.ndarray] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise InputDataError(f"datum {index}: model_input chunk {chunk.WhichOneof('chunk')!r} is not served "
                                     "here (text models only: encoded_text)")
            tokens.append(_frombuffer(chunk.encoded_text.tokens, np.dtype(np.int32), f"datum {index}"))
        inputs = {name: _tensor(pb, tensor, f"datum {index}: loss_fn_inputs[{name!r}]")
                  for name, tensor in datum.loss_fn_inputs.items()}
        for name, values in inputs.items():
            if values.ndim != 1:
                raise InputDataError(f"datum {index}: loss_fn_inputs[{name!r}] has shape {list(values.shape)}; the "
                                     "served losses take one value per position")
        joined = np.concatenate(tokens).astype(np.int64) if tokens else np.zeros(0, np.int64)
        examples.append(Example(joined, {name: values.astype(np.int64 if name == "target_tokens" else np.float32)
                                         for name, values in inputs.items()}))
    return ForwardBackwardCall(model_id=message.model_id, seq_id=int(message.seq_id), loss_fn=message.loss_fn,
                               loss_config=config, forward_only=bool(message.forward_only), examples=examples)


def _batched(pb: Any, arrays: Sequence[np.ndarray]) -> Any:
    tensor = pb.BatchedTensor()
    flat = [np.ascontiguousarray(a, dtype=np.float32).reshape(-1) for a in arrays]
    offsets = np.cumsum([0] + [a.nbytes for a in flat]).astype(np.int64)
    tensor.data = b"".join(a.tobytes() for a in flat)
    tensor.offsets = offsets.tobytes()
    tensor.dtype = pb.DTYPE_FLOAT32
    return tensor


def encode_forward_result(result: ForwardResult) -> bytes:
    """``tinker_public.ForwardBackwardOutput``: one record with per-datum ``logprobs`` and ``elementwise_loss``."""
    pb = _pb()
    message = pb.ForwardBackwardOutput()
    message.loss_fn_output_type = "ArrayRecord"
    record = message.loss_fn_outputs.add()
    record.type_tag = "ArrayRecord"
    record.num_datums = len(result.outputs)
    names = sorted(result.outputs[0]) if result.outputs else []
    for name in names:
        record.fields[name].CopyFrom(_batched(pb, [output[name] for output in result.outputs]))
    for key, value in result.metrics.items():
        message.metrics[key] = float(value)
    return bytes(message.SerializeToString())


def encode_sample_result(result: SampleResult) -> bytes:
    """``tinker_public.SampleResponse``: tokens int32, logprobs float32, prompt logprobs NaN at position 0."""
    pb = _pb()
    message = pb.SampleResponse()
    for sequence in result.sequences:
        out = message.sequences.add()
        out.stop_reason = pb.STOP_REASON_STOP if sequence.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        out.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        out.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if result.prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(result.prompt_logprobs, dtype=np.float32).tobytes()
    return bytes(message.SerializeToString())
