"""Serving loaded exports with uvicorn on a socket bound before it starts (``--port 0`` reports the port it got)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from .engine import LoadedModel, check_names, model_name
from .errors import ServingError


def parse_model_option(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` or ``PATH`` (served as :func:`~blobkit.serving.engine.model_name` of it)."""
    name, sep, path = value.partition("=")
    if sep and name and "/" not in name:
        return name, Path(path)
    return model_name(Path(value)), Path(value)


def new_api_key() -> str:
    """A fresh random key (``bk-…``), for a server started without one."""
    return "bk-" + secrets.token_urlsafe(24)


def load_models(options: list[str]) -> dict[str, LoadedModel]:
    """Every ``--model`` loaded (verified against its manifest); ServingError for two under one id."""
    if not options:
        raise ServingError("give at least one --model OUT/export")
    pairs = [parse_model_option(option) for option in options]
    check_names(pairs)
    return {name: LoadedModel(name, path) for name, path in pairs}


def serve(models: dict[str, LoadedModel], api_key: str, host: str, port: int, announce: Callable[[str], None],
          log_level: str = "warning") -> None:
    """Serve ``models`` until interrupted; ``announce`` receives the base URL (``http://HOST:PORT/v1``) once bound."""
    import uvicorn

    from blobkit.service.server import bind

    from .app import create_app

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    server = uvicorn.Server(uvicorn.Config(create_app(models, api_key), log_level=log_level, lifespan="off",
                                           timeout_graceful_shutdown=5))
    announce(f"http://{shown}:{bound_port}/v1")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
