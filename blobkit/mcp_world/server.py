"""``blobkit mcp``: a kit's world as an MCP server (the official ``mcp`` SDK's low-level server), one held-out case.

What a client sees:

* **tools** — the world's declared tools, each with its own description and JSON Schema (the ones the model was
  trained on), plus two for the *harness* (not the agent): ``blobkit_say`` hands over the agent's turn without
  a tool call and returns the scripted customer's reply (or, once the script is used up, the verdict), and
  ``blobkit_verdict`` scores the episode so far;
* **instructions** — the world's system prompt; **prompt** ``case`` — the case's request, the opening user message.

Every session runs on its own copy of the seed (:class:`~blobkit.mcp_world.session.WorldSession`): over stdio one
process is one session; over streamable HTTP (every request with ``Authorization: Bearer KEY``) each
``Mcp-Session-Id`` is one (the SDK's handshake era: the 2026-07-28 single-exchange era keeps no session, so world
tools refuse it). When the server stops, every
session is scored and, with ``record``, written as a trajectory file ``blobkit eval --trajectories`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError
from world_format.canonical import atomic_write_bytes, jsonl_bytes
from world_format.kit import Kit, KitCase
from world_format.runtime import WorldRuntime

from .session import WorldSession, held_out_case, record_line

SAY, VERDICT = "blobkit_say", "blobkit_verdict"
"""The harness's tools (the agent is never meant to call them; Codex's config disables them for the model)."""
HARNESS_TOOLS = (SAY, VERDICT)
SESSION_HEADER = "mcp-session-id"


class WorldServer:
    """The sessions of one served case, keyed by MCP session (see the module docstring)."""

    def __init__(self, kit: Kit, case_id: str | None, record: Path | None = None,
                 report: Callable[[str], None] | None = None, *, shared: bool = False) -> None:
        self.kit, self.record, self.report, self.shared = kit, record, report, shared
        """``shared``: every MCP session plays one episode (a harness that reconnects per turn, Codex's ``exec
        resume``); the caller drives the customer through :meth:`session`."""
        self.case: KitCase = held_out_case(kit, case_id)
        assert self.case.prompt is not None
        self.tools = self.case.prompt.tools
        clash = sorted({t["function"]["name"] for t in self.tools} & set(HARNESS_TOOLS))
        if clash:
            raise ConfigError(f"the world declares a tool named {clash[0]!r}, which blobkit mcp keeps for the harness")
        self.runtime: WorldRuntime = kit.world().runtime()
        self.sessions: dict[str, WorldSession] = {}

    def session(self, key: str) -> WorldSession:
        """The session ``key`` (the one episode when shared), started on its own copy of the seed at its first use."""
        key = "episode" if self.shared else key
        if key not in self.sessions:
            self.sessions[key] = WorldSession(self.kit, self.case, self.runtime, f"{len(self.sessions) + 1}")
        return self.sessions[key]

    def tool_names(self) -> list[str]:
        """The world's tools in the case's declaration order."""
        return [t["function"]["name"] for t in self.tools]

    def system_prompt(self) -> str:
        """The world's system prompt, as the case's prompt opens with it."""
        assert self.case.prompt is not None
        return next((m["content"] for m in self.case.prompt.messages if m.get("role") == "system"), "")

    def instruction(self) -> str:
        """The customer's opening request."""
        assert self.case.prompt is not None
        return next((m["content"] for m in self.case.prompt.messages if m.get("role") == "user"), "")

    def call(self, key: str, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(the text returned, whether it is an error) for tool ``name`` called in session ``key``."""
        session = self.session(key)
        if name == SAY:
            text = arguments.get("text")
            if not isinstance(text, str):
                return json.dumps({"error": "blobkit_say needs text (a string)"}), True
            said = session.say(text)
            if said.verdict is None:
                return json.dumps({"reply": said.reply}, ensure_ascii=False), False
            return json.dumps({"final": True, **_verdict(said.verdict)}, ensure_ascii=False), False
        if name == VERDICT:
            return json.dumps({"final": session.finished, **_verdict(session.verdict())}, ensure_ascii=False), False
        if name not in {t["function"]["name"] for t in self.tools}:
            return json.dumps({"error": f"unknown tool {name!r}"}), True
        outcome = session.call(name, arguments)
        return outcome.text, outcome.error

    def close(self) -> list[dict[str, Any]]:
        """Score every session, write the record (when asked), close the copies; the trajectory lines."""
        lines = []
        for session in self.sessions.values():
            result = session.verdict()
            lines.append(record_line(session, result))
            if self.report:
                self.report(f"blobkit mcp: session {session.name}, case {self.case.case_id}: "
                            f"{result.verdict.outcome} {result.verdict.reason}".rstrip())
            session.close()
        self.sessions = {}
        if self.record is not None and lines:
            atomic_write_bytes(self.record, jsonl_bytes(lines))
        self.runtime.close()
        return lines


def _verdict(result: Any) -> dict[str, Any]:
    return {"case_id": result.case_id, "passed": result.passed, "verdict": result.verdict.to_json(),
            "answer": result.answer, "calls": len(result.trace)}


def harness_tool_specs() -> list[dict[str, Any]]:
    """The two harness tools, as function specs."""
    return [
        {"type": "function", "function": {
            "name": SAY, "description": "For the harness, not the agent: hand over the agent's turn without a tool "
                                        "call; returns the customer's reply, or the verdict once it was the final "
                                        "answer.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                           "additionalProperties": False}}},
        {"type": "function", "function": {
            "name": VERDICT, "description": "For the harness, not the agent: the verdict of the episode so far.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}},
    ]


def build_server(world: WorldServer) -> Any:
    """The SDK's low-level ``Server`` for ``world`` (tools with their own schemas, the ``case`` prompt)."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    specs = [*world.tools, *harness_tool_specs()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[
            types.Tool(name=s["function"]["name"], description=s["function"].get("description", ""),
                       input_schema=s["function"].get("parameters") or {"type": "object"}) for s in specs])

    async def call_tool(ctx: Any, params: Any) -> Any:
        key = _session_key(ctx)
        if key is None:
            text, error = json.dumps({"error": "this server keeps one world per MCP session: connect with the "
                                               "initialize handshake (the SDK's mode='legacy')"}), True
        else:
            text, error = world.call(key, params.name, dict(params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return types.ListPromptsResult(prompts=[types.Prompt(name="case", description="The customer's request that "
                                                                                      "opens the episode.")])

    async def get_prompt(ctx: Any, params: Any) -> Any:
        if params.name != "case":
            raise ValueError(f"unknown prompt {params.name!r}; prompts: case")
        return types.GetPromptResult(description=f"case {world.case.case_id}", messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=world.instruction()))])

    return Server("blobkit-world", version="1", instructions=world.system_prompt(), on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt)


