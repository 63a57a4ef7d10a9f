"""The token cap of a generated turn: derived from the kit's rows, exactly what generation writes, never below it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("transformers")

from trainers.config import TrainConfig  # noqa: E402
from trainers.errors import ConfigError  # noqa: E402
from trainers.formats import apply_tool_format, format_of  # noqa: E402
from trainers.generation import stop_ids  # noqa: E402
from trainers.plan import plan  # noqa: E402
from trainers.turn_tokens import TOKEN_SLACK, derived_cap, rows_turn_tokens, turn_tokens  # noqa: E402


def _tokenizer(base: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    apply_tool_format(tokenizer, "auto", where=str(base))
    return tokenizer


def _written(tokenizer: Any, row: dict[str, Any]) -> list[int]:
    """Each assistant turn's tokens as generation writes them: the full rendering's tokens after the generation
    prompt's, up to and including the first end token (computed without the assistant mask)."""
    end = set(stop_ids(tokenizer, format_of(tokenizer)))
    lengths = []
    for index, message in enumerate(row["messages"]):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(row["messages"][:index], tools=row["tools"], tokenize=True,
                                               add_generation_prompt=True, return_dict=False)
        full = tokenizer.apply_chat_template(row["messages"][:index + 1], tools=row["tools"], tokenize=True,
                                             return_dict=False)
        assert full[:len(prompt)] == prompt
        lengths.append(next(i + 1 for i, token in enumerate(full[len(prompt):]) if token in end))
    return lengths


def test_each_turns_length_is_what_generation_writes_up_to_its_end_token(retail_kit: Any, tinker_tiny: Path) -> None:
    tokenizer = _tokenizer(tinker_tiny)
    rows = retail_kit.rows()[::7]
    measured = rows_turn_tokens(tokenizer, rows)
    assert measured == [_written(tokenizer, row) for row in rows]
    assert all(turns for turns in measured) and max(max(turns) for turns in measured) > 16


def test_the_cap_is_derived_from_the_longest_turn_and_a_cap_below_it_is_refused_writing_no_plan(
        retail_kit: Any, tinker_tiny: Path, tmp_path: Path) -> None:
    rows = retail_kit.rows()
    longest = max(max(turns) for turns in rows_turn_tokens(_tokenizer(tinker_tiny), rows))
    common: dict[str, Any] = {"kit": retail_kit.root, "base": str(tinker_tiny), "method": "sft",
                              "target": "local-torch", "dry_run": True}

    derived = plan(TrainConfig(**common, out=tmp_path / "derived"), retail_kit, rows, retail_kit.path("sft.jsonl"))
    assert derived.config.max_new_tokens == derived_cap(longest) == longest + math.ceil(longest * TOKEN_SLACK)
    saved = json.loads((tmp_path / "derived" / "plan.json").read_text(encoding="utf-8"))
    assert saved["turn_tokens"] == {"max_new_tokens": derived_cap(longest), "derived": True,
                                    "longest_turn_tokens": longest, "longest_turn_row": saved["turn_tokens"][
                                        "longest_turn_row"], "turns_over_limit": 0, "slack": TOKEN_SLACK}
    assert saved["config"]["max_new_tokens"] == derived_cap(longest)

    exact = plan(TrainConfig(**common, out=tmp_path / "exact", max_new_tokens=longest), retail_kit, rows,
                 retail_kit.path("sft.jsonl"))
    assert exact.config.max_new_tokens == longest and exact.turn_tokens is not None
    assert not exact.turn_tokens.derived and exact.turn_tokens.turns_over_limit == 0

    with pytest.raises(ConfigError, match=rf"--max-new-tokens {longest - 1} is below the {longest} tokens row \d+'s "
                                          rf".*derived from the rows: {derived_cap(longest)}"):
        plan(TrainConfig(**common, out=tmp_path / "short", max_new_tokens=longest - 1), retail_kit, rows,
             retail_kit.path("sft.jsonl"))
    assert not (tmp_path / "short" / "plan.json").exists()

    smoke = plan(TrainConfig(**common, out=tmp_path / "smoke", max_new_tokens=8, short_episodes=True), retail_kit,
                 rows, retail_kit.path("sft.jsonl"))
    assert smoke.config.max_new_tokens == 8 and smoke.turn_tokens is not None
    assert smoke.turn_tokens.turns_over_limit == sum(length > 8 for turns in rows_turn_tokens(
        _tokenizer(tinker_tiny), rows) for length in turns) > 0


def test_an_unresolved_cap_is_an_error_not_a_silent_default() -> None:
    with pytest.raises(ConfigError, match="derived from the kit's rows"):
        _ = TrainConfig().token_cap
    assert TrainConfig(max_new_tokens=40).token_cap == 40
    config, record = turn_tokens(TrainConfig(), [[3, 12], [30], []])
    assert config.max_new_tokens == derived_cap(30) == 38 and record.longest_turn_row == 2
    assert turn_tokens(TrainConfig(), [])[0].max_new_tokens == 8  # the config's floor


def test_an_export_that_records_no_cap_replays_with_the_one_its_kit_derives(retail_kit: Any, tinker_tiny: Path) -> None:
    from trainers.replay import export_token_cap

    tokenizer = _tokenizer(tinker_tiny)
    longest = max(max(turns) for turns in rows_turn_tokens(tokenizer, retail_kit.rows()))
    assert export_token_cap(TrainConfig(), tokenizer, retail_kit) == derived_cap(longest)
    assert export_token_cap(TrainConfig(max_new_tokens=20), tokenizer, retail_kit) == 20
    assert export_token_cap(TrainConfig(max_new_tokens=20), tokenizer, retail_kit, "derived") == derived_cap(longest)
    assert export_token_cap(TrainConfig(max_new_tokens=20), tokenizer, retail_kit, 30) == 30


def test_a_run_whose_plan_could_not_tokenize_resolves_the_cap_from_its_base(retail_kit: Any, tinker_tiny: Path) -> None:
    from trainers.turn_tokens import resolve_for_base

    rows = retail_kit.rows()
    longest = max(max(turns) for turns in rows_turn_tokens(_tokenizer(tinker_tiny), rows))
    assert resolve_for_base(TrainConfig(base=str(tinker_tiny)), rows).max_new_tokens == derived_cap(longest)
    assert resolve_for_base(TrainConfig(base=str(tinker_tiny), max_new_tokens=8, short_episodes=True),
                            rows).max_new_tokens == 8


def test_a_requested_token_cap_is_a_positive_number_or_derived() -> None:
    from trainers.replay import requested_token_cap

    assert requested_token_cap("derived") == "derived" and requested_token_cap("104") == 104
    for bad in ("0", "-3", "abc", "Derived"):
        with pytest.raises(ValueError):
            requested_token_cap(bad)
