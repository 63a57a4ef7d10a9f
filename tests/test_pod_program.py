"""The pod's bootstrap (trainers/runpod/pod_program.py), run here against a real local HTTP server.

The fake RunPod (tests/fake_runpod.py) plays the transfer store and RunPod's API; nothing of HTTP
is mocked. The program ships to the pod as its module text, so these tests exercise what runs there.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from fake_runpod import FakeRunPod
from runpod_support import STORE_TOKEN

from trainers.runpod import POD_COMMAND, POD_PROGRAM
from trainers.runpod import pod_program as program
from trainers.runpod.bundle import write_bundle
from trainers.runpod.pod_program import PodJob, retrying, run_step

JOB_ID = "job-1"
RESULTS_SCRIPT = b"""
import json, pathlib
pathlib.Path("results.tar.zst").write_bytes(b"results" * 10)
json.dump({"name": "results.tar.zst", "sha256": "abc", "bytes": 70}, open("results.json", "w"))
print("packed")
"""


def pod_job(fake: FakeRunPod, home: Path, *, bundle_sha256: str = "", steps: list[dict[str, Any]] | None = None,
            environ: dict[str, str] | None = None, exits: list[int] | None = None, **job: Any) -> PodJob:
    """A PodJob as the pod program builds it from BLOBKIT_JOB, talking to the fake, with fast retries."""
    home.mkdir(parents=True, exist_ok=True)
    spec = {"format": "blobkit-runpod-job/1", "job_id": JOB_ID, "api_url": fake.url, "store_url": fake.store_url,
            "bundle_sha256": bundle_sha256, "max_seconds": 3600.0, "deadline_epoch": time.time() + 3600,
            "steps": steps or [], **job}
    codes = exits if exits is not None else []
    return PodJob(spec, str(home), {"BLOBKIT_STORE_TOKEN": STORE_TOKEN, **(environ or {})}, retry_delay=0.01,
                  exit_process=codes.append)


def store_bundle(fake: FakeRunPod, tmp_path: Path, files: dict[str, bytes]) -> str:
    """Write a bundle with the host's own writer, put it in the store, return its sha256."""
    bundle = write_bundle(tmp_path / "host" / "bundle.tar.gz", [], files)
    fake.store[f"{JOB_ID}/bundle.tar.gz"] = bundle.path.read_bytes()
    return bundle.sha256


def puts(fake: FakeRunPod) -> list[str]:
    return [path.removeprefix(f"/store/{JOB_ID}/") for method, path, _ in fake.requests if method == "PUT"]


# --------------------------------------------------------------------------- how it is shipped and started


def test_the_program_shipped_to_the_pod_is_the_module_text_byte_for_byte() -> None:
    assert Path(program.__file__).read_text(encoding="utf-8") == POD_PROGRAM
    assert POD_PROGRAM.rstrip().endswith('if __name__ == "__main__":\n    main()')


