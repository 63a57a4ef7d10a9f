"""``blobkit replay --harness codex``: one held-out case replayed inside the Codex CLI, in shadow mode, judged by VCode.

Nothing is installed at run time: the ``codex`` on PATH (``npm install -g @openai/codex@0.169.0``, the version
tested) is run with a throw-away ``CODEX_HOME`` whose ``config.toml`` names

* a model provider at ``blobkit serve-model``'s endpoint (the Responses API, on 127.0.0.1, a fresh key), and
* the world's MCP server (``blobkit mcp``'s, streamable HTTP on 127.0.0.1), one episode for the whole replay;

in shadow mode: ``sandbox_mode = "read-only"``, ``approval_policy = "never"``, no shell or exec tool, no web
search, apps, plugins, goals, images, skills or subagents, the world's system prompt as Codex's instructions
(sent as its developer message), the world's tools under their own names (``non_prefixed_mcp_tool_names``).
What Codex 0.169 adds that no config key removes (four tools of its own, the MCP tools sorted by name, a
wall-time line on every tool output) the replay's endpoint keeps from the model (:mod:`blobkit.serving.shadow`),
so the model sees the conversation blobkit's own loop renders. The customer's request opens the
conversation; each time Codex ends a turn, its last message goes to the scripted customer and the reply comes
back through ``codex exec resume``, until the script is used up. The recorded episode is judged as ``blobkit
eval --trajectories`` judges it (:class:`~blobkit.mcp_world.session.WorldSession`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError
from trainers.evaluation import EpisodeResult
from world_format.kit import Kit

TESTED_VERSION = "0.169.0"
"""The Codex CLI version this replay is tested with."""
KEY_VARIABLE = "BLOBKIT_MODEL_KEY"
MCP_KEY_VARIABLE = "BLOBKIT_MCP_KEY"
NAMESPACE = "world"
"""The MCP server's name in Codex's config: Codex sends its tools as the Responses namespace of that name."""


@contextmanager
def _serving(app: Any) -> Iterator[int]:
    """Serve an ASGI app on 127.0.0.1 (any free port) in a thread; yield the port."""
    import uvicorn

    from blobkit.service.server import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def codex_config(model: str, model_url: str, mcp_url: str, instructions: Path) -> str:
    """The shadow-mode ``config.toml`` (see the module docstring)."""
    quote = json.dumps
    return "\n".join([
        f"model = {quote(model)}", 'model_provider = "blobkit"', 'approval_policy = "never"',
        'sandbox_mode = "read-only"', f"model_instructions_file = {quote(str(instructions))}",
        "include_environment_context = false", "include_permissions_instructions = false",
        "include_apps_instructions = false", 'web_search = "disabled"', "suppress_unstable_features_warning = true",
        "check_for_update_on_startup = false", "",
        "[features]", *(f"{name} = false" for name in (
            "shell_tool", "unified_exec", "apps", "goals", "view_image", "image_generation", "plugins",
            "skill_search", "sleep_tool", "tool_suggest")), "non_prefixed_mcp_tool_names = true", "",
        "[skills]", "include_instructions = false", "", "[skills.bundled]", "enabled = false", "",
        "[agents]", "enabled = false", "",
        "[model_providers.blobkit]", 'name = "blobkit"', f"base_url = {quote(model_url)}",
        f"env_key = {quote(KEY_VARIABLE)}", 'wire_api = "responses"', "request_max_retries = 0",
        "stream_max_retries = 0", "",
        f"[mcp_servers.{NAMESPACE}]", f"url = {quote(mcp_url)}",
        f"bearer_token_env_var = {quote(MCP_KEY_VARIABLE)}", "required = true", "startup_timeout_sec = 60",
        # the world's tools run unasked (each on the replay's own copy of the seed); the harness tools stay hidden
        'default_tools_approval_mode = "approve"', 'disabled_tools = ["blobkit_say", "blobkit_verdict"]', ""])


def _run_codex(codex: str, home: Path, work: Path, keys: tuple[str, str], prompt: str, thread: str | None,
               timeout_s: float) -> tuple[str | None, str]:
    """One ``codex exec`` (or ``exec resume THREAD``) turn; (the thread id, the last agent message)."""
    args = [codex, "exec", *(["resume", thread] if thread else []), "--json", "--skip-git-repo-check", prompt]
    env = {**os.environ, "CODEX_HOME": str(home), KEY_VARIABLE: keys[0], MCP_KEY_VARIABLE: keys[1]}
    try:
        done = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"codex exec did not finish within {timeout_s:.0f} s") from None
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
    if done.returncode != 0 or failed:
        said = (failed[-1].get("error", {}).get("message") or failed[-1].get("message")) if failed else None
        tail = (said or done.stderr.strip().splitlines()[-1:] or ["no output"])
        raise ConfigError(f"codex exec failed (exit {done.returncode}): {tail if isinstance(tail, str) else tail[0]}")
    started = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), thread)
    messages = [e["item"].get("text", "") for e in events
                if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "agent_message"]
    return started, messages[-1] if messages else ""


def replay_with_codex(export: Path, kit: Kit, case_id: str | None = None, *, codex: str = "codex",
                      timeout_s: float = 600.0) -> EpisodeResult:
    """Held-out case ``case_id`` (default: the first) replayed by ``export`` inside Codex; its verdict.

    Raises ConfigError when ``codex`` is not on PATH (with the install command) or a Codex turn fails (its error).
    """
    from blobkit.mcp_world.server import WorldServer, http_app
    from blobkit.serving.app import create_app
    from blobkit.serving.engine import LoadedModel
    from blobkit.serving.server import new_api_key
    from blobkit.serving.shadow import Shadow

    found = shutil.which(codex)
    if found is None:
        raise ConfigError(f"the Codex CLI ({codex!r}) is not on PATH: npm install -g @openai/codex@{TESTED_VERSION}")
    world = WorldServer(kit, case_id, shared=True)
    model = LoadedModel("blobkit", Path(export))
    key, mcp_key = new_api_key(), new_api_key()
    shadow = Shadow(NAMESPACE, tuple(world.tool_names()))
    try:
        with tempfile.TemporaryDirectory(prefix="blobkit-codex-") as scratch, \
                _serving(create_app({"blobkit": model}, key, shadow)) as model_port, \
                _serving(http_app(world, mcp_key)) as mcp_port:
            home, work = Path(scratch, "home"), Path(scratch, "work")
            home.mkdir()
            work.mkdir()
            instructions = Path(scratch, "instructions.md")
            instructions.write_text(world.system_prompt(), encoding="utf-8")
            (home / "config.toml").write_text(codex_config(
                "blobkit", f"http://127.0.0.1:{model_port}/v1", f"http://127.0.0.1:{mcp_port}/mcp", instructions),
                encoding="utf-8")
            session = world.session("episode")
            prompt, thread = world.instruction(), None
            for _ in range(len(world.case.task.turns) + 1):
                thread, text = _run_codex(found, home, work, (key, mcp_key), prompt, thread, timeout_s)
                said = session.say(text)
                if said.reply is None:
                    break
                prompt = said.reply
            return session.verdict()  # the script used up: the final answer's verdict; else the turn cap's
    finally:
        world.close()
