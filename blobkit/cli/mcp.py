"""``blobkit mcp``: a kit's world as an MCP server. The library (:mod:`blobkit.mcp_world`) raises; this command
only translates."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer


def mcp(kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
        case: str | None = typer.Option(None, "--case", help="Held-out case id (default: the first)."),
        transport: str = typer.Option("stdio", "--transport", help="stdio (one session per process) or http "
                                                                    "(streamable HTTP, one world per session)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (http)."),
        port: int = typer.Option(8002, "--port", help="Port to listen on (http; 0: any free port, printed)."),
        api_key_env: str = typer.Option("BLOBKIT_MCP_KEY", "--api-key-env",
                                        help="Environment variable holding the key HTTP clients send as "
                                             "'Authorization: Bearer KEY'; unset: a fresh key is printed."),
        record: Path | None = typer.Option(None, "--record", help="On exit, write every session's conversation "
                                                                   "here as a trajectory file (blobkit eval "
                                                                   "--trajectories scores it).")) -> None:
    """Serve a kit's world over MCP: its tools with their JSON Schemas, one held-out case, a verdict per session.

    Each session plays the case on its own copy of the seed; the harness tools blobkit_say (the customer's reply
    to an agent's turn without a call) and blobkit_verdict score it with the case's VCode. Verdicts go to stderr
    on exit (stdout carries the protocol over stdio).

    Example: BLOBKIT_MCP_KEY=secret blobkit mcp --kit KIT --case c-1234 --transport http --port 8002
    """
    from blobkit.errors import ConfigError
    from blobkit.mcp_world.server import WorldServer, serve_http, serve_stdio
    from blobkit.serving.server import new_api_key
    from world_format.kit import open_kit

    if transport not in ("stdio", "http"):
        raise ConfigError(f"--transport {transport!r}: use stdio or http")

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with open_kit(kit) as opened:
        world = WorldServer(opened, case, record, report)
        try:
            if transport == "stdio":
                serve_stdio(world)
            else:
                key = os.environ.get(api_key_env) or new_api_key()

                def announce(url: str) -> None:
                    typer.echo(f"blobkit mcp: {url} serving case {world.case.case_id}; Ctrl-C stops")
                    if not os.environ.get(api_key_env):
                        typer.echo(f"api key (set {api_key_env} to choose one): {key}")

                serve_http(world, key, host, port, announce)
        finally:
            world.close()


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to the CLI."""
    app.command()(mcp)
