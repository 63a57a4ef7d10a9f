"""The Tinker-compatible API on 127.0.0.1 for the tests: ``blobkit serve``'s app under uvicorn in a thread, a store
with keys, a registered tiny base and a policy, and the unmodified ``tinker`` SDK pointed at it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blobkit.service import ServiceStore, create_app
from blobkit.service.server import bind
from blobkit.service.tinker import tables
from blobkit.service.tinker.bases import register_base
from blobkit.service.tinker.host import TinkerHost, TinkerSettings
from blobkit.service.tinker.records import Policy

os.environ.setdefault("TINKER_TELEMETRY", "0")  # the SDK's telemetry would post to the test server after it stopped


@dataclass
class TinkerServer:
    """A running service: its base URL for the SDK, its store and its Tinker host (for white-box checks)."""

    url: str
    store: ServiceStore
    host: TinkerHost
    clients: list[Any] = field(default_factory=list)
    """The SDK clients made by :meth:`client`, closed before the server stops (their sessions' heartbeat threads
    would otherwise retry the stopped server for the rest of the test process)."""

    def client(self, key: str) -> Any:
        """A ``tinker.ServiceClient`` of ``key`` on this server."""
        import tinker

        made = tinker.ServiceClient(base_url=self.url, api_key=key)
        self.clients.append(made)
        return made

    def close_clients(self) -> None:
        """End every client's session; one whose session already ended (or never started) is skipped."""
        for made in self.clients:  # a client a test already closed, or whose session the server ended, raises
            with contextlib.suppress(Exception):
                made.close("success").result(timeout=10)


def set_policy(store: ServiceStore, workspace: str, models: list[str], *, rank: int = 8, tokens: int | None = None,
               deadline: float | None = None, user: str | None = None) -> None:
    """Set a policy (created a second ago, so the jobs that follow count against it)."""
    tables.set_policy(store, Policy(workspace=workspace, user=user, models=models, max_lora_rank=rank,
                                    max_tokens=tokens, deadline=deadline, created_at=time.time() - 1))


@contextmanager
def tinker_server(root: Path, bases: dict[str, Path], settings: TinkerSettings | None = None) -> Iterator[TinkerServer]:
    """A service over the store at ``root`` with ``bases`` registered, on a free port of 127.0.0.1."""
    import uvicorn

    store = ServiceStore(root)
    for name, path in bases.items():
        register_base(store, name, path)
    app = create_app(store)
    host = app.state.tinker = TinkerHost(store, settings or TinkerSettings())
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    running = TinkerServer(f"http://127.0.0.1:{port}/tinker", store, host)
    try:
        yield running
    finally:
        running.close_clients()
        server.should_exit = True
        thread.join(30)
        sock.close()
        host.close()
        store.close()


def text_datum(tokenizer: Any, text: str) -> Any:
    """A cross-entropy datum of ``text`` with weight 1 on every position."""
    import tinker

    ids = tokenizer.encode(text)
    return tinker.Datum(model_input=tinker.ModelInput.from_ints(ids[:-1]),
                        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})
