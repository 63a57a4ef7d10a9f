"""The unmodified ``tinker`` SDK (0.38.0) against blobkit serve's Tinker-compatible API on 127.0.0.1 (tiny model)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

import tinker  # noqa: E402
from tinker import types  # noqa: E402
from tinker_support import TinkerServer, set_policy, text_datum, tinker_server  # noqa: E402

from blobkit.errors import NotFoundError  # noqa: E402
from blobkit.service.tinker import tables  # noqa: E402
from blobkit.service.tinker.host import TinkerSettings  # noqa: E402

TEXT = "Hello, I would like to check the status of my order please."


@pytest.fixture(scope="module")
def tiny(tinker_tiny: Path) -> Path:
    return tinker_tiny


@pytest.fixture(scope="module")
def server(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerServer]:
    """One service for the module; workspace ``acme`` may train ``tiny`` up to rank 8."""
    with tinker_server(tmp_path_factory.mktemp("tinker-store"), {"tiny": tiny},
                       TinkerSettings(fwdbwd_max_chunk_len=2)) as running:
        set_policy(running.store, "acme", ["tiny"])
        yield running


@pytest.fixture(scope="module")
def key(server: TinkerServer) -> str:
    return server.store.create_key("acme")


@pytest.fixture(scope="module")
def client(server: TinkerServer, key: str) -> Iterator[Any]:
    service = server.client(key)
    yield service
    service.close("success").result()


def _metric_keys_are_name_reduction(metrics: dict[str, float]) -> bool:
    return all(key.count(":") == 1 and key.split(":")[1] in {"mean", "sum", "min", "max"} for key in metrics)


def test_a_training_client_reports_its_model_and_a_local_tokenizer(client: Any, tiny: Path) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    info = training.get_info()
    assert info.model_id.startswith("tj-") and ":train:" in info.model_id
    assert info.model_data.tokenizer_id == str(tiny.resolve()) and info.lora_rank == 4
    assert training.get_tokenizer().encode(TEXT)
    capabilities = client.create_rest_client().get_server_capabilities().result()
    assert "tiny" in {model.model_name for model in capabilities.supported_models}


def test_cross_entropy_steps_lower_the_loss_and_outputs_have_the_sdk_shapes(client: Any) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    datum = text_datum(training.get_tokenizer(), TEXT)
    losses = []
    for _ in range(5):
        output = training.forward_backward([datum], "cross_entropy").result()
        step = training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        losses.append(output.metrics["loss:sum"])
        assert output.loss_fn_outputs[0]["logprobs"].shape == [datum.model_input.length]
        assert _metric_keys_are_name_reduction(output.metrics) and step.metrics["learning_rate"] == 1e-2
    assert losses[-1] < losses[0] * 0.9, losses
    logprobs = output.loss_fn_outputs[0]["logprobs"].to_numpy()
    elementwise = output.loss_fn_outputs[0]["elementwise_loss"].to_numpy()
    assert np.allclose(-logprobs.sum(), output.metrics["loss:sum"], rtol=1e-5)
    assert np.allclose(-logprobs, elementwise, rtol=1e-6)


def test_chunks_sent_in_parallel_run_in_seq_id_order(client: Any) -> None:
    """The server tells the SDK to send 2 datums per request: 5 datums arrive as 3 parallel requests (first chunk
    last), and their outputs equal one-datum-at-a-time forwards of the same weights."""
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=3).result()
    tokenizer = training.get_tokenizer()
    data = [text_datum(tokenizer, f"{TEXT} number {i} of five") for i in range(5)]
    together = training.forward(data, "cross_entropy").result()
    alone = [training.forward([datum], "cross_entropy").result() for datum in data]
    for joint, single in zip(together.loss_fn_outputs, alone, strict=True):
        assert np.array_equal(joint["logprobs"].to_numpy(), single.loss_fn_outputs[0]["logprobs"].to_numpy())
    assert together.metrics["loss:sum"] == pytest.approx(sum(a.metrics["loss:sum"] for a in alone), rel=1e-6)


def _sampled_datum(sequence: Any, prompt: list[int], advantage: float) -> Any:
    full = prompt + list(sequence.tokens)
    zeros = [0.0] * (len(prompt) - 1)
    return types.Datum(model_input=types.ModelInput.from_ints(full[:-1]),
                       loss_fn_inputs={"target_tokens": full[1:], "logprobs": zeros + list(sequence.logprobs),
                                       "advantages": zeros + [advantage] * len(sequence.tokens)})


@pytest.mark.parametrize("loss", ["importance_sampling", "ppo"])
def test_rl_losses_apply_updates_that_raise_the_logprob_of_a_rewarded_sample(client: Any, loss: str) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=1).result()
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode(TEXT)
    sampler = training.save_weights_and_get_sampling_client().result()
    result = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=2,
                            sampling_params=types.SamplingParams(max_tokens=6, seed=5)).result()
    assert len({s.sequence_id for s in result.sequences}) == 2
    assert all(len(s.logprobs) == len(s.tokens) and s.stop_reason in ("stop", "length") for s in result.sequences)
    rewarded = _sampled_datum(result.sequences[0], prompt, 1.0)
    before = training.forward([rewarded], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    sampled = np.array(result.sequences[0].logprobs)
    assert np.allclose(before[len(prompt) - 1:], sampled, atol=1e-4)  # the sampler's logprobs are the model's
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1} if loss == "ppo" else None
    output = training.forward_backward([rewarded], loss, loss_fn_config=config).result()
    assert output.metrics["loss:sum"] == pytest.approx(-len(result.sequences[0].tokens), rel=1e-4)  # ratio 1
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = training.forward([rewarded], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert after[len(prompt) - 1:].sum() > before[len(prompt) - 1:].sum()


def test_sampling_is_seeded_and_honours_max_tokens_stop_and_top_k(client: Any) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=2).result()
    tokenizer = training.get_tokenizer()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode(TEXT))
    params = types.SamplingParams(max_tokens=8, seed=11, temperature=1.0)
    first = sampler.sample(prompt, num_samples=3, sampling_params=params).result()
    again = sampler.sample(prompt, num_samples=3, sampling_params=params).result()
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert all(len(s.tokens) <= 8 for s in first.sequences)
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.0)).result().sequences[0]
    top1 = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, top_k=1, seed=4)).result().sequences[0]
    assert greedy.tokens == top1.tokens
    stop = greedy.tokens[2]
    stopped = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.0, stop=[stop])).result()
    assert stopped.sequences[0].tokens == greedy.tokens[:greedy.tokens.index(stop) + 1]
    assert stopped.sequences[0].stop_reason == "stop"
    logprobs = sampler.compute_logprobs(prompt).result()
    assert logprobs[0] is None and len(logprobs) == prompt.length and all(x < 0 for x in logprobs[1:])


def test_resume_with_optimizer_state_equals_the_uninterrupted_run(server: TinkerServer, client: Any,
                                                                  tiny: Path, key: str) -> None:
    def step(training: Any, datum: Any) -> float:
        loss = training.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        training.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        return float(loss)

    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=7).result()
    datum = text_datum(training.get_tokenizer(), TEXT)
    for _ in range(3):
        step(training, datum)
    path = training.save_state("after-3").result().path
    uninterrupted = [step(training, datum) for _ in range(3)]
    resumed_client = client.create_training_client_from_state_with_optimizer(path).result()
    resumed = [step(resumed_client, datum) for _ in range(3)]
    assert np.allclose(resumed, uninterrupted, rtol=0, atol=1e-5), (resumed, uninterrupted)
    fresh_moments = client.create_training_client_from_state(path).result()
    without = [step(fresh_moments, datum) for _ in range(3)]
    assert without[0] == pytest.approx(uninterrupted[0], abs=1e-5)  # same weights
    assert abs(without[2] - uninterrupted[2]) > 1e-3  # the optimizer state mattered
    parsed = types.ParsedCheckpointTinkerPath.from_tinker_path(path)
    assert parsed.checkpoint_type == "training" and parsed.training_run_id.endswith(":train:0") is not None


def test_a_server_restart_loses_no_saved_checkpoint(tiny: Path, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with tinker_server(store_dir, {"tiny": tiny}) as first:
        set_policy(first.store, "acme", ["tiny"])
        key = first.store.create_key("acme")
        training = first.client(key).create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
        datum = text_datum(training.get_tokenizer(), TEXT)
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        path = training.save_state("kept").result().path
        expected = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    with tinker_server(store_dir, {}) as second:
        again = second.client(key).create_training_client_from_state_with_optimizer(path).result()
        assert again.forward([datum], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(expected,
                                                                                                     abs=1e-5)
        [checkpoint] = tables.list_checkpoints(second.store, "acme")
        assert checkpoint.tinker_path == path and len(checkpoint.sha256) == 64


def _refusal(call: Any) -> str:
    with pytest.raises(tinker.RequestFailedError) as caught:
        call()
    return str(caught.value)


def test_policy_refusals_name_the_rule(tiny: Path, tmp_path: Path) -> None:
    with tinker_server(tmp_path / "store", {"tiny": tiny, "other": tiny}) as running:
        key = running.store.create_key("beta")
        client = running.client(key)
        create = client.create_lora_training_client
        assert "no policy permits" in _refusal(lambda: create(base_model="tiny", rank=4).result())
        set_policy(running.store, "beta", ["tiny"], rank=4, tokens=60)
        assert "rule models" in _refusal(lambda: create(base_model="other", rank=4).result())
        assert "rule max-lora-rank" in _refusal(lambda: create(base_model="tiny", rank=8).result())
        training = client.create_lora_training_client(base_model="tiny", rank=4).result()
        datum = text_datum(training.get_tokenizer(), TEXT)
        training.forward_backward([datum], "cross_entropy").result()
        assert "rule max-tokens" in _refusal(lambda: training.forward_backward([datum], "cross_entropy").result())
        set_policy(running.store, "beta", ["tiny"], rank=4, deadline=time.time() - 5)
        assert "rule deadline" in _refusal(lambda: create(base_model="tiny", rank=4).result())


def test_another_workspace_sees_nothing_and_cannot_load_a_checkpoint(server: TinkerServer, client: Any) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    path = training.save_state("private").result().path
    sampler_path = training.save_weights_for_sampler("private-sampler").result().path
    set_policy(server.store, "rival", ["tiny"])
    rival = server.client(server.store.create_key("rival"))
    message = _refusal(lambda: rival.create_training_client_from_state_with_optimizer(path).result())
    assert "no checkpoint" in message and "rival" in message
    with pytest.raises(tinker.NotFoundError):
        rival.create_sampling_client(model_path=sampler_path).result()
    rest = rival.create_rest_client()
    assert rest.list_training_runs().result().training_runs == []
    assert rest.list_user_checkpoints().result().checkpoints == []
    own = client.create_rest_client().list_user_checkpoints().result().checkpoints
    assert {path, sampler_path} <= {c.tinker_path for c in own}


def test_bad_input_is_a_user_error_not_a_hang(client: Any) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    vocab = len(training.get_tokenizer())
    bad = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                      loss_fn_inputs={"target_tokens": [2, 3, vocab + 50], "weights": [1.0, 1.0, 1.0]})
    message = _refusal(lambda: training.forward_backward([bad], "cross_entropy").result())
    assert "datum 0" in message and "vocabulary" in message
    short = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                        loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]})
    other = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    assert "shape" in _refusal(lambda: other.forward_backward([short], "cross_entropy").result())


def test_train_jobs_record_owner_status_checkpoints_and_usage(server: TinkerServer, key: str) -> None:
    client = server.client(key)
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    datum = text_datum(training.get_tokenizer(), TEXT)
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams()).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 2, types.SamplingParams(max_tokens=4)).result()
    path = training.save_weights_for_sampler("final").result().path
    job_id = training.get_info().model_id.split(":train:")[0]
    client.close("success").result()
    job = tables.get_job(server.store, "acme", job_id)
    assert job.status == "succeeded" and job.owner == key[4:20] and job.base_model == "tiny"
    assert job.last_checkpoint == path and job.finished_at is not None
    assert job.usage.forward_backward_tokens == datum.model_input.length
    assert job.usage.optimizer_steps == 1 and 2 <= job.usage.sampled_tokens <= 8 and job.usage.wall_seconds > 0
    with pytest.raises(NotFoundError, match="no train job"):
        tables.get_job(server.store, "rival", job_id)


def test_a_session_without_heartbeats_expires_and_frees_its_models(tiny: Path, tmp_path: Path) -> None:
    import httpx

    with tinker_server(tmp_path / "store", {"tiny": tiny}, TinkerSettings(heartbeat_timeout_s=1.0)) as running:
        set_policy(running.store, "acme", ["tiny"])
        headers = {"X-API-Key": running.store.create_key("acme")}
        with httpx.Client(base_url=running.url + "/api/v1", headers=headers, timeout=30) as http:
            session = http.post("/create_session", json={"tags": [], "sdk_version": "0.38.0"}).json()["session_id"]
            request = http.post("/create_model", json={"session_id": session, "model_seq_id": 0, "base_model": "tiny",
                                                       "lora_config": {"rank": 2}}).json()["request_id"]
            assert "model_id" in http.post("/retrieve_future", json={"request_id": request}).json()
            deadline = time.monotonic() + 20
            while running.host.sessions and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not running.host.sessions
            assert http.post("/session_heartbeat", json={"session_id": session}).status_code == 410
        assert tables.list_jobs(running.store, "acme")[0].status == "expired"


def test_every_request_needs_a_key_of_the_store(server: TinkerServer) -> None:
    import httpx

    anonymous = httpx.post(server.url + "/api/v1/create_session", json={"tags": [], "sdk_version": "0.38.0"})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
    forged = httpx.post(server.url + "/api/v1/client/config", json={"sdk_version": "0.38.0"},
                        headers={"X-API-Key": "tml-" + "0" * 64})
    assert forged.status_code == 401
