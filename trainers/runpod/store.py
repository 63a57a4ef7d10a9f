"""The transfer store: objects at ``{base}/{key}``, uploaded with PUT and read with GET over HTTP.

RunPod pods cannot reach this machine, so the bundle and the results travel through an HTTP
object store that both sides can reach (``BLOBKIT_RUNPOD_STORE_URL``, optional bearer token in
``BLOBKIT_RUNPOD_STORE_TOKEN``). Requests are retried like API requests; downloads are streamed,
size-capped and written atomically.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from trainers.errors import TrainerError
from world_format.canonical import atomic_writer

from .api import RetryPolicy, RunPodUnavailableError, Sleep, send_with_retries


def redact(url: str) -> str:
    """A URL without user info, query or fragment (where presigned secrets would live)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class HttpStore:
    """Objects at ``{base}/{key}``: uploaded with PUT, read with GET, optional bearer token."""

    def __init__(self, base_url: str, token: str | None, *, retry: RetryPolicy, sleep: Sleep = time.sleep,
                 timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._retry, self._sleep = retry, sleep
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout), headers=headers)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def url(self, key: str) -> str:
        """The full URL of an object."""
        return f"{self.base_url}/{key}"

    def _fail(self, response: httpx.Response, what: str, key: str) -> TrainerError:
        return TrainerError(f"transfer store: {what} {redact(self.url(key))} failed: HTTP {response.status_code} "
                            f"{response.reason_phrase}")

    def put_file(self, key: str, path: Path) -> None:
        """Upload a file (streamed; re-opened for every retry)."""
        def body() -> Iterator[bytes]:
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    yield block

        response = send_with_retries(self._http, "PUT", self.url(key), policy=self._retry, sleep=self._sleep,
                                     idempotent=True, content_factory=body,
                                     headers={"Content-Length": str(path.stat().st_size),
                                              "Content-Type": "application/octet-stream"})
        if response.status_code >= 300:
            raise self._fail(response, "upload to", key)

    def get_bytes(self, key: str, max_bytes: int) -> bytes | None:
        """A small object's bytes, or None when it does not exist (404)."""
        response = send_with_retries(self._http, "GET", self.url(key), policy=self._retry, sleep=self._sleep,
                                     idempotent=True)
        if response.status_code == 404:
            return None
        if response.status_code >= 300:
            raise self._fail(response, "download from", key)
        if len(response.content) > max_bytes:
            raise TrainerError(f"transfer store: {redact(self.url(key))} is larger than {max_bytes} bytes")
        return response.content

    def get_file(self, key: str, dest: Path, max_bytes: int) -> None:
        """Download an object to ``dest`` (streamed, size-capped, atomic)."""
        for attempt in range(self._retry.attempts):
            try:
                self._stream_to(key, dest, max_bytes)
                return
            except (httpx.TransportError, RunPodUnavailableError) as exc:
                if attempt + 1 == self._retry.attempts:
                    raise TrainerError(f"transfer store: download of {redact(self.url(key))} failed: {exc}") from None
                self._sleep(self._retry.backoff(attempt))

    def _stream_to(self, key: str, dest: Path, max_bytes: int) -> None:
        with self._http.stream("GET", self.url(key)) as response:
            if response.status_code == 429 or response.status_code >= 500:
                raise RunPodUnavailableError(f"HTTP {response.status_code}")
            if response.status_code >= 300:
                raise self._fail(response, "download from", key)
            written = 0
            with atomic_writer(dest) as out:
                for block in response.iter_bytes(1 << 20):
                    written += len(block)
                    if written > max_bytes:
                        raise TrainerError(f"transfer store: {redact(self.url(key))} exceeds {max_bytes} bytes")
                    out.write(block)
