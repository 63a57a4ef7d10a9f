"""Real processes for the service tests: ``blobkit serve`` on 127.0.0.1 on a free port, and ``blobkit worker``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

BLOBKIT = [sys.executable, "-m", "blobkit.cli"]
URL_LINE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def env(**extra: str) -> dict[str, str]:
    """The environment of a child process: offline, unbuffered, plus ``extra``."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **extra}


@dataclass
class Server:
    """A running ``blobkit serve`` process."""

    process: subprocess.Popen[str]
    url: str
    store: Path
    log: Path

    def client(self, key: str | None = None, timeout: float = 60.0) -> httpx.Client:
        """An HTTP client for this server (with ``X-API-Key`` when ``key`` is given)."""
        headers = {"X-API-Key": key} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(store: Path, log: Path, port: int = 0, *extra: str, **environ: str) -> Server:
    """Start ``blobkit serve --store STORE --port PORT`` and wait for its URL line (stdout) and a first answer."""
    out = open(log, "a", encoding="utf-8")  # noqa: SIM115 - the child writes to it for its whole life
    process = subprocess.Popen([*BLOBKIT, "serve", "--store", str(store), "--port", str(port), *extra],
                               stdout=subprocess.PIPE, stderr=out, text=True, env=env(**environ))
    assert process.stdout is not None
    line = process.stdout.readline()
    match = URL_LINE.search(line)
    if not match:
        process.kill()
        raise AssertionError(f"blobkit serve did not announce its URL: {line!r}; log: {log.read_text()[-2000:]}")
    server = Server(process, match.group(1), store, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(server.url + "/openapi.json", timeout=5)
            return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.stop(signal.SIGKILL)
    raise AssertionError("blobkit serve did not answer within 60 s")


@contextmanager
def running_server(store: Path, log: Path, port: int = 0) -> Iterator[Server]:
    """A server for the duration of the block."""
    server = start_server(store, log, port)
    try:
        yield server
    finally:
        server.stop()


def create_key(store: Path, workspace: str) -> str:
    """``blobkit serve keys create --store STORE --workspace W``'s printed key."""
    result = subprocess.run([*BLOBKIT, "serve", "keys", "create", "--store", str(store), "--workspace", workspace],
                            capture_output=True, text=True, env=env(), check=True)
    return result.stdout.strip()
