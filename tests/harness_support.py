"""Real servers on 127.0.0.1 for the harness tests: an ASGI app on uvicorn in a thread, a port bound first."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def running(app: Any, path: str = "") -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (any free port) in a thread with its lifespan; yield ``http://127.0.0.1:PORT`` +
    ``path``; stop it on exit."""
    import uvicorn

    from blobkit.service.server import bind

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def reenact(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """A recorded conversation as what a harness does over MCP: ("call", (name, arguments)) per tool call and
    ("say", text) per assistant turn without calls, in order."""
    steps: list[tuple[str, Any]] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        steps += [("call", (c["function"]["name"], c["function"]["arguments"])) for c in calls]
        if not calls:
            steps.append(("say", message.get("content") or ""))
    return steps


def mcp_client(url: str, key: str) -> Any:
    """An mcp SDK client of the HTTP world at ``url`` holding ``key`` (the handshake era: one world per session)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(url, http_client=http), mode="legacy")