def _session_key(ctx: Any) -> str | None:
    """The MCP session a request belongs to: the process over stdio, the ``Mcp-Session-Id`` over HTTP (None when
    an HTTP request carries none)."""
    request = getattr(ctx, "request", None)
    if request is None:
        return "stdio"
    headers = getattr(request, "headers", None)
    value = headers.get(SESSION_HEADER) if headers is not None else None
    return str(value) if value else None


def serve_stdio(world: WorldServer) -> None:
    """Serve over this process's stdin and stdout until the client closes them."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(world)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


def http_app(world: WorldServer, api_key: str) -> Any:
    """The streamable-HTTP ASGI app at ``/mcp``, answering only requests with ``Authorization: Bearer API_KEY``
    (401 otherwise, before the SDK sees the request)."""
    import hmac

    inner = build_server(world).streamable_http_app(host="127.0.0.1")
    expected = f"Bearer {api_key}".encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                body = json.dumps({"error": "missing or wrong API key: send Authorization: Bearer KEY (the key "
                                            "blobkit mcp printed, or the one in its --api-key-env variable)"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await inner(scope, receive, send)

    return app


def serve_http(world: WorldServer, api_key: str, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve over streamable HTTP at ``/mcp`` (:func:`http_app`) until interrupted; ``announce`` receives the URL
    once bound."""
    import uvicorn

    from blobkit.service.server import bind

    app = http_app(world, api_key)
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5))
    announce(f"http://{shown}:{bound_port}/mcp")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
