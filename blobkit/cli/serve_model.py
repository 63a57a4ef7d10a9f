"""``blobkit serve-model``: exports behind an OpenAI-compatible endpoint. The library (:mod:`blobkit.serving`)
raises; this command only translates."""

from __future__ import annotations

import os

import typer


def serve_model(model: list[str] = typer.Option(..., "--model", help="An export directory, or NAME=PATH to serve it "
                                                                     "as NAME (repeat for several)."),
                host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
                port: int = typer.Option(8001, "--port", help="Port to listen on (0: any free port, printed)."),
                api_key_env: str = typer.Option("BLOBKIT_MODEL_KEY", "--api-key-env",
                                                help="Environment variable holding the API key clients send as "
                                                     "'Authorization: Bearer KEY'; unset: a fresh key is printed."),
                log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level.")) -> None:
    """Serve exports over the OpenAI API (GET /v1/models, POST /v1/chat/completions, POST /v1/responses).

    Each export renders and parses with its own tool format, as blobkit's evaluation and replay do; greedy
    requests (temperature 0) give the turns 'blobkit replay --decoding free' gives. The first line on stdout is the
    base URL.

    Example: BLOBKIT_MODEL_KEY=secret blobkit serve-model --model out/run/export --port 8001
    """
    from blobkit.serving.server import load_models, new_api_key, serve

    key = os.environ.get(api_key_env) or ""
    generated = not key
    key = key or new_api_key()
    models = load_models(model)

    def announce(url: str) -> None:
        names = ", ".join(f"{name} ({m.manifest.get('kind')}, {m.tool_format.name} tool format)"
                          for name, m in sorted(models.items()))
        typer.echo(f"blobkit serve-model: {url} serving {names}; Ctrl-C stops")
        if generated:
            typer.echo(f"api key (set {api_key_env} to choose one): {key}")
        for name, loaded in sorted(models.items()):
            if loaded.decoding != "free":
                typer.echo(f"note: {name} was evaluated with {loaded.decoding} decoding; this endpoint decodes free, "
                           "as 'blobkit replay --decoding free' does")

    serve(models, key, host, port, announce, log_level)


def register(app: typer.Typer) -> None:
    """Add ``serve-model`` to the CLI."""
    app.command(name="serve-model")(serve_model)
