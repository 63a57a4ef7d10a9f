"""The pod's bootstrap: verified bundle in, train, verified results out, then terminate this pod.

It runs on a bare pod before blobkit is installed, so it uses the standard library only. The host
ships this file's text, byte for byte, in ``BLOBKIT_POD_PROGRAM``, and the pod starts it with
``python3 -c "import os; exec(os.environ['BLOBKIT_POD_PROGRAM'])"``: there ``__name__`` is
``"__main__"`` and :func:`main` runs. Importing the module (as the tests do) runs nothing.

The job arrives as JSON in ``BLOBKIT_JOB`` (written by ``trainers.runpod.pod.job_spec``): the job id,
the transfer store (objects live under ``{store_url}/{job_id}/``), RunPod's API URL, the bundle's
sha256, the time limits and the steps to run (``{python}`` stands for this Python). The store's
bearer token comes in ``BLOBKIT_STORE_TOKEN``; ``RUNPOD_POD_ID`` and the pod-scoped
``RUNPOD_API_KEY`` that RunPod injects let the pod terminate itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

T = TypeVar("T")

BUNDLE = "bundle.tar.gz"
"""The job's bundle in the store and in the pod's home directory."""


def say(text: str) -> None:
    """One line of the pod's log."""
    print("[blobkit-pod] " + text, flush=True)


def retrying(action: Callable[[], T], what: str, attempts: int = 6, delay: float = 0.5) -> T:
    """``action()``, retried on network errors and HTTP 429/5xx with exponential backoff; other HTTP errors raise."""
    error: Exception | None = None
    for attempt in range(attempts):
        try:
            return action()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise
            error = exc
        except (urllib.error.URLError, OSError) as exc:
            error = exc
        if attempt + 1 < attempts:
            say(f"{what}: {error}; retrying")
            time.sleep(min(30.0, 2**attempt * delay))
    raise RuntimeError(f"{what}: gave up: {error}")


def sha256(path: str) -> str:
    """The hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(archive: str, dest: str) -> None:
    """Extract a ``.tar.gz`` into ``dest`` (with tarfile's data filter where this Python has it)."""
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)


def run_step(step: Mapping[str, Any], log: IO[str], cwd: str) -> None:
    """Run one step in ``cwd``, its output copied to stdout and ``log``; RuntimeError when it fails."""
    argv = [sys.executable if part == "{python}" else str(part) for part in step["argv"]]
    say("step " + str(step["name"]) + ": " + " ".join(argv))
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace")
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
    if process.wait() != 0:
        raise RuntimeError(f"step {step['name']} exited with code {process.returncode}")


