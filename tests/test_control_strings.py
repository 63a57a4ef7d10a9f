"""Data never becomes chat control syntax: every rendered row has exactly the control tokens its structure asks for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

from conftest import ROOT, SHARED  # noqa: E402

from blobkit.builder import BuildConfig, build_kit  # noqa: E402
from trainers.tiny_model import IM_END, IM_START, build_tokenizer, row_texts  # noqa: E402
from world_format.kit import open_kit  # noqa: E402

CASES = SHARED / "cases" / "evidence"
WORLDS = [ROOT / "examples" / "retail_desk" / "world.json", ROOT / "examples" / "it_helpdesk" / "world.json"]
if (CASES / "05-control-strings-in-data").is_dir():
    WORLDS.append(CASES / "05-control-strings-in-data" / "world.json")


def _expected(messages: list[dict[str, Any]], with_tools: bool = True) -> dict[str, int]:
    """Control tokens the tiny (Qwen2.5-format) template itself writes for this message structure (with tools, its
    system block shows the call format once: one more <tool_call> and </tool_call>)."""
    blocks, previous = 0, None
    for message in messages:
        if message["role"] != "tool" or previous != "tool":
            blocks += 1
        previous = message["role"]
    calls = sum(len(m.get("tool_calls") or []) for m in messages) + int(with_tools)
    tools = sum(1 for m in messages if m["role"] == "tool")
    return {IM_START: blocks, IM_END: blocks, "<tool_call>": calls, "</tool_call>": calls,
            "<tool_response>": tools, "</tool_response>": tools}


@pytest.mark.parametrize("world", WORLDS, ids=lambda path: path.parent.name)
def test_every_row_renders_exactly_the_control_tokens_of_its_structure(world: Path, tmp_path: Path) -> None:
    record = build_kit(world, tmp_path, BuildConfig(train_cases_per_task=12, eval_cases_per_task=3, eval_percent=50))
    with open_kit(Path(record["kit"]["path"])) as kit:
        rows = kit.rows()
    tokenizer = build_tokenizer(row_texts(rows), vocab_size=600)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in _expected([])}
    for row in rows:
        rendered = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True,
                                                 return_dict=True)["input_ids"]
        counted = {token: rendered.count(token_id) for token, token_id in ids.items()}
        assert counted == _expected(row["messages"], bool(row["tools"])), row["metadata"]["case_id"]
