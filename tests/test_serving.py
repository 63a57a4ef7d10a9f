"""blobkit serve-model through the official openai SDK: chat completions with tools (streamed and not), the
Responses API, OpenAI-shaped errors; and (slow) a trained tiny export whose held-out episode, driven by the openai
client with the world over MCP, reaches the verdict blobkit's own replay reaches."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from harness_support import running

pytest.importorskip("torch")
pytest.importorskip("openai")

import openai  # noqa: E402

from trainers.config import TrainConfig  # noqa: E402
from trainers.export import export_model  # noqa: E402

KEY = "bk-test-key"


def _export(model_dir: Path, out: Path, kit: Any, config: TrainConfig) -> Path:
    return export_model(model_dir, out, kind="full", config=config.as_json(), base={"name_or_path": str(model_dir)},
                        kit_sha256=kit.sha256)


@pytest.fixture(scope="module")
def untrained(tinker_tiny: Path, retail_kit: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model exported as it is (the wire tests need a model, not a good one)."""
    return _export(tinker_tiny, tmp_path_factory.mktemp("untrained") / "export", retail_kit,
                   TrainConfig(max_new_tokens=24))


@pytest.fixture(scope="module")
def endpoint(untrained: Path) -> Any:
    from blobkit.serving.app import create_app
    from blobkit.serving.engine import LoadedModel

    with running(create_app({"tiny": LoadedModel("tiny", untrained)}, KEY), "/v1") as url:
        yield openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)


def _case(kit: Any) -> Any:
    return kit.cases("eval")[0]


def test_models_lists_the_loaded_exports_and_an_unknown_model_is_a_404_naming_them(endpoint: Any) -> None:
    assert [m.id for m in endpoint.models.list().data] == ["tiny"]
    with pytest.raises(openai.NotFoundError) as caught:
        endpoint.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert "loaded: tiny" in str(caught.value) and caught.value.body["type"] == "invalid_request_error"