class PodJob:
    """One job on this pod: its files under ``home``, the store and API it talks to, and how it ends."""

    def __init__(self, job: Mapping[str, Any], home: str, environ: Mapping[str, str], *,
                 started: float | None = None, retry_delay: float = 0.5,
                 exit_process: Callable[[int], object] = os._exit) -> None:
        self.job = job
        self.home = home
        self.environ = environ
        self.started = time.time() if started is None else started
        self.retry_delay = retry_delay
        self.exit_process = exit_process

    def path(self, name: str) -> str:
        """A file in the job's home directory."""
        return os.path.join(self.home, name)

    def store_request(self, name: str, method: str = "GET", data: IO[bytes] | None = None,
                      size: int | None = None) -> urllib.request.Request:
        """A request for object ``name`` of this job in the store (with the store's bearer token, if any)."""
        headers = {}
        if self.environ.get("BLOBKIT_STORE_TOKEN"):
            headers["Authorization"] = "Bearer " + self.environ["BLOBKIT_STORE_TOKEN"]
        if size is not None:
            headers.update({"Content-Length": str(size), "Content-Type": "application/octet-stream"})
        url = str(self.job["store_url"]).rstrip("/") + "/" + str(self.job["job_id"]) + "/" + name
        return urllib.request.Request(url, data=data, method=method, headers=headers)

    def download(self, name: str, dest: str) -> None:
        """Download object ``name`` to ``dest``, retrying."""
        def go() -> None:
            with urllib.request.urlopen(self.store_request(name), timeout=300) as response, \
                    open(dest, "wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        retrying(go, "download " + name, delay=self.retry_delay)

    def upload(self, name: str, path: str, attempts: int = 6) -> None:
        """Upload ``path`` as object ``name``, retrying (the file is re-read for every try)."""
        def go() -> None:
            with open(path, "rb") as handle:
                request = self.store_request(name, "PUT", handle, os.path.getsize(path))
                urllib.request.urlopen(request, timeout=600).read()
        retrying(go, "upload " + name, attempts, self.retry_delay)

    def fetch_bundle(self, done: dict[str, Any]) -> str:
        """Download the bundle and refuse it unless its sha256 is the one the host uploaded; return its path."""
        bundle = self.path(BUNDLE)
        self.download(BUNDLE, bundle)
        done["bundle_sha256"] = sha256(bundle)
        if done["bundle_sha256"] != self.job["bundle_sha256"]:
            raise RuntimeError(f"bundle sha256 mismatch: expected {self.job['bundle_sha256']}, "
                               f"got {done['bundle_sha256']}")
        return bundle

    def write_done(self, done: dict[str, Any], attempts: int = 6) -> None:
        """Write done.json (with the seconds this job took) and upload it: the last thing the pod sends."""
        done["seconds"] = round(time.time() - self.started, 1)
        with open(self.path("done.json"), "w") as handle:
            json.dump(done, handle, sort_keys=True)
        self.upload("done.json", self.path("done.json"), attempts)

    def end_pod(self) -> bool:
        """Terminate this pod through RunPod's API with its pod-scoped key; False when that was not possible."""
        pod, key = self.environ.get("RUNPOD_POD_ID"), self.environ.get("RUNPOD_API_KEY")
        if not (pod and key):
            return False
        request = urllib.request.Request(str(self.job["api_url"]).rstrip("/") + "/v2/pods/" + pod, method="DELETE",
                                         headers={"Authorization": "Bearer " + key})
        try:
            retrying(lambda: urllib.request.urlopen(request, timeout=60).read(), "terminate", delay=self.retry_delay)
        except Exception as exc:
            say(f"self-terminate failed: {exc}")
            return False
        return True

    def terminate_self(self, reason: str, code: int) -> None:
        """Terminate this pod, then exit with ``code`` (the container ends either way)."""
        say(f"terminating this pod ({reason})")
        self.end_pod()
        self.exit_process(code)

    def watchdog(self) -> None:
        """Sleep until the job's time is up, record the stop in done.json, and terminate the pod."""
        now = time.time()
        limit = min(float(self.job["deadline_epoch"]) - now, float(self.job["max_seconds"]) - (now - self.started))
        time.sleep(max(0.0, limit))
        say("--max-hours reached")
        try:
            self.write_done({"job_id": self.job["job_id"], "status": "failed",
                             "bundle_sha256": self.job["bundle_sha256"],
                             "error": "the pod's watchdog stopped it at --max-hours"}, attempts=1)
        except Exception as exc:
            say(f"could not record the stop: {exc}")
        self.terminate_self("max hours reached", 3)

    def work(self, done: dict[str, Any]) -> None:
        """Verified bundle in, every step run in the unpacked bundle, results out; sets ``done['status']``."""
        unpack(self.fetch_bundle(done), self.path("job"))
        workdir = self.path(os.path.join("job", "bundle"))
        with open(self.path("train.log"), "w") as log:
            for step in self.job["steps"]:
                run_step(step, log, workdir)
        with open(os.path.join(workdir, "results.json")) as handle:
            done["results"] = json.load(handle)
        self.upload("results.tar.zst", os.path.join(workdir, "results.tar.zst"))
        done["status"] = "ok"

    def run(self) -> dict[str, Any]:
        """Do the work, then upload train.log and done.json whatever happened; return done.json's content."""
        done: dict[str, Any] = {"job_id": self.job["job_id"], "status": "failed", "bundle_sha256": None}
        try:
            self.work(done)
        except Exception as exc:
            done["error"] = f"{type(exc).__name__}: {exc}"
            say(done["error"])
        if os.path.exists(self.path("train.log")):
            try:
                self.upload("train.log", self.path("train.log"))
            except Exception as exc:
                say(f"could not upload train.log: {exc}")
        try:
            self.write_done(done)
        except Exception as exc:
            say(f"could not upload done.json: {exc}")
        return done


def main() -> None:
    """The pod's entry point: start the watchdog, run the job, terminate the pod."""
    pod = PodJob(json.loads(os.environ["BLOBKIT_JOB"]), os.getcwd(), os.environ)
    threading.Thread(target=pod.watchdog, daemon=True).start()
    done = pod.run()
    pod.terminate_self("finished", 0 if done["status"] == "ok" else 1)


if __name__ == "__main__":
    main()
