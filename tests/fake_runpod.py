"""A fake RunPod: a real HTTP server on 127.0.0.1 speaking the subset of REST API v2 that blobkit uses.

It also plays the two things a real run needs besides the API:

* the transfer store (``PUT``/``GET`` under ``/store/``, optional bearer token), and
* the pods: when a pod reaches RUNNING, its start command (``args``, i.e. blobkit's real pod
  program) runs in a subprocess with the pod's environment plus ``RUNPOD_POD_ID`` and a
  pod-scoped ``RUNPOD_API_KEY``, exactly what RunPod injects. Only the GPU work is replaced:
  the ``train`` step runs ``train_script`` (a stand-in trainer) instead of ``blobkit train``.

Faults are injected with :meth:`FakeRunPod.fail_next` (429 with Retry-After, 503, a connection
dropped before the response, or dropped after the request took effect) and with ``behaviour``
for pods created afterwards: ``normal``, ``stuck`` (never leaves PROVISIONING), ``error``
(STARTING → ERROR), ``hang`` (RUNNING, but its program never starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

CATALOG: list[dict[str, Any]] = [
    {"id": "NVIDIA GeForce RTX 4090", "name": "RTX 4090", "pool": "ADA_24", "manufacturer": "NVIDIA", "memory": 24,
     "secure": True, "community": True, "price": {"secure": 0.69, "community": 0.34},
     "maxCount": {"secure": 8, "community": 4}},
    {"id": "NVIDIA H100 80GB HBM3", "name": "H100 SXM", "pool": "HOPPER_141", "manufacturer": "NVIDIA",
     "memory": 80, "secure": True, "community": False, "price": {"secure": 2.99, "community": 2.69},
     "maxCount": {"secure": 8, "community": 0}},
]
ERROR_LOG = ["starting container", "CUDA error: no kernel image is available for execution on the device"]
ENV_PASSTHROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


@dataclass
class Fault:
    """One injected failure, matched on method and path prefix."""

    kind: str
    method: str | None
    path: str | None
    times: int
    retry_after: str

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and self.method in (None, method) and (self.path is None or fnmatchcase(path, self.path))


@dataclass
class FakePod:
    """A pod and the process that plays its container."""

    data: dict[str, Any]
    behaviour: str
    key: str
    polls: int = 0
    deleted_by: str | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None


@dataclass
class Routed:
    """A response to send, and work to do after sending it."""

    status: int
    payload: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    after: Callable[[], None] | None = None


def _json(status: int, value: Any) -> Routed:
    return Routed(status, json.dumps(value).encode())


def _problem(status: int, title: str, detail: str) -> Routed:
    body = json.dumps({"title": title, "status": status, "detail": detail}).encode()
    return Routed(status, body, "application/problem+json")


class FakeRunPod:
    """The fake API + store + pods. Use as a context manager; ``url`` is the API base URL."""

    def __init__(self, workdir: Path, *, api_key: str = "test-key", store_token: str | None = "store-token",
                 train_script: str | None = None, provisioning_polls: int = 1, starting_polls: int = 1) -> None:
        self.workdir = Path(workdir)
        self.api_key, self.store_token, self.train_script = api_key, store_token, train_script
        self.provisioning_polls, self.starting_polls = provisioning_polls, starting_polls
        self.behaviour = "normal"
        self.pods: dict[str, FakePod] = {}
        self.store: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str]] = []
        self.created_bodies: list[dict[str, Any]] = []
        self._faults: list[Fault] = []
        self._lock = threading.RLock()
        self._counter = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # ------------------------------------------------------------------ lifecycle and inspection

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def store_url(self) -> str:
        return f"{self.url}/store"

    def __enter__(self) -> FakeRunPod:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            for pod in self.pods.values():
                self._kill(pod)
        self._server.shutdown()
        self._server.server_close()

    def fail_next(self, kind: str, times: int = 1, *, method: str | None = None, path: str | None = None,
                  retry_after: str = "0") -> None:
        """Inject ``times`` failures of ``kind`` (429, 503, drop, drop_after) for requests matching a path glob."""
        with self._lock:
            self._faults.append(Fault(kind, method, path, times, retry_after))

    def live_pods(self) -> list[dict[str, Any]]:
        """Pods that still exist (anything but deleted or TERMINATED): what would still bill."""
        with self._lock:
            return [p.data for p in self.pods.values() if p.deleted_by is None and p.data["status"] != "TERMINATED"]

    def add_pod(self, name: str, status: str = "RUNNING") -> dict[str, Any]:
        """A pod created outside any job (e.g. left behind by a crashed run)."""
        with self._lock:
            pod = self._new_pod({"name": name, "image": "img", "gpu": {"id": CATALOG[0]["id"], "count": 1}}, "hang")
            pod.data["status"] = status
            return pod.data

    def count(self, method: str, path_prefix: str) -> int:
        """How many requests with this method and path prefix arrived (faulted ones included)."""
        return sum(1 for m, p, _ in self.requests if m == method and p.startswith(path_prefix))

    # ------------------------------------------------------------------ request handling

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[Routed | None, Fault | None]:
        """Route one request; a None response means: drop the connection without answering."""
        parts = urlsplit(raw_path)
        with self._lock:
            who = self._who(headers.get("Authorization", ""))
            self.requests.append((method, parts.path, who))
            fault = next((f for f in self._faults if f.matches(method, parts.path)), None)
            if fault is not None:
                fault.times -= 1
                if fault.kind == "drop":
                    return None, fault
                if fault.kind == "429":
                    return Routed(429, _problem(429, "Too Many Requests", "rate limit").payload,
                                  "application/problem+json", {"Retry-After": fault.retry_after}), fault
                if fault.kind == "503":
                    return _problem(503, "Service Unavailable", "upstream unavailable"), fault
            routed = self._route(method, parts.path, parse_qs(parts.query), who, body)
            return (None if fault is not None and fault.kind == "drop_after" else routed), fault

    def _who(self, authorization: str) -> str:
        token = authorization.removeprefix("Bearer ").strip()
        if token and token == self.api_key:
            return "user"
        if token and token == self.store_token:
            return "store"
        pod = next((p for p in self.pods.values() if p.key == token), None)
        return f"pod:{pod.data['id']}" if pod else "none"

    def _route(self, method: str, path: str, query: dict[str, list[str]], who: str, body: bytes) -> Routed:
        if path.startswith("/store/"):
            return self._route_store(method, path, who, body)
        if who == "none" or who == "store":
            return _problem(401, "Unauthorized", "missing bearer token")
        if path == "/v2/catalog/gpus" and method == "GET":
            return _json(200, {"gpus": CATALOG})
        if path == "/v2/pods" and who == "user":
            return self._create(body) if method == "POST" else _json(200, {"pods": self.live_pods()})
        segments = path.removeprefix("/v2/pods/").split("/")
        pod = self.pods.get(segments[0]) if path.startswith("/v2/pods/") else None
        if pod is None or pod.deleted_by is not None:
            return _problem(404, "Not Found", "pod not found")
        if who not in ("user", f"pod:{pod.data['id']}"):
            return _problem(403, "Forbidden", "access denied")
        if len(segments) == 2 and segments[1] == "logs" and method == "GET":
            return self._logs(pod, int(query.get("tail", ["100"])[0]))
        if len(segments) == 1 and method == "GET":
            self._advance(pod)
            return _json(200, pod.data)
        if len(segments) == 1 and method == "DELETE":
            pod.deleted_by = who
            pod.data["status"] = "TERMINATED"
            return Routed(204, after=lambda: self._kill(pod))
        return _problem(405, "Method Not Allowed", f"{method} {path}")

    def _route_store(self, method: str, path: str, who: str, body: bytes) -> Routed:
        if self.store_token and who != "store":
            return _problem(401, "Unauthorized", "store token required")
        key = path.removeprefix("/store/")
        if method == "PUT":
            self.store[key] = body
            return Routed(201)
        if method == "GET" and key in self.store:
            return Routed(200, self.store[key], "application/octet-stream")
        return _problem(404, "Not Found", key)

    # ------------------------------------------------------------------ pods

    def _create(self, body: bytes) -> Routed:
        try:
            request = json.loads(body)
        except ValueError:
            return _problem(400, "Bad Request", "body is not JSON")
        missing = [k for k in ("name", "image", "gpu") if not request.get(k)]
        if missing:
            return Routed(422, json.dumps({"title": "Unprocessable Entity", "status": 422, "detail": "invalid",
                                           "errors": [f"$: missing {k}" for k in missing]}).encode(),
                          "application/problem+json")
        if request["gpu"].get("id") not in {g["id"] for g in CATALOG}:
            return _problem(400, "Bad Request", "no capacity for this GPU type")
        self.created_bodies.append(request)
        return _json(201, self._new_pod(request, self.behaviour).data)

    def _new_pod(self, request: dict[str, Any], behaviour: str) -> FakePod:
        self._counter += 1
        pod_id = f"pod{self._counter:04d}"
        price = next(g["price"]["secure"] for g in CATALOG if g["id"] == request["gpu"]["id"])
        data = {"id": pod_id, "name": request["name"], "image": request["image"], "args": request.get("args", ""),
                "disk": request.get("disk", 20), "env": request.get("env", {}), "ports": [], "registry": None,
                "status": "PROVISIONING", "actions": ["terminate"], "gpu": {**request["gpu"], "vcpuCount": 8,
                                                                           "memory": 32},
                "cloud": request.get("cloud", "SECURE"), "cost": price * request["gpu"].get("count", 1),
                "createdAt": "2026-11-30T00:00:00Z", "startedAt": None}
        pod = FakePod(data, behaviour, key=f"podkey-{pod_id}")
        self.pods[pod_id] = pod
        return pod

    def _advance(self, pod: FakePod) -> None:
        pod.polls += 1
        status = pod.data["status"]
        if pod.behaviour == "stuck":
            return
        if status == "PROVISIONING" and pod.polls >= self.provisioning_polls:
            pod.data["status"] = "STARTING"
        elif status == "STARTING" and pod.polls >= self.provisioning_polls + self.starting_polls:
            pod.data["status"] = "ERROR" if pod.behaviour == "error" else "RUNNING"
            if pod.behaviour == "normal":
                self._start(pod)
        elif status == "RUNNING" and pod.process is not None and pod.process.poll() is not None:
            pod.data.update(status="EXITED", cost=0.0)

    def _pod_env(self, pod: FakePod) -> dict[str, str]:
        env = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
        env.update(pod.data["env"])
        env.update(RUNPOD_POD_ID=pod.data["id"], RUNPOD_API_KEY=pod.key)
        if self.train_script is not None and "BLOBKIT_JOB" in env:
            job = json.loads(env["BLOBKIT_JOB"])
            for step in job["steps"]:
                if step["name"] == "train":
                    step["argv"] = ["{python}", "-c", self.train_script, *step["argv"][3:]]
            env["BLOBKIT_JOB"] = json.dumps(job)
        return env

    def _start(self, pod: FakePod) -> None:
        argv = shlex.split(pod.data["args"])
        if not argv:
            return
        if argv[0] in ("python3", "python"):
            argv[0] = sys.executable
        home = self.workdir / pod.data["id"]
        home.mkdir(parents=True, exist_ok=True)
        pod.log_path = self.workdir / f"{pod.data['id']}.log"
        with open(pod.log_path, "wb") as log:
            pod.process = subprocess.Popen(argv, cwd=home, env=self._pod_env(pod), stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)

    def _kill(self, pod: FakePod) -> None:
        process = pod.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def _logs(self, pod: FakePod, tail: int) -> Routed:
        lines = list(ERROR_LOG) if pod.behaviour == "error" else []
        if pod.log_path is not None and pod.log_path.exists():
            lines += pod.log_path.read_text(errors="replace").splitlines()
        events = "".join(f"id: 2026-11-30T00:00:{i:02d}Z\ndata: "
                         f"{json.dumps({'ts': '2026-11-30T00:00:00Z', 'source': 'container', 'line': line})}\n\n"
                         for i, line in enumerate(lines[-tail:]))
        return Routed(200, events.encode(), "text/event-stream")


class _Handler(BaseHTTPRequestHandler):
    """Reads the request, asks the fake, writes (or withholds) the answer."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        routed, _fault = self.server.fake.handle(self.command, self.path, self.headers, body)  # type: ignore[attr-defined]
        if routed is None:
            self.close_connection = True
            return
        self.send_response(routed.status)
        for name, value in routed.headers.items():
            self.send_header(name, value)
        if routed.status != 204:
            self.send_header("Content-Type", routed.content_type)
            self.send_header("Content-Length", str(len(routed.payload)))
        self.end_headers()
        if routed.status != 204 and self.command != "HEAD":
            self.wfile.write(routed.payload)
        self.wfile.flush()
        if routed.after is not None:
            threading.Thread(target=routed.after, daemon=True).start()

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve
