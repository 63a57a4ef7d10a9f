"""How many tokens a generated assistant turn may take: derived from the kit's rows unless set, never below what a
row's turn needs.

A turn's tokens are what the model writes after the generation prompt until the turn ends: the answer or the call
and the end token that closes it (under the base's chat template, the tokens of the template's ``{% generation %}``
block the generation prompt does not already hold, up to its first end token). A turn cut at the token cap loses
its end (an answer's last clause, a call's closing tag), so no model can pass a case that needs such a turn, and
the verdict would blame the answer's wording. So the cap every generated turn runs under
(``TrainConfig.max_new_tokens``: evaluation, GRPO and RFT rollouts, pass^k, replay) is, unless set, the longest
assistant turn of the kit's training rows plus :data:`TOKEN_SLACK` of it (held-out answers name other entities,
whose strings may take a few more tokens), and a set cap below the longest turn is refused (ConfigError) unless
``short_episodes`` accepts it — a smoke run —, with the turns it cuts counted in ``plan.json``'s ``turn_tokens``.

Shapes: :func:`rows_turn_tokens` returns each row's turn lengths in tokens, in order; :func:`turn_tokens` the
config with ``max_new_tokens`` resolved and the :class:`~trainers.plan_record.TurnTokens` record.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from .catalog import resolve_base
from .chat_format import RenderedRow, render_row
from .config import TrainConfig
from .errors import ConfigError
from .formats import apply_tool_format, format_of
from .generation import stop_ids
from .plan_record import TurnTokens

TOKEN_SLACK = 0.25
"""Share of the longest training turn a derived cap adds: room for a held-out entity's longer strings."""


def turn_lengths(rendered: RenderedRow, header: int, end_ids: Collection[int]) -> list[int]:
    """What the model writes for each assistant turn of ``rendered``, in tokens: each run of the assistant mask,
    less its first ``header`` tokens (the generation prompt's tail, :func:`generation_header`), up to and including
    its first end token."""
    lengths: list[int] = []
    start = None
    for index, flag in enumerate([*rendered.assistant, 0]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            written = rendered.ids[start + header:index]
            ended = next((i + 1 for i, token in enumerate(written) if token in end_ids), len(written))
            lengths.append(ended)
            start = None
    return lengths


def generation_header(tokenizer: Any, row: dict[str, Any], rendered: RenderedRow) -> int:
    """How many tokens of an assistant turn's mask the generation prompt already holds (a template whose
    ``{% generation %}`` block opens before the prompt ends: the newline after Qwen's ``assistant``), measured on
    ``row``'s first assistant turn; 0 for a row without one."""
    first = next((i for i, m in enumerate(row["messages"]) if m.get("role") == "assistant"), None)
    if first is None or 1 not in rendered.assistant:
        return 0
    prompt = tokenizer.apply_chat_template(row["messages"][:first], tools=row.get("tools") or None,
                                           add_generation_prompt=True, tokenize=True, return_dict=False)
    return max(0, len(list(prompt)) - rendered.assistant.index(1))


def derived_cap(longest_turn_tokens: int) -> int:
    """The token cap derived from rows whose longest assistant turn takes ``longest_turn_tokens`` tokens (at least
    8, the config's floor)."""
    return max(8, longest_turn_tokens + math.ceil(longest_turn_tokens * TOKEN_SLACK))


def turn_tokens(config: TrainConfig, row_turns: Sequence[Sequence[int]]) -> tuple[TrainConfig, TurnTokens]:
    """``config`` with ``max_new_tokens`` resolved against ``row_turns`` (each training row's assistant turn
    lengths, :func:`turn_lengths`), and the record plan.json keeps: the cap, whether it was derived, the longest
    turn and its 1-based row, and how many turns the cap cuts. ConfigError for a set cap below the longest turn,
    unless ``config.short_episodes``."""
    longest, row = max(((max(turns, default=0), index + 1) for index, turns in enumerate(row_turns)),
                       default=(0, None))
    derived = config.max_new_tokens is None
    cap = derived_cap(longest) if config.max_new_tokens is None else config.max_new_tokens
    cut = sum(1 for turns in row_turns for length in turns if length > cap)
    if cut and not config.short_episodes:
        raise ConfigError(f"--max-new-tokens {cap} is below the {longest} tokens row {row}'s longest assistant turn "
                          f"takes under this base's chat template (its end token included): {cut} training turn(s) "
                          "would be cut before their end, and a held-out case needing such a turn could never pass. "
                          f"Leave --max-new-tokens unset (derived from the rows: {derived_cap(longest)}), or pass "
                          "--short-episodes for a smoke run that accepts it")
    record = TurnTokens(max_new_tokens=cap, derived=derived, longest_turn_tokens=longest, longest_turn_row=row,
                        turns_over_limit=cut, slack=TOKEN_SLACK if derived else None)
    return config.model_copy(update={"max_new_tokens": cap}), record


def rows_turn_tokens(tokenizer: Any, rows: Sequence[dict[str, Any]],
                     rendered: Sequence[RenderedRow] | None = None) -> list[list[int]]:
    """Every row's turn lengths (:func:`turn_lengths`) under ``tokenizer``'s chat template and tool format;
    ``rendered`` gives the rows already rendered (:func:`render_row`), else they are rendered here."""
    rendered = [render_row(tokenizer, row) for row in rows] if rendered is None else rendered
    if not rows:
        return []
    header = generation_header(tokenizer, rows[0], rendered[0])
    end_ids = set(stop_ids(tokenizer, format_of(tokenizer)))
    return [turn_lengths(row, header, end_ids) for row in rendered]


def resolve_for_base(config: TrainConfig, rows: Sequence[dict[str, Any]]) -> TrainConfig:
    """``config`` with ``max_new_tokens`` resolved against ``rows`` under the base's own tokenizer and tool format
    (loaded, from the hub if the base is a hub id): what a run does where its plan could not tokenize the rows."""
    from transformers import AutoTokenizer

    base = resolve_base(config.base, config.revision)
    tokenizer = AutoTokenizer.from_pretrained(base.name_or_path, revision=None if base.on_disk else base.revision)
    apply_tool_format(tokenizer, config.tool_format, where=base.record().get("id", base.name_or_path))
    return turn_tokens(config, rows_turn_tokens(tokenizer, rows))[0]
