"""``blobkit worker --upload-export``: the worker's evidence upload against a real ``blobkit serve`` on 127.0.0.1.

The job directory is written by hand (no training): what is under test is that the export's files arrive with the
sha256 the worker declared, that without the flag they stay on the worker, and that bytes changed on the way are
refused by the server with nothing stored. Slow only because the server is a real process (about 40 s, most of it
the worker job's kit build).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_support import Server, create_key, start_server

from blobkit.errors import ServiceError
from blobkit.service.records import Claim, WorkerHello
from blobkit.worker.attempt import upload_evidence
from blobkit.worker.client import WorkerClient

pytestmark = pytest.mark.slow  # a real `blobkit serve` process

ROOT = Path(__file__).resolve().parents[1]
RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
SMALL_WORKER_JOB = {"launch": "worker", "base_model": "tiny", "train_cases_per_task": 2, "eval_cases_per_task": 2,
                    "epochs": 1, "steps": 1}


class Claimed:
    """A running server, a user client, and a worker that has claimed one job."""

    def __init__(self, server: Server, tmp: Path) -> None:
        self.server = server
        key = create_key(server.store, "acme")
        self.user = server.client(key)
        env = self.user.post("/api/v1/twin/environments", content=RETAIL.read_bytes())
        assert env.status_code == 201, env.text
        self.jobs = f"/api/v1/twin/environments/{env.json()['env_id']}/training-jobs"
        job = self.user.post(self.jobs, json=SMALL_WORKER_JOB)
        assert job.status_code == 202, job.text
        self.job_id = job.json()["job_id"]
        made = self.user.post("/api/v1/workers", json={"name": "uploader"})
        assert made.status_code == 201, made.text
        self.token = made.json()["token"]
        self.worker = WorkerClient(server.url, self.token, patience_s=5.0, echo=lambda _: None)
        claim = self.worker.claim(WorkerHello(bases=["tiny"]))
        assert claim is not None and claim.job_id == self.job_id
        self.claim: Claim = claim

    def artifacts(self) -> dict[str, dict[str, object]]:
        record = self.user.get(f"{self.jobs}/{self.job_id}")
        assert record.status_code == 200, record.text
        return {a["name"]: a for a in record.json()["artifacts"]}

    def blob_files(self) -> set[Path]:
        return {p for p in (self.server.store / "blobs").rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def claimed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Claimed]:
    root = tmp_path_factory.mktemp("upload")
    server = start_server(root / "store", root / "serve.log")
    try:
        made = Claimed(server, root)
        yield made
        made.worker.close()
        made.user.close()
    finally:
        server.stop()


def job_dir(root: Path) -> Path:
    """A finished job's directory as the company pipeline leaves it: evidence and an export with weights."""
    rng = random.Random(7)
    (root / "rl").mkdir(parents=True)
    (root / "export").mkdir()
    (root / "rl" / "eval.json").write_text('{"rl": {"pass_rate": 0.5}}\n')
    (root / "export" / "manifest.json").write_text('{"files": {}}\n')
    (root / "export" / "model.safetensors").write_bytes(rng.randbytes(300_000))
    (root / "export" / "tokenizer.json").write_text('{"model": {"vocab": {}}}\n')
    return root


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_upload_export_only_the_evidence_and_the_export_manifest_leave_the_worker(
        claimed: Claimed, tmp_path: Path) -> None:
    folder = job_dir(tmp_path / "job")
    sent = upload_evidence(claimed.worker, claimed.claim, folder, False, lambda _: None)
    assert sent == ["eval.json", "export-manifest.json"]
    assert {"export-model.safetensors", "export-tokenizer.json"}.isdisjoint(claimed.artifacts())


def test_upload_export_sends_every_export_file_and_the_server_keeps_exactly_the_declared_sha256(
        claimed: Claimed, tmp_path: Path) -> None:
    folder = job_dir(tmp_path / "job")
    sent = upload_evidence(claimed.worker, claimed.claim, folder, True, lambda _: None)
    assert {"export-manifest.json", "export-model.safetensors", "export-tokenizer.json"} <= set(sent)
    artifacts = claimed.artifacts()
    for name in ("manifest.json", "model.safetensors", "tokenizer.json"):
        path, artifact = folder / "export" / name, artifacts[f"export-{name}"]
        assert artifact["sha256"] == sha256(path) and artifact["bytes"] == path.stat().st_size
        assert artifact["attempt_id"] == claimed.claim.attempt.attempt_id
        fetched = claimed.user.get(str(artifact["download_url"]))
        assert fetched.status_code == 200 and fetched.content == path.read_bytes()
        assert fetched.headers["x-content-sha256"] == sha256(path)


class Tampering(httpx.BaseTransport):
    """Flips one byte of every PUT body on the way to the server, leaving its declared sha256 as it was."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            body = bytearray(request.read())
            body[len(body) // 2] ^= 0xFF
            request = httpx.Request(request.method, request.url, headers=request.headers, content=bytes(body))
        return self.inner.handle_request(request)


def test_an_export_changed_on_the_way_is_refused_by_the_server_and_nothing_is_stored(
        claimed: Claimed, tmp_path: Path) -> None:
    folder = job_dir(tmp_path / "job")
    (folder / "export" / "model.safetensors").write_bytes(random.Random(8).randbytes(200_000))  # not uploaded yet
    before_artifacts, before_blobs = claimed.artifacts(), claimed.blob_files()
    tampered = WorkerClient(claimed.server.url, claimed.token, patience_s=5.0, echo=lambda _: None)
    tampered.http = httpx.Client(base_url=claimed.server.url, headers={"X-API-Key": claimed.token},
                                 transport=Tampering(), timeout=60.0)
    with pytest.raises(ServiceError, match="checksum_mismatch"):
        tampered.upload(claimed.claim.attempt.attempt_id, "export-model.safetensors",
                        folder / "export" / "model.safetensors")
    tampered.close()
    assert claimed.artifacts() == before_artifacts and claimed.blob_files() == before_blobs