def test_the_pod_program_needs_only_the_standard_library_and_does_nothing_when_imported(tmp_path: Path) -> None:
    check = ("import sys; source = sys.stdin.read(); namespace = {'__name__': 'pod_program'}; "
             "exec(compile(source, 'pod_program.py', 'exec'), namespace); print(sorted(namespace['PodJob'].__dict__))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", check], input=POD_PROGRAM, capture_output=True,
                            text=True, timeout=30, cwd=tmp_path, env={})
    assert result.returncode == 0, result.stderr
    assert "watchdog" in result.stdout and "[blobkit-pod]" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_start_command_survives_a_shell(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    shell = shutil.which("sh")
    assert shell is not None
    result = subprocess.run([shell, "-c", POD_COMMAND], env={"PATH": str(tmp_path / "bin"),
                            "BLOBKIT_POD_PROGRAM": "print('pod program ran')"}, capture_output=True, text=True,
                            timeout=30, check=True)
    assert result.stdout.strip() == "pod program ran"


# --------------------------------------------------------------------------- transfer


def test_a_downloaded_bundle_is_kept_when_its_sha256_matches(fake: FakeRunPod, tmp_path: Path) -> None:
    digest = store_bundle(fake, tmp_path, {"hello.txt": b"hello"})
    done: dict[str, Any] = {}
    path = pod_job(fake, tmp_path / "pod", bundle_sha256=digest).fetch_bundle(done)
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest == done["bundle_sha256"]


def test_a_bundle_whose_sha256_differs_is_refused(fake: FakeRunPod, tmp_path: Path) -> None:
    digest = store_bundle(fake, tmp_path, {"hello.txt": b"hello"})
    done: dict[str, Any] = {}
    with pytest.raises(RuntimeError, match="bundle sha256 mismatch: expected 0000"):
        pod_job(fake, tmp_path / "pod", bundle_sha256="0" * 64).fetch_bundle(done)
    assert done["bundle_sha256"] == digest, "done.json reports what actually arrived"


def test_an_upload_carries_the_store_token_and_the_whole_file(fake: FakeRunPod, tmp_path: Path) -> None:
    source = tmp_path / "payload.bin"
    source.write_bytes(bytes(range(256)) * 4096)
    pod_job(fake, tmp_path / "pod").upload("payload.bin", str(source))
    assert fake.store[f"{JOB_ID}/payload.bin"] == source.read_bytes()
    assert [who for method, _, who in fake.requests if method == "PUT"] == ["store"]


def test_an_upload_refused_by_the_store_is_not_retried(fake: FakeRunPod, tmp_path: Path) -> None:
    source = tmp_path / "payload.bin"
    source.write_bytes(b"data")
    pod = pod_job(fake, tmp_path / "pod", environ={"BLOBKIT_STORE_TOKEN": "wrong-token"})
    with pytest.raises(urllib.error.HTTPError, match="401"):
        pod.upload("payload.bin", str(source))
    assert puts(fake) == ["payload.bin"] and fake.store == {}


def test_retrying_survives_server_errors_and_rate_limits(fake: FakeRunPod, tmp_path: Path) -> None:
    fake.fail_next("503", 2, method="PUT")
    fake.fail_next("429", 1, method="PUT")
    source = tmp_path / "payload.bin"
    source.write_bytes(b"data")
    pod_job(fake, tmp_path / "pod").upload("payload.bin", str(source))
    assert puts(fake) == ["payload.bin"] * 4 and fake.store[f"{JOB_ID}/payload.bin"] == b"data"


def test_retrying_gives_up_after_its_attempts_when_the_store_cannot_be_reached(tmp_path: Path) -> None:
    with FakeRunPod(tmp_path / "gone") as gone:
        pod = pod_job(gone, tmp_path / "pod")
        dead = gone.store_url + "/anything"
    with pytest.raises(RuntimeError, match="download bundle.tar.gz: gave up: .*refused"):
        pod.download("bundle.tar.gz", str(tmp_path / "bundle.tar.gz"))
    tries: list[int] = []

    def probe() -> bytes:
        tries.append(1)
        with urllib.request.urlopen(dead, timeout=5) as response:
            return bytes(response.read())

    with pytest.raises(RuntimeError, match="probe: gave up"):
        retrying(probe, "probe", attempts=3, delay=0.01)
    assert len(tries) == 3
    assert retrying(lambda: "fine", "anything") == "fine"


# --------------------------------------------------------------------------- steps and done.json


def test_a_step_runs_in_its_directory_with_its_output_logged(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with open(log, "w") as handle:
        run_step({"name": "hello", "argv": ["{python}", "-c", "import os; print('in', os.path.basename(os.getcwd()))"]},
                 handle, str(tmp_path))
    assert log.read_text() == f"in {tmp_path.name}\n"


def test_a_failing_step_raises_with_its_exit_code(tmp_path: Path) -> None:
    with open(tmp_path / "train.log", "w") as handle, pytest.raises(RuntimeError, match="step boom exited with code 3"):
        run_step({"name": "boom", "argv": ["{python}", "-c", "import sys; print('no GPU'); sys.exit(3)"]}, handle,
                 str(tmp_path))
    assert (tmp_path / "train.log").read_text() == "no GPU\n"


def test_done_json_records_the_outcome_and_the_seconds_taken(fake: FakeRunPod, tmp_path: Path) -> None:
    pod = pod_job(fake, tmp_path / "pod")
    pod.started -= 2.0
    pod.write_done({"job_id": JOB_ID, "status": "ok", "bundle_sha256": "abc"})
    uploaded = json.loads(fake.store[f"{JOB_ID}/done.json"])
    assert uploaded == json.loads((tmp_path / "pod" / "done.json").read_text())
    assert uploaded["status"] == "ok" and uploaded["seconds"] >= 2.0


def test_a_job_runs_its_steps_in_the_bundle_and_uploads_results_log_and_done_json_last(
        fake: FakeRunPod, tmp_path: Path) -> None:
    digest = store_bundle(fake, tmp_path, {"pack.py": RESULTS_SCRIPT})
    pod = pod_job(fake, tmp_path / "pod", bundle_sha256=digest, steps=[
        {"name": "pack", "argv": ["{python}", "pack.py"]}])
    done = pod.run()
    assert (done["status"], done["bundle_sha256"], done["results"]["sha256"]) == ("ok", digest, "abc")
    assert puts(fake) == ["results.tar.zst", "train.log", "done.json"]
    assert fake.store[f"{JOB_ID}/results.tar.zst"] == b"results" * 10
    assert fake.store[f"{JOB_ID}/train.log"] == b"packed\n"
    assert json.loads(fake.store[f"{JOB_ID}/done.json"])["status"] == "ok"


def test_a_failed_job_still_uploads_its_log_and_a_done_json_that_says_why(fake: FakeRunPod, tmp_path: Path) -> None:
    digest = store_bundle(fake, tmp_path, {"pack.py": RESULTS_SCRIPT})
    pod = pod_job(fake, tmp_path / "pod", bundle_sha256=digest, steps=[
        {"name": "train", "argv": ["{python}", "-c", "print('CUDA out of memory'); raise SystemExit(1)"]}])
    done = pod.run()
    assert done["status"] == "failed" and done["error"] == "RuntimeError: step train exited with code 1"
    assert puts(fake) == ["train.log", "done.json"]
    assert json.loads(fake.store[f"{JOB_ID}/done.json"])["error"] == done["error"]


# --------------------------------------------------------------------------- ending the pod


def test_the_watchdog_records_the_stop_and_terminates_the_pod_with_its_own_key(
        fake: FakeRunPod, tmp_path: Path) -> None:
    pod_data = fake.add_pod("blobkit-job-1")
    exits: list[int] = []
    pod = pod_job(fake, tmp_path / "pod", bundle_sha256="abc", max_seconds=0.05, exits=exits,
                  environ={"RUNPOD_POD_ID": pod_data["id"], "RUNPOD_API_KEY": fake.pods[pod_data["id"]].key})
    pod.watchdog()
    assert exits == [3]
    assert fake.pods[pod_data["id"]].deleted_by == f"pod:{pod_data['id']}"
    done = json.loads(fake.store[f"{JOB_ID}/done.json"])
    assert (done["status"], done["bundle_sha256"]) == ("failed", "abc") and "watchdog" in done["error"]
    assert fake.live_pods() == []


def test_a_pod_without_its_key_cannot_terminate_itself_but_still_exits(fake: FakeRunPod, tmp_path: Path) -> None:
    exits: list[int] = []
    pod = pod_job(fake, tmp_path / "pod", exits=exits)
    assert pod.end_pod() is False
    pod.terminate_self("finished", 0)
    assert exits == [0] and not [path for method, path, _ in fake.requests if method == "DELETE"]

