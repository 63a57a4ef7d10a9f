"""Tool formats at the text level, on every SFT row of every example kit, for every family.

The Qwen, Llama and LFM2 tokenizers are not available offline here, so these tests render and parse
text; their chat templates are: TRL 1.16 keeps each family's original template for identity checks,
and the family formats are compared with them row by row. Token-level checks (masks, drift) on
SmolLM2's and the tiny model's real tokenizers are in test_tool_format_tokens.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_format_support import assistant_turns, expected_calls, expected_content

from blobkit.errors import ConfigError
from trainers.config import ToolFormatName, TrainConfig
from trainers.errors import ToolFormatError
from trainers.formats import FORMATS, choose_format, get_format, probe_template
from trainers.formats.format import render_text
from trainers.formats.lfm2 import parse_lfm2
from trainers.formats.llama3 import parse_llama3
from trainers.formats.qwen3 import parse_qwen3

NAMES = list(FORMATS)
EXAMPLES = ["retail_desk", "it_helpdesk", "airline_desk"]


def _failures(rows: list[dict[str, Any]], check: Any) -> list[str]:
    failed = []
    for index, row in enumerate(rows):
        try:
            check(row)
        except AssertionError as exc:
            failed.append(f"row {index}: {exc}")
    return failed


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("name", NAMES)
def test_every_row_renders_one_block_per_assistant_turn_that_parses_back_to_its_calls_and_answer(
        name: str, example: str, example_rows: dict[str, list[dict[str, Any]]]) -> None:
    fmt = FORMATS[name]

    def check(row: dict[str, Any]) -> None:
        _, turns = assistant_turns(fmt, row)
        for turn in turns:
            parsed = fmt.parse(turn.written)
            assert parsed.parse_errors == [], parsed.parse_errors
            assert parsed.tool_calls == expected_calls(turn.message)
            assert parsed.content == expected_content(fmt, turn.message)
            assert turn.written.endswith(fmt.end_tokens[0]), repr(turn.written[-20:])

    rows = example_rows[example]
    assert rows and _failures(rows, check) == []


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("name", NAMES)
def test_turn_by_turn_prompts_plus_what_the_model_writes_rebuild_the_whole_row(
        name: str, example: str, example_rows: dict[str, list[dict[str, Any]]]) -> None:
    """Text-level drift: each turn's prompt, then what the model writes, is where the whole row's text goes."""
    fmt = FORMATS[name]

    def check(row: dict[str, Any]) -> None:
        whole, turns = assistant_turns(fmt, row)
        for turn, following in zip(turns, [*turns[1:], None], strict=True):
            assert whole.startswith(turn.prompt + turn.written)
            assert turn.span[0] == len(turn.prompt) - len(fmt.mask_lead)
            if following is not None:
                assert following.prompt.startswith(turn.prompt + turn.written)
        assert whole == turns[-1].prompt + turns[-1].written + fmt.mask_trail

    assert _failures(example_rows[example], check) == []


def _qwen3_with_empty_think_blocks(text: str) -> str:
    """Qwen3's own rendering with the empty think block in every assistant turn (it keeps it in the last only)."""
    opened, block = "<|im_start|>assistant\n", "<think>\n\n</think>\n\n"
    parts = text.split(opened)
    return opened.join([parts[0], *[part if part.startswith(block) else block + part for part in parts[1:]]])


def _original(name: str) -> tuple[str, dict[str, Any]]:
    from trl import chat_template_utils as known

    return {"hermes": (known.qwen2_5_chat_template, {}), "lfm2": (known.lfm2_v2_chat_template, {}),
            "llama3": (known.llama3_2_chat_template, {"date_string": "26 Jul 2024"}),
            "qwen3": (known.qwen3_chat_template, {"enable_thinking": False})}[name]


