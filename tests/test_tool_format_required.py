"""No silent default tool format (issue 24 item 9): a policy or tokenizer without one is an error, never a fall back
to the Hermes parser that would score a Llama 3 or LFM2 model 0 without a word."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from trainers.chat_format import parse_assistant_output
from trainers.errors import ToolFormatError
from trainers.evaluation import policy_format, run_episodes
from trainers.formats import FORMATS, format_of
from trainers.generation import generate_turn, stop_ids, turn_text
from trainers.turns import PerTurn


def test_a_policy_without_a_tool_format_is_refused_before_any_episode(retail_kit: Any) -> None:
    runtime = retail_kit.world().runtime()
    try:
        with pytest.raises(ToolFormatError, match="carries no tool format"):
            run_episodes(lambda messages, tools: "Done.", runtime, retail_kit.cases("eval")[:1], 2)
    finally:
        runtime.close()
    assert policy_format(PerTurn(lambda messages, tools: "", FORMATS["llama3"])) is FORMATS["llama3"]


def test_a_tokenizer_of_no_known_format_is_refused() -> None:
    class Unknown:
        chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        bos_token = ""

    with pytest.raises(ToolFormatError, match="does not know this chat template"):
        format_of(Unknown())


@pytest.mark.parametrize("function", [parse_assistant_output, generate_turn, stop_ids, turn_text])
def test_no_entry_point_has_a_default_format(function: Any) -> None:
    parameter = inspect.signature(function).parameters["fmt"]
    assert parameter.default is inspect.Parameter.empty
