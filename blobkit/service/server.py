"""Serving the app with uvicorn on a socket bound before it starts (so ``--port 0`` reports the port it got)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from .store import ServiceStore


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(store_dir: Path, host: str, port: int, announce: Callable[[str], None], log_level: str = "warning",
          lease_seconds: float = 60.0) -> None:
    """Serve the store until interrupted; ``announce`` receives the URL once the socket is bound."""
    import uvicorn

    from .app import create_app

    store = ServiceStore(store_dir)
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    app = create_app(store, lease_seconds=lease_seconds)
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    announce(f"http://{shown}:{bound_port}")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        store.close()
