"""The Tinker engine and wire pieces without a server: loss formulas, seq_id ordering, protobuf bounds, policies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tinker")

from blobkit.errors import PolicyError  # noqa: E402
from blobkit.service.tinker.ordering import SeqQueue  # noqa: E402
from blobkit.service.tinker.policies import check_model, parse_deadline  # noqa: E402
from blobkit.service.tinker.records import Policy  # noqa: E402
from blobkit.service.tinker.wire import decode_forward_backward, encode_forward_result  # noqa: E402
from trainers.errors import InputDataError  # noqa: E402
from trainers.tinker_engine import (  # noqa: E402
    LOSSES,
    AdamSettings,
    Example,
    ForwardResult,
    LoraSettings,
    TrainingSession,
)
from trainers.tiny_model import TinyModelConfig, build_tiny_model  # noqa: E402


def test_losses_follow_tinkers_formulas() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    sampler = torch.tensor([-1.0, -1.5, -1.0])
    advantages = torch.tensor([1.0, -1.0, 2.0])
    weights = torch.tensor([0.0, 1.0, 1.0])
    assert LOSSES["cross_entropy"](logp, {"weights": weights}, {}).tolist() == [0.0, 2.0, 0.5]
    ratio = torch.exp(logp - sampler)
    assert torch.allclose(LOSSES["importance_sampling"](logp, {"logprobs": sampler, "advantages": advantages}, {}),
                          -ratio * advantages)
    ppo = LOSSES["ppo"](logp, {"logprobs": sampler, "advantages": advantages},
                        {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1})
    clipped = torch.clamp(ratio, 0.9, 1.1)
    assert torch.allclose(ppo, -torch.minimum(ratio * advantages, clipped * advantages))


def test_seq_queue_releases_requests_in_order_and_refuses_a_repeat() -> None:
    queue, ran = SeqQueue(), []
    failed: list[str] = []
    for seq in (3, 2):
        assert queue.offer(seq, lambda seq=seq: ran.append(seq), failed.append) == []
    ready = queue.offer(1, lambda: ran.append(1), failed.append)
    for release in ready:
        release()
    assert ran == [1, 2, 3] and queue.next_seq == 4
    with pytest.raises(ValueError, match="already received"):
        queue.offer(2, lambda: None, failed.append)
    queue.offer(6, lambda: None, failed.append)
    time.sleep(0.05)
    queue.expire(0.01)
    assert failed and "seq_id 4" in failed[0]


def test_malformed_forward_backward_bodies_are_input_errors() -> None:
    from tinker.proto import tinker_public_pb2 as pb

    with pytest.raises(InputDataError, match="not a ForwardBackwardRequest"):
        decode_forward_backward(b"\xff\xff\xff")
    message = pb.ForwardBackwardRequest(model_id="m", seq_id=1, loss_fn="cross_entropy")
    datum = message.data.add()
    datum.model_input.add().encoded_text.tokens = b"\x01\x00\x00"  # three bytes: not whole int32 values
    with pytest.raises(InputDataError, match="whole number"):
        decode_forward_backward(message.SerializeToString())
    datum.model_input[0].encoded_text.tokens = np.array([1, 2], np.int32).tobytes()
    tensor = datum.loss_fn_inputs["target_tokens"]
    tensor.dtype, tensor.dense = pb.DTYPE_INT64, np.array([2, 3], np.int64).tobytes()
    tensor.shape.extend([3])
    with pytest.raises(InputDataError, match="2 values for shape"):
        decode_forward_backward(message.SerializeToString())


def test_forward_results_round_trip_through_the_sdks_decoder() -> None:
    from tinker.proto.response_conv import deserialize_forward_backward_output

    result = ForwardResult([{"logprobs": np.array([-1.0, -2.0], np.float32),
                             "elementwise_loss": np.array([1.0, 2.0], np.float32)},
                            {"logprobs": np.array([-3.0], np.float32),
                             "elementwise_loss": np.array([3.0], np.float32)}], {"loss:sum": 6.0}, 3)
    decoded = deserialize_forward_backward_output(encode_forward_result(result))
    assert [o["logprobs"].tolist() for o in decoded.loss_fn_outputs] == [[-1.0, -2.0], [-3.0]]
    assert decoded.metrics == {"loss:sum": 6.0}


def test_a_policy_refuses_an_unlisted_model_and_a_large_rank() -> None:
    policy = Policy(workspace="w", user=None, models=["tiny"], max_lora_rank=8, max_tokens=None, deadline=None,
                    created_at=0.0)
    check_model(policy, "tiny", 8)
    with pytest.raises(PolicyError, match="rule models"):
        check_model(policy, "Qwen/Qwen3-8B", 8)
    with pytest.raises(PolicyError, match="rule max-lora-rank"):
        check_model(policy, "tiny", 16)
    assert parse_deadline("2027-01-31T00:00:00Z") == parse_deadline("2027-01-31T00:00:00")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = ["hello world, where is my order? " * 4, "the order 12345 shipped yesterday " * 4] * 8
    return build_tiny_model(texts, tmp_path_factory.mktemp("engine-tiny"),
                            TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300))


def _example(ids: list[int]) -> Example:
    return Example(np.array(ids[:-1], np.int64), {"target_tokens": np.array(ids[1:], np.int64),
                                                  "weights": np.ones(len(ids) - 1, np.float32)})


def test_saved_state_restores_weights_and_moments_as_safetensors_only(tiny: Path, tmp_path: Path) -> None:
    lora = LoraSettings(rank=2, seed=3, train_unembed=False)
    session = TrainingSession(tiny, lora)
    example = _example(list(range(5, 25)))
    for _ in range(2):
        session.forward_backward([example], "cross_entropy")
        session.optim_step(AdamSettings(learning_rate=1e-2))
    session.save(tmp_path / "state", optimizer=True)
    assert sorted(p.suffix for p in (tmp_path / "state").iterdir()) == [".json", ".json", ".safetensors",
                                                                       ".safetensors"]
    restored = TrainingSession(tiny, lora)
    restored.load(tmp_path / "state", optimizer=True, steps=2)
    for one in (session, restored):
        one.forward_backward([example], "cross_entropy")
        one.optim_step(AdamSettings(learning_rate=1e-2))
    after: list[Any] = [s.forward_backward([example], "cross_entropy", backward=False).metrics["loss:sum"]
                        for s in (session, restored)]
    assert after[0] == pytest.approx(after[1], abs=1e-6)


def test_an_example_outside_the_vocabulary_is_refused_before_anything_runs(tiny: Path) -> None:
    session = TrainingSession(tiny, LoraSettings(rank=2))
    with pytest.raises(InputDataError, match="datum 1.*vocabulary"):
        session.forward_backward([_example([1, 2, 3]), _example([1, 2, 10**6])], "cross_entropy")
    assert all(p.grad is None for _, p in session.trainable)
    with pytest.raises(InputDataError, match="needs loss_fn_inputs"):
        session.forward_backward([Example(np.array([1, 2]), {"target_tokens": np.array([2, 3])})], "ppo")
