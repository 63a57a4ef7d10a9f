"""The worker's HTTP client: every call sends the worker token as ``X-API-Key`` and returns a typed record.

Transport failures (the server restarting) are retried with a pause for up to ``patience_s``; an error answer
is raised as the library error its JSON code names (a lost lease as :class:`~blobkit.errors.ConflictError`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from blobkit.errors import AuthError, ConflictError, NotFoundError, ServiceError, UploadChecksumError
from blobkit.service.records import (
    AttemptFinish,
    AttemptReport,
    Claim,
    LeaseState,
    WorkerHello,
)

T = TypeVar("T")
ERRORS: dict[int, type[ServiceError]] = {401: AuthError, 403: AuthError, 404: NotFoundError, 409: ConflictError}


class WorkerClient:
    """A worker's connection to one server."""

    def __init__(self, server: str, token: str, patience_s: float = 300.0, echo: Callable[[str], None] = print) -> None:
        self.server = server.rstrip("/")
        self.http = httpx.Client(base_url=self.server, headers={"X-API-Key": token}, timeout=120.0)
        self.patience_s = patience_s
        self.echo = echo

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def _call(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """Send, retrying transport errors (server down or restarting) for up to ``patience_s``."""
        deadline, warned = time.monotonic() + self.patience_s, False
        while True:
            try:
                response = send()
                break
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise ServiceError(f"{self.server} unreachable for {self.patience_s:.0f} s: {exc}") from None
                if not warned:
                    self.echo(f"server unreachable ({type(exc).__name__}); retrying")
                    warned = True
                time.sleep(1.0)
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message = f"{error['code']}: {error['message']}"
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise ERRORS.get(response.status_code, ServiceError)(f"{response.request.method} "
                                                                 f"{response.request.url.path}: {message}")
        return response

    def _json(self, method: str, path: str, body: Any, model: type[T]) -> T:
        response = self._call(lambda: self.http.request(method, path, json=body))
        return model.model_validate(response.json())  # type: ignore[attr-defined]

    def hello(self, hello: WorkerHello) -> None:
        """Say which bases this worker runs."""
        self._call(lambda: self.http.post("/api/v1/workers/hello", json=hello.model_dump()))

    def claim(self, hello: WorkerHello) -> Claim | None:
        """A claimed job, or None when no queued job fits."""
        response = self._call(lambda: self.http.post("/api/v1/workers/claim", json=hello.model_dump()))
        return None if response.status_code == 204 else Claim.model_validate(response.json())

    def heartbeat(self, attempt_id: str, report: AttemptReport) -> LeaseState:
        """Renew the lease and report; raises ConflictError when the lease was lost."""
        return self._json("POST", f"/api/v1/attempts/{attempt_id}/heartbeat", report.model_dump(mode="json"),
                          LeaseState)

    def finish(self, attempt_id: str, report: AttemptFinish) -> None:
        """End the attempt."""
        self._call(lambda: self.http.post(f"/api/v1/attempts/{attempt_id}/finish", json=report.model_dump(mode="json")))

    def download(self, path: str, dest: Path) -> str:
        """GET ``path`` into ``dest``; its sha256 must equal the server's X-Content-SHA256. Returns the sha256."""
        response = self._call(lambda: self.http.get(path))
        data = response.content
        digest = hashlib.sha256(data).hexdigest()
        if digest != response.headers.get("x-content-sha256"):
            raise UploadChecksumError(f"{path}: downloaded sha256 {digest} differs from the server's "
                                      f"{response.headers.get('x-content-sha256')}")
        dest.write_bytes(data)
        return digest

    def upload(self, attempt_id: str, name: str, path: Path) -> None:
        """PUT one evidence file with its sha256 declared (the server checks it on arrival)."""
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        self._call(lambda: self.http.put(f"/api/v1/attempts/{attempt_id}/artifacts/{name}", content=data,
                                         headers={"X-Content-SHA256": digest}))
