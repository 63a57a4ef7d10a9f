"""The RunPod REST v2 client (trainers/runpod/api.py) against a real local HTTP server (tests/fake_runpod.py)."""

from __future__ import annotations

import pickle

import pytest
from fake_runpod import FakeRunPod
from runpod_support import FAST_RETRY, KEY

from blobkit.errors import TrainerError
from trainers.runpod.api import (
    RetryPolicy,
    RunPodAuthError,
    RunPodClient,
    RunPodNotFoundError,
    RunPodRequestError,
    RunPodUnavailableError,
    retry_after_seconds,
)


def test_client_honours_retry_after_on_429(fake: FakeRunPod) -> None:
    fake.fail_next("429", 2, path="/v2/catalog/gpus", retry_after="1")
    slept: list[float] = []
    with RunPodClient(KEY, fake.url, sleep=slept.append) as client:
        gpus = client.gpu_types()
    assert slept == [1.0, 1.0]
    assert any(gpu["id"] == "NVIDIA GeForce RTX 4090" for gpu in gpus)
    assert fake.live_pods() == []


def test_client_backs_off_on_5xx_and_then_gives_up(fake: FakeRunPod) -> None:
    fake.fail_next("503", 10, path="/v2/pods")
    slept: list[float] = []
    policy = RetryPolicy(attempts=4, base_delay=0.5, max_delay=30)
    with RunPodClient(KEY, fake.url, retry=policy, sleep=slept.append) as client, \
            pytest.raises(RunPodUnavailableError, match="gave up after 4 attempts"):
        client.list_pods()
    assert slept == [0.5, 1.0, 2.0]
    assert fake.live_pods() == []


def test_client_never_repeats_a_create_whose_outcome_is_unknown(fake: FakeRunPod) -> None:
    fake.fail_next("503", 1, method="POST", path="/v2/pods")
    with RunPodClient(KEY, fake.url, retry=FAST_RETRY) as client, \
            pytest.raises(RunPodUnavailableError, match="may or may not"):
        client.create_pod({"name": "blobkit-x", "image": "img", "gpu": {"id": "NVIDIA GeForce RTX 4090"}})
    assert fake.count("POST", "/v2/pods") == 1
    assert fake.live_pods() == []


def test_client_errors_are_typed_picklable_and_never_show_the_key(fake: FakeRunPod) -> None:
    with RunPodClient("wrong-secret", fake.url, retry=FAST_RETRY) as client, \
            pytest.raises(RunPodAuthError) as auth:
        client.list_pods()
    assert "wrong-secret" not in str(auth.value) and "wrong-secret" not in repr(client)
    with RunPodClient(KEY, fake.url, retry=FAST_RETRY) as client:
        with pytest.raises(RunPodNotFoundError):
            client.get_pod("nope")
        with pytest.raises(RunPodRequestError, match="missing image") as invalid:
            client.create_pod({"name": "blobkit-x", "gpu": {"id": "NVIDIA GeForce RTX 4090"}})
        assert client.terminate_pod("nope") is False
    copy = pickle.loads(pickle.dumps(invalid.value))
    assert (type(copy), str(copy), copy.status) == (RunPodRequestError, str(invalid.value), 422)
    assert isinstance(copy, TrainerError) and isinstance(copy, ValueError)
    assert fake.live_pods() == []


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_seconds("12", now=0) == 12.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:01:00 GMT", now=30.0) == 30.0
    assert retry_after_seconds("soon", now=0) is None and retry_after_seconds(None, now=0) is None