def test_every_request_needs_the_key(endpoint: Any) -> None:
    stranger = openai.OpenAI(base_url=str(endpoint.base_url), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(("change", "param"), [
    ({"messages": []}, "messages"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages[0]"),
    ({"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "{}"}]}, "messages[0]"),
    ({"temperature": 7}, "temperature"),
    ({"frobnicate": True}, "frobnicate"),
])
def test_malformed_requests_get_openai_shaped_400s_naming_the_field(endpoint: Any, change: dict[str, Any],
                                                                     param: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **change}
    extra = {k: v for k, v in body.items() if k not in ("model", "messages")}
    with pytest.raises(openai.BadRequestError) as caught:
        endpoint.chat.completions.create(model="tiny", messages=body["messages"], extra_body=extra)
    error = caught.value.body
    assert error["type"] == "invalid_request_error" and str(error["param"]).startswith(param), error


def test_a_completion_streamed_or_not_is_the_same_turn_and_stop_cuts_it(endpoint: Any, retail_kit: Any) -> None:
    case = _case(retail_kit)
    args = {"model": "tiny", "messages": case.prompt.messages, "tools": case.prompt.tools, "max_tokens": 12}
    whole = endpoint.chat.completions.create(**args)
    choice = whole.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls") and whole.usage.completion_tokens <= 12
    chunks = list(endpoint.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (choice.message.content or "") and chunks[-1].usage == whole.usage
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    if len(text) > 2:
        stop = text[1:3]
        cut = endpoint.chat.completions.create(**args, stop=[stop])
        assert (cut.choices[0].message.content or "") == text[:text.find(stop)].strip()
        assert cut.choices[0].finish_reason == "stop"


def test_a_loaded_export_says_how_it_was_evaluated_because_the_endpoint_decodes_free(
        untrained: Path, tinker_tiny: Path, retail_kit: Any, tmp_path: Path) -> None:
    from blobkit.serving.engine import LoadedModel

    constrained = _export(tinker_tiny, tmp_path / "export", retail_kit,
                          TrainConfig(max_new_tokens=24, decoding="constrained"))
    assert LoadedModel("free", untrained).decoding == "free"
    assert LoadedModel("constrained", constrained).decoding == "constrained"


def test_the_responses_api_streamed_or_not_gives_the_same_output(endpoint: Any, retail_kit: Any) -> None:
    case = _case(retail_kit)
    tools = [{"type": "function", **t["function"]} for t in case.prompt.tools]
    args = {"model": "tiny", "instructions": case.prompt.messages[0]["content"],
            "input": case.prompt.messages[1]["content"], "tools": tools, "max_output_tokens": 12}
    whole = endpoint.responses.create(**args)
    with endpoint.responses.stream(**args) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"

    def items(output: list[Any]) -> list[tuple[Any, ...]]:
        return [(o.type, o.content[0].text if o.type == "message" else (o.name, o.arguments, o.call_id))
                for o in output]

    assert items(whole.output) == items(final.output) and whole.status == final.status


# --------------------------------------------------------------------------- a trained export, end to end (slow)


@pytest.fixture(scope="module")
def trained(tinker_tiny: Path, retail_kit: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model after 120 SFT steps on the retail kit (enough for its first turns to be tool calls; about
    2.5 minutes on 2 idle cores), recorded as decoded free: the endpoint decodes free, so the replays it is
    compared with must too."""
    from trainers.sft_torch import train_sft

    root = tmp_path_factory.mktemp("trained")
    config = TrainConfig.preset("tiny", max_length=2048, max_new_tokens=64, max_turns=5, decoding="free")
    train_sft(tinker_tiny, retail_kit.rows(), root / "sft", config, max_steps=120, progress=False)
    return _export(root / "sft", root / "export", retail_kit, config)


@pytest.fixture(scope="module")
def comparable(trained: Path, retail_kit: Any) -> tuple[Any, Any]:
    """(blobkit replay's episode, its case) for the first held-out case whose replay opens with a tool call and
    writes no malformed call: blobkit's loop shows the model a parse error where an OpenAI client or Codex sees
    text, so only such episodes can be compared turn for turn."""
    from trainers.replay import replay_case

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for case in retail_kit.cases("eval"):
        replayed, _ = replay_case(trained, retail_kit, case.case_id)
        if replayed.parse_failures == 0 and replayed.messages[len(case.prompt.messages)].get("tool_calls"):
            return replayed, case
    raise AssertionError("no held-out episode of the trained export opens with a well-formed tool call")


def _trace(result: Any) -> list[tuple[str, Any, Any]]:
    return [(event.tool, event.arguments, event.observation) for event in result.trace]


async def _agent(client: Any, mcp_url: str, max_turns: int, max_tokens: int) -> tuple[dict[str, Any], list[Any]]:
    """A harness no one here wrote would do this: the openai client writes each turn, the MCP server runs the
    calls and answers for the customer; (the verdict, the messages sent)."""
    from harness_support import mcp_client

    async with mcp_client(mcp_url, KEY) as world:
        listed = (await world.list_tools()).tools
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                   "parameters": t.input_schema}}
                 for t in listed if not t.name.startswith("blobkit_")]
        opening = (await world.get_prompt("case")).messages[0].content.text
        messages: list[Any] = [{"role": "system", "content": world.instructions}, {"role": "user", "content": opening}]
        for _ in range(max_turns):
            reply = client.chat.completions.create(model="trained", messages=messages, tools=tools, temperature=0,
                                                   max_tokens=max_tokens).choices[0].message
            if reply.tool_calls:
                messages.append(reply.model_dump(exclude_none=True))
                for call in reply.tool_calls:
                    result = await world.call_tool(call.function.name, json.loads(call.function.arguments))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result.content[0].text})
                continue
            messages.append({"role": "assistant", "content": reply.content or ""})
            said = json.loads((await world.call_tool("blobkit_say", {"text": reply.content or ""})).content[0].text)
            if said.get("final"):
                return said, messages
            messages.append({"role": "user", "content": said["reply"]})
        return json.loads((await world.call_tool("blobkit_verdict", {})).content[0].text), messages


@pytest.mark.slow
def test_a_trained_export_answers_the_first_turn_with_a_tool_call_and_its_episode_matches_blobkit_replay(
        trained: Path, retail_kit: Any, comparable: tuple[Any, Any]) -> None:
    from blobkit.mcp_world.server import WorldServer, http_app
    from blobkit.serving.app import create_app
    from blobkit.serving.engine import LoadedModel

    replayed, case = comparable
    model = LoadedModel("trained", trained)
    with running(create_app({"trained": model}, KEY), "/v1") as url:
        client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
        first = client.chat.completions.create(model="trained", messages=case.prompt.messages,
                                               tools=case.prompt.tools, temperature=0)
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls" and call.id == "call_0"
        expected = replayed.messages[len(case.prompt.messages)]["tool_calls"][0]["function"]
        assert (call.function.name, json.loads(call.function.arguments)) == (expected["name"], expected["arguments"])
        streamed = [c.choices[0].delta for c in client.chat.completions.create(
            model="trained", messages=case.prompt.messages, tools=case.prompt.tools, stream=True) if c.choices]
        assert [d.tool_calls[0].function.arguments for d in streamed if d.tool_calls] == [call.function.arguments]
        quiet = client.chat.completions.create(model="trained", messages=case.prompt.messages,
                                               tools=case.prompt.tools, tool_choice="none").choices[0]
        assert quiet.message.tool_calls is None and quiet.finish_reason != "tool_calls"
        response = client.responses.create(model="trained", instructions=case.prompt.messages[0]["content"],
                                           input=case.prompt.messages[1]["content"],
                                           tools=[{"type": "function", **t["function"]} for t in case.prompt.tools])
        assert [(o.type, o.name, o.arguments) for o in response.output] == [
            ("function_call", call.function.name, call.function.arguments)]

        world = WorldServer(retail_kit, case.case_id)
        try:
            with running(http_app(world, KEY), "/mcp") as mcp_url:
                verdict, sent = asyncio.run(_agent(client, mcp_url, 5, model.max_new_tokens))
        finally:
            world.close()
    assert verdict["verdict"] == replayed.verdict.to_json() and verdict["passed"] == replayed.passed
    assert verdict["calls"] == len(replayed.trace) and verdict["answer"] == replayed.answer
    assert [(m["role"], m.get("content")) for m in sent if m["role"] in ("tool", "user")] == [
        (m["role"], m["content"]) for m in replayed.messages[1:] if m["role"] in ("tool", "user")]


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("codex") is None, reason="the Codex CLI is not on PATH (.ci/run "
                                                                        "installs @openai/codex@0.169.0)")
def test_codex_replays_a_held_out_case_in_shadow_mode_as_blobkit_replay_does(trained: Path, retail_kit: Any,
                                                                               comparable: tuple[Any, Any]) -> None:
    from blobkit.harness.codex import replay_with_codex

    replayed, case = comparable
    result = replay_with_codex(trained, retail_kit, case.case_id, timeout_s=300)
    assert result.case_id == case.case_id
    assert (result.verdict, result.answer, _trace(result)) == (replayed.verdict, replayed.answer, _trace(replayed))
    # the verdict is the one blobkit eval --trajectories gives the recorded conversation
    from trainers.trajectories import TrajectoryLine, score_trajectories

    again = score_trajectories(retail_kit, [TrajectoryLine(1, case.case_id, list(result.messages), None)], "codex")
    assert again.results[0].verdict == result.verdict


def test_a_merged_lora_export_loads_with_auto_model_for_causal_lm_and_computes_what_the_adapter_does(
        tinker_tiny: Path, retail_kit: Any, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from trainers.base_identity import base_fingerprint
    from trainers.export import load_export, merge_export
    from trainers.sft_torch import train_sft

    config = TrainConfig(epochs=1, learning_rate=1e-2, batch_size=2, lora_rank=4, max_length=2048, seed=0)
    train_sft(tinker_tiny, retail_kit.rows()[:4], tmp_path / "lora", config, max_steps=2, progress=False)
    base = {"name_or_path": str(tinker_tiny), "sha256": base_fingerprint(tinker_tiny), "source": "local"}
    adapter = export_model(tmp_path / "lora", tmp_path / "export", kind="lora", config=config.as_json(), base=base,
                           kit_sha256=retail_kit.sha256)
    merged_dir = merge_export(adapter, tmp_path / "export-merged")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, use_safetensors=True).eval()
    peft_model, tokenizer, _ = load_export(adapter)
    ids = torch.tensor([tokenizer("Where is my order 50123?")["input_ids"]])
    with torch.inference_mode():
        assert torch.allclose(merged(ids).logits, peft_model(ids).logits, atol=1e-5)


def test_sampling_with_a_seed_repeats_and_greedy_ignores_it(endpoint: Any, retail_kit: Any) -> None:
    case = _case(retail_kit)
    args = {"model": "tiny", "messages": case.prompt.messages, "max_tokens": 8}

    def text(**extra: Any) -> str | None:
        return endpoint.chat.completions.create(**args, **extra).choices[0].message.content

    assert text(temperature=1.0, seed=3) == text(temperature=1.0, seed=3)
    assert text(temperature=0, seed=1) == text(temperature=0, seed=2)
