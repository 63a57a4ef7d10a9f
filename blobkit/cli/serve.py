"""``blobkit serve``: the training service, its API keys and environments registered from the server's disk.

The library (:mod:`blobkit.service`) raises; these commands only translate.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .output import echo_json

serve_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
keys_app = typer.Typer(no_args_is_help=True, help="API keys of the service store (tml-…).")
env_app = typer.Typer(no_args_is_help=True, help="Environments registered from the server's disk.")

STORE_HELP = "Service store directory (service.sqlite plus content-addressed blobs); created if missing."


@serve_app.callback()
def serve(ctx: typer.Context,
          store: Path | None = typer.Option(None, "--store", help=STORE_HELP),
          host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
          port: int = typer.Option(8000, "--port", help="Port to listen on (0: any free port, printed)."),
          log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level."),
          lease_seconds: float = typer.Option(60.0, "--lease-seconds", min=1.0,
                                              help="A worker that does not heartbeat for this long loses its job.")) \
        -> None:
    """Serve the training-jobs API (FastAPI on uvicorn) over --store until Ctrl-C.

    Every request needs an X-API-Key from `blobkit serve keys create`. The first line on stdout is the URL.

    Example: blobkit serve --store ./service --port 8000
    """
    if ctx.invoked_subcommand is not None:
        return
    if store is None:
        raise typer.BadParameter("--store is required", param_hint="--store")
    from blobkit.service.server import serve as run_server

    def announce(url: str) -> None:
        typer.echo(f"blobkit serve: listening on {url} (store {store}); Ctrl-C stops", err=False)

    run_server(store, host, port, announce, log_level, lease_seconds)


@keys_app.command("create")
def create_key(store: Path = typer.Option(..., "--store", help=STORE_HELP),
               workspace: str = typer.Option(..., "--workspace", help="Workspace the key belongs to (created if new)."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Create an API key of a workspace and print it once (the store keeps only a salted hash).

    Example: blobkit serve keys create --store ./service --workspace acme
    """
    from blobkit.service import ServiceStore

    with ServiceStore(store) as opened:
        key = opened.create_key(workspace)
    if as_json:
        echo_json({"workspace": workspace, "api_key": key})
    else:
        typer.echo(key)


@env_app.command("add")
def add_env(store: Path = typer.Option(..., "--store", help=STORE_HELP),
            workspace: str = typer.Option(..., "--workspace", help="Workspace the environment belongs to."),
            source: Path | None = typer.Option(None, "--source", help="A world.json or packaged world (any size)."),
            cluster_plane: str | None = typer.Option(None, "--cluster-plane",
                                                     help="Register a cluster-plane environment (tenv_) of this name "
                                                          "instead: listed, never trained on."),
            lease_hours: float | None = typer.Option(None, "--lease-hours", min=0.0,
                                                     help="Serving lease; after it, training requests answer 410."),
            as_json: bool = typer.Option(False, "--json", help="Print the environment as JSON.")) -> None:
    """Register an environment from the server's disk: a world of any size, or a cluster plane.

    Example: blobkit serve env add --store ./service --workspace acme --source examples/retail_desk/world.json
    """
    from blobkit.errors import ConfigError
    from blobkit.service import ServiceStore
    from blobkit.service.environments import add_cluster_plane, add_world_file

    if (source is None) == (cluster_plane is None):
        raise ConfigError("pass exactly one of --source PATH and --cluster-plane NAME")
    with ServiceStore(store) as opened:
        env = (add_world_file(opened, workspace, source, lease_hours) if source is not None
               else add_cluster_plane(opened, workspace, str(cluster_plane), lease_hours))
    if as_json:
        echo_json(env.model_dump(mode="json"))
    else:
        verdict = env.trainability.verdict if env.trainability else "cluster plane: not trainable"
        typer.echo(f"{env.env_id}  {env.name}: {verdict}")


def register(app: typer.Typer) -> None:
    """Add ``serve`` (and ``serve keys``, ``serve env``) to the CLI."""
    serve_app.add_typer(keys_app, name="keys")
    serve_app.add_typer(env_app, name="env")
    app.add_typer(serve_app, name="serve")