@pytest.mark.parametrize("name", ["hermes", "qwen3", "llama3", "lfm2"])
def test_each_family_format_writes_what_the_familys_own_template_writes(
        name: str, example_rows: dict[str, list[dict[str, Any]]]) -> None:
    """Exact for Qwen2.5 and LFM2; Qwen3 keeps the empty think block in every turn (its template only in the last
    one, which breaks prefix-preservation); Llama 3.2's template JSON-encodes a string tool result again."""
    from transformers.utils.chat_template_utils import render_jinja_template

    fmt, (template, options) = FORMATS[name], _original(name)

    def check(row: dict[str, Any]) -> None:
        for messages, prompt in ((row["messages"], False), (row["messages"][:2], True)):
            theirs = render_jinja_template([messages], tools=row["tools"], chat_template=template,
                                           bos_token=fmt.bos_token, eos_token="", add_generation_prompt=prompt,
                                           **options)[0][0]
            if name == "qwen3":
                theirs = _qwen3_with_empty_think_blocks(theirs)
            if name == "llama3":
                for message in messages:
                    if message["role"] == "tool":
                        theirs = theirs.replace(json.dumps(message["content"], ensure_ascii=False), message["content"])
            assert fmt.render(messages, row["tools"], add_generation_prompt=prompt).text == theirs

    assert _failures(example_rows["retail_desk"] + example_rows["airline_desk"], check) == []


def test_a_plain_chatml_template_is_probed_as_dropping_tools_and_calls_and_gets_blobkits_format(
        smollm2_tokenizer: Any) -> None:
    probe = probe_template(smollm2_tokenizer.chat_template)
    assert (probe.renders_tools, probe.renders_tool_calls, probe.renders_tool_results) == (False, False, True)
    choice = choose_format(smollm2_tokenizer.chat_template)
    assert choice.format.name == "blobkit" and "drops the tool list and tool calls" in choice.reason


def test_lfm2s_first_template_drops_tool_calls_and_gets_the_lfm2_format() -> None:
    from trl import chat_template_utils as known

    choice = choose_format(known.lfm2_chat_template, bos_token="<|startoftext|>")
    assert choice.format.name == "lfm2" and choice.probe is not None
    assert choice.probe.renders_tools and not choice.probe.renders_tool_calls


@pytest.mark.parametrize(("attribute", "name"), [
    ("qwen2_5_chat_template", "hermes"), ("qwen3_chat_template", "qwen3"), ("llama3_2_chat_template", "llama3"),
    ("lfm2_v2_chat_template", "lfm2")])
def test_each_familys_own_template_is_recognised_and_probed_as_rendering_tools(attribute: str, name: str) -> None:
    from trl import chat_template_utils as known

    choice = choose_format(getattr(known, attribute), bos_token="<s>")
    assert choice.format.name == name and choice.probe is not None and choice.probe.ok


def test_a_template_of_no_known_family_is_refused_with_the_choices_never_trained_through() -> None:
    from trl import chat_template_utils as known

    with pytest.raises(ToolFormatError, match="--tool-format") as caught:
        choose_format(known.phi3_chat_template, where="some/base")
    assert isinstance(caught.value, ConfigError) and "drops the tool list" in str(caught.value)
    with pytest.raises(ToolFormatError, match="unknown tool format"):
        get_format("mistral")


def test_a_formats_own_template_keeps_its_format_and_a_requested_one_wins() -> None:
    for name, fmt in FORMATS.items():
        assert choose_format(fmt.template).format is fmt
        assert choose_format(FORMATS["blobkit"].template, name).format is fmt


def test_the_config_offers_auto_and_exactly_the_formats() -> None:
    assert list(ToolFormatName.__args__) == ["auto", *FORMATS]  # type: ignore[attr-defined]
    assert TrainConfig().tool_format == "auto"


def test_llama3_refuses_a_turn_with_two_calls_as_a_typed_error() -> None:
    call = {"type": "function", "function": {"name": "get_order", "arguments": {"order_id": 1}}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "", "tool_calls": [call, call]}]
    with pytest.raises(ToolFormatError, match="single tool-calls"):
        FORMATS["llama3"].render(messages, [{"type": "function", "function": {"name": "get_order"}}])
    assert len(FORMATS["hermes"].render(messages, []).spans) == 1


def test_qwen3_reasoning_never_becomes_the_answer_in_rendering_or_parsing() -> None:
    fmt = FORMATS["qwen3"]
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "<think>secret plan</think>\n\nHi."}]
    text = fmt.render(messages, None).text
    assert "secret plan" not in text and text.endswith("<think>\n\n</think>\n\nHi.<|im_end|>\n")
    assert parse_qwen3("<think>let me see</think>\n\nOrder 7 shipped.<|im_end|>").content == "Order 7 shipped."
    assert parse_qwen3("still thinking</think>Done.").content == "Done."
    cut = parse_qwen3("<think>I will call get_order")
    assert cut.content == "" and cut.parse_errors and not cut.is_final


