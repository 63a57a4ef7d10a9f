"""One loaded export answering turns: the decoder and parser blobkit's evaluation and replay use.

A turn is decoded by :class:`trainers.episode_decode.ModelTurns` (the policy ``blobkit replay`` runs) over the
conversation rendered by the export's own chat template, and parsed in the export's tool format
(:func:`trainers.formats.format_of`): the endpoint adds no rendering or parsing of its own. Greedy requests
(temperature 0) give what ``blobkit replay --decoding free`` gives for the same conversation, token for token
(exact ties aside, see :mod:`trainers.episode_decode`): the endpoint knows no world, so it decodes free even for an
export evaluated with constrained decoding (:attr:`LoadedModel.decoding` says which). One turn decodes at a time
per model (a lock): the model is not re-entrant.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.formats import ParsedTurn, ToolFormat, format_of
from trainers.generation import prompt_ids
from trainers.replay import trained_decoding

from .errors import ServingError


@dataclass(frozen=True)
class Turn:
    """One decoded assistant turn."""

    text: str
    """The generated text, cut at the format's end token (and at a ``stop`` string)."""
    parsed: ParsedTurn
    """``text`` parsed in the export's tool format."""
    finish_reason: str
    """``tool_calls``, ``stop`` (an end token or a stop string) or ``length`` (the token cap)."""
    prompt_tokens: int
    completion_tokens: int


def _trained_max_new_tokens(export: Path) -> int:
    try:
        value = json.loads((export / "train_config.json").read_text(encoding="utf-8")).get("max_new_tokens")
    except (OSError, ValueError, AttributeError):
        value = None
    return value if isinstance(value, int) and value > 0 else 160


class LoadedModel:
    """An export loaded fresh from disk (verified against its manifest: :func:`trainers.export.load_export`)."""

    def __init__(self, name: str, export: Path) -> None:
        from trainers.export import load_export

        self.name, self.export = name, Path(export)
        self.model, self.tokenizer, self.manifest = load_export(self.export)
        self.tool_format: ToolFormat = format_of(self.tokenizer)
        """The format the export was trained in: its template renders, its parser reads."""
        self.max_new_tokens = _trained_max_new_tokens(self.export)
        """The default token cap: the one the export was trained and evaluated with."""
        self.decoding = trained_decoding(self.export)
        """How the export was evaluated (``free`` or ``constrained``); this endpoint decodes free either way."""
        self.lock = threading.Lock()

    def turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int | None = None,
             temperature: float = 0.0, seed: int | None = None, stop: list[str] | None = None) -> Turn:
        """The next assistant turn after ``messages`` (row format) with ``tools`` (function specs) shown.

        Raises ServingError when the export's chat template cannot render the conversation.
        """
        import secrets

        import torch
        from jinja2 import TemplateError

        from trainers.episode_decode import ModelTurns
        from trainers.errors import ToolFormatError
        from trainers.turns import TurnRequest

        cap = max_tokens or self.max_new_tokens
        seeded = seed if seed is not None else secrets.randbits(63)  # no seed: a fresh draw, as OpenAI samples
        generator = torch.Generator().manual_seed(seeded) if temperature > 0 else None
        policy = ModelTurns(self.model, self.tokenizer, cap, temperature, generator, slots=1,
                            tool_format=self.tool_format)
        with self.lock:
            try:
                prompt = prompt_ids(self.tokenizer, messages, tools)
            except (TemplateError, ToolFormatError, ValueError, TypeError, KeyError) as exc:  # the template refused it
                raise ServingError(f"the export's chat template cannot render this conversation: {exc}") from None
            policy.begin()
            text = policy.next_turns([TurnRequest(0, messages, tools)])[0]
            decoded = policy.decoded[0][-1]
            policy.done()
        stopped = _cut(text, stop or [])
        parsed = self.tool_format.parse(stopped)
        reason = "tool_calls" if parsed.tool_calls else (
            "stop" if decoded.finished or stopped != text else "length")
        return Turn(stopped, parsed, reason, len(prompt), len(decoded.new_ids))


def _cut(text: str, stops: list[str]) -> str:
    """``text`` cut before the first of ``stops`` that occurs in it."""
    at = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:at]


def model_name(export: Path) -> str:
    """The id an export is served under by default: its folder's name, or its parent's when it is called
    ``export`` (``out/run/export`` → ``run``)."""
    path = Path(export).resolve()
    return path.parent.name if path.name == "export" else path.name


def check_names(models: list[tuple[str, Path]]) -> None:
    """ServingError when two exports would be served under one id."""
    seen: set[str] = set()
    for name, _ in models:
        if name in seen:
            raise ServingError(f"two exports are served as {name!r}: name them, --model NAME=PATH")
        seen.add(name)
