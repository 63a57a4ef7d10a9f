"""blobkit mcp through the official mcp client SDK: the world's tools, one isolated seed per session, the verdict
reached as blobkit eval --trajectories reaches it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import reference_lines, score_trajectories
from harness_support import mcp_client, reenact, running

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from blobkit.mcp_world.server import SAY, VERDICT, WorldServer, build_server, http_app  # noqa: E402
from world_format.kit import open_kit  # noqa: E402


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _play(client: Client, steps: list[tuple[str, Any]]) -> dict[str, Any]:
    """Run a harness's steps in one session; the final verdict (or the verdict so far)."""
    for kind, value in steps:
        if kind == "call":
            await client.call_tool(value[0], value[1])
        else:
            said = json.loads(_text(await client.call_tool(SAY, {"text": value})))
            if said.get("final"):
                return dict(said)
    return dict(json.loads(_text(await client.call_tool(VERDICT, {}))))


def _reference(kit_path: Path) -> dict[str, Any]:
    """The reference agent's line for the kit's first held-out case."""
    with open_kit(kit_path) as kit:
        first = kit.cases("eval")[0].case_id
    return next(line for line in reference_lines(kit_path) if line["case_id"] == first)


def test_the_world_tools_come_with_their_own_schemas_and_the_case_opens_the_conversation(kit_path: Path) -> None:
    with open_kit(kit_path) as kit:
        world = WorldServer(kit, None)
        case = world.case

        async def main() -> tuple[Any, Any, str | None]:
            async with Client(build_server(world)) as client:
                return await client.list_tools(), await client.get_prompt("case"), client.instructions

        try:
            tools, prompt, instructions = asyncio.run(main())
        finally:
            world.close()
    assert case.prompt is not None
    declared = {t["function"]["name"]: t["function"] for t in case.prompt.tools}
    listed = {t.name: t for t in tools.tools}
    assert set(listed) == set(declared) | {SAY, VERDICT}
    for name, spec in declared.items():
        assert listed[name].input_schema == spec["parameters"] and listed[name].description == spec["description"]
    assert prompt.messages[0].content.text == case.prompt.messages[1]["content"]
    assert instructions == case.prompt.messages[0]["content"]


def test_over_stdio_the_reference_agent_passes_with_the_verdict_eval_trajectories_gives_and_is_recorded(
        kit_path: Path, tmp_path: Path) -> None:
    line = _reference(kit_path)
    record = tmp_path / "mcp.jsonl"
    params = StdioServerParameters(command=sys.executable, args=["-m", "blobkit.cli", "mcp", "--kit", str(kit_path),
                                                                 "--record", str(record)])

    async def main() -> dict[str, Any]:
        async with Client(params) as client:
            return await _play(client, reenact(line["messages"]))

    verdict = asyncio.run(main())
    by_eval = score_trajectories(kit_path, [line], tmp_path / "reference.jsonl")
    assert verdict["final"] and verdict["passed"] is True and verdict["case_id"] == line["case_id"]
    assert verdict["verdict"] == by_eval["cases"][0]["verdict"]
    recorded = [json.loads(text) for text in record.read_text(encoding="utf-8").splitlines()]
    assert len(recorded) == 1 and recorded[0]["metadata"]["passed"] is True
    rescored = score_trajectories(kit_path, recorded, tmp_path / "again.jsonl")  # the record is a trajectory file
    assert rescored["cases"][0]["verdict"] == verdict["verdict"]


def test_each_http_session_sees_only_its_own_changes(kit_path: Path) -> None:
    with open_kit(kit_path) as kit:
        writes = {t.name for t in kit.world().world.tools if t.effect == "write"}
        held_out = {case.case_id for case in kit.cases("eval")}
        line = next(line for line in reference_lines(kit_path) if line["case_id"] in held_out and any(
            kind == "call" and value[0] in writes for kind, value in reenact(line["messages"])))
        steps = reenact(line["messages"])
        world = WorldServer(kit, line["case_id"])
        reads_only = [(kind, value) for kind, value in steps if kind == "say" or value[0] not in writes]
        try:
            with running(http_app(world, "k-1"), "/mcp") as url:
                async def main() -> tuple[dict[str, Any], dict[str, Any]]:
                    async with mcp_client(url, "k-1") as first, mcp_client(url, "k-1") as second:
                        writer = await _play(first, steps)
                        reader = await _play(second, reads_only)
                        return writer, reader

                writer, reader = asyncio.run(main())
                import httpx

                for headers in ({}, {"Authorization": "Bearer k-2"}):  # every request needs the key
                    refused = httpx.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                    assert refused.status_code == 401 and "API key" in refused.json()["error"]
        finally:
            world.close()
    assert writer["passed"] is True
    assert reader["passed"] is False and reader["verdict"]["outcome"] == "fail"  # its copy never saw the write


def test_a_bad_case_or_transport_is_one_line_and_writes_nothing(kit_path: Path, tmp_path: Path) -> None:
    import subprocess

    record = tmp_path / "never.jsonl"
    for args in (["--case", "c-nope"], ["--transport", "carrier-pigeon"]):
        done = subprocess.run([sys.executable, "-m", "blobkit.cli", "mcp", "--kit", str(kit_path), "--record",
                               str(record), *args], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
        assert "Traceback" not in done.stderr
    assert not record.exists()