SAID = "Your leg 2 of booking VYKYYB has status confirmed."


def said_then_called() -> dict[str, Any]:
    """A row whose deciding turn says one line (a step's ``say``) and then calls the write."""
    call = {"id": "call_0", "type": "function",
            "function": {"name": "set_meal", "arguments": {"booking_id": "VYKYYB", "meal": "kosher", "position": 2}}}
    parameters = {"type": "object", "properties": {"booking_id": {"type": "string"}, "meal": {"type": "string"},
                                                   "position": {"type": "integer"}}}
    return {"tools": [{"type": "function", "function": {"name": "set_meal", "description": "Set a leg's meal.",
                                                        "parameters": parameters}}],
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                         {"role": "assistant", "content": SAID, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "call_0", "name": "set_meal", "content": '{"affected":1}'},
                         {"role": "assistant", "content": "Done."}]}


@pytest.mark.parametrize("name", NAMES)
def test_a_turn_that_says_a_line_then_calls_renders_and_parses_back_to_the_line_and_the_call(name: str) -> None:
    """Every format writes the line before the call and reads both back, except Llama 3's, whose template writes a
    call turn as the call alone (``content_with_calls``): the line is dropped and the call still round-trips."""
    fmt, row = FORMATS[name], said_then_called()
    _, turns = assistant_turns(fmt, row)
    parsed = fmt.parse(turns[0].written)
    assert parsed.parse_errors == [] and parsed.tool_calls == expected_calls(row["messages"][2])
    assert parsed.content == (SAID if fmt.content_with_calls else "")
    assert (SAID in turns[0].written) == fmt.content_with_calls


def test_llama3_calls_parse_with_parameters_or_arguments_and_bad_json_is_an_error() -> None:
    assert parse_llama3('{"name": "f", "parameters": {"a": 1}}<|eot_id|>').tool_calls == [
        {"name": "f", "arguments": {"a": 1}}]
    assert parse_llama3('<|python_tag|>{"name": "f", "arguments": {}}').tool_calls == [{"name": "f", "arguments": {}}]
    assert parse_llama3('{"name": "f", "parameters": {"a": 1}').parse_errors[0].startswith("tool call 0: invalid JSON")
    assert parse_llama3('{"name": "f", "parameters": {}} {"name": "g", "parameters": {}}').parse_errors
    assert parse_llama3("Your order shipped.").content == "Your order shipped."


def test_lfm2_reads_python_style_calls_without_evaluating_them() -> None:
    parsed = parse_lfm2("<|tool_call_start|>[f(a=-3, b='x\\'y', c={\"k\": true, \"n\": null}, d=[1.5, False]), "
                        "g()]<|tool_call_end|>Checking.<|im_end|>")
    assert parsed.tool_calls == [{"name": "f", "arguments": {"a": -3, "b": "x'y", "c": {"k": True, "n": None},
                                                             "d": [1.5, False]}},
                                 {"name": "g", "arguments": {}}]
    assert parsed.content == "Checking."
    for bad in ("[f(__import__('os').system('true'))]", "[f(x=open('/etc/passwd'))]", "[f(1)]", "[os.f(a=1)]",
                "[f(a=1"):
        result = parse_lfm2(f"<|tool_call_start|>{bad}<|tool_call_end|>")
        assert result.tool_calls == [] and len(result.parse_errors) == 1, bad
    unterminated = parse_lfm2("<|tool_call_start|>[f(a=1)]").parse_errors
    assert unterminated == ["tool call 0: unterminated <|tool_call_start|> block"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([*"ab{}[]()=,'\"\\: \n0-", "<tool_call>", "</tool_call>", "<think>", "</think>",
                                 "<|tool_call_start|>", "<|tool_call_end|>", "<|eot_id|>", "true", '{"name": "f", ',
                                 '"arguments": {', '"parameters": ', "f(a=", "<|python_tag|>"]),
                max_size=40).map("".join))
def test_no_parser_raises_on_any_model_output(text: str) -> None:
    for fmt in FORMATS.values():
        parsed = fmt.parse(text)
        assert isinstance(parsed.content, str) and all(isinstance(e, str) for e in parsed.parse_errors)


def test_render_text_turns_a_template_failure_into_a_typed_error() -> None:
    with pytest.raises(ToolFormatError, match="cannot render"):
        render_text("{{ raise_exception('no') }}", [{"role": "user", "content": "u"}], None)
