"""Decoding one assistant turn: a small KV-cached loop, greedy for evaluation, sampled for GRPO.

``model.generate`` spends most of its time per token in Python bookkeeping (logits processors,
stopping criteria, cache wrappers); for a tiny model on CPU that is most of the cost. This loop
does one cached forward per token and nothing else, and it returns the token ids, so GRPO can
score exactly the tokens the model produced (no decode/re-encode round trip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chat_format import render_prompt
from .formats import ToolFormat


def stop_ids(tokenizer: Any, fmt: ToolFormat) -> list[int]:
    """Token ids that end an assistant turn: the format's end tokens that the tokenizer holds, and its eos."""
    ids: list[int] = []
    for token in fmt.end_tokens:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id not in ids:
            ids.append(token_id)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


@dataclass(frozen=True)
class Decoded:
    """One decoded turn: the new token ids (including the end token when one was produced)."""

    prompt_ids: list[int]
    new_ids: list[int]
    finished: bool
    """True when an end token was produced before ``max_new_tokens``."""


SMALL_MODEL_PARAMETERS = 50_000_000


def is_small_model(model: Any) -> bool:
    """Whether the model has under :data:`SMALL_MODEL_PARAMETERS` parameters (decoded on one CPU thread)."""
    return sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS


def cache_argument(model: Any) -> str:
    """transformers 5.24 renamed ``past_key_values`` to ``cache``; use whichever this version takes."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def new_cache(model: Any) -> Any:
    """An empty KV cache, filled in place by each forward call."""
    from transformers import DynamicCache

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return DynamicCache(config=inner.config)


def decode(model: Any, prompt_ids: list[int], end_ids: list[int], *, max_new_tokens: int,
           temperature: float = 0.0, generator: Any = None) -> Decoded:
    """Greedy (``temperature == 0``) or sampled decoding with a KV cache, stopping at an end token."""
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    new_ids: list[int] = []
    finished = False
    threads = torch.get_num_threads()
    if device.type == "cpu" and is_small_model(model):
        # One token through a tiny model is far too little work to split across threads; on a
        # loaded 2-core machine thread hand-offs made each token 5-20x slower (measured).
        torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            cache = {cache_argument(model): new_cache(model)}
            output = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True, logits_to_keep=1,
                           **cache)
            for _ in range(max_new_tokens):
                logits = output.logits[0, -1].float()
                if temperature > 0:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probs.cpu(), 1, generator=generator).item())
                else:
                    token = int(torch.argmax(logits).item())
                new_ids.append(token)
                if token in end_ids:
                    finished = True
                    break
                output = model(input_ids=torch.tensor([[token]], device=device), use_cache=True, **cache)
    finally:
        torch.set_num_threads(threads)
        if was_training:
            model.train()
    return Decoded(prompt_ids=list(prompt_ids), new_ids=new_ids, finished=finished)


def turn_text(tokenizer: Any, new_ids: list[int], fmt: ToolFormat) -> str:
    """The decoded text of a turn, keeping added tokens, cut at the first of the format's end tokens."""
    text = tokenizer.decode(new_ids, skip_special_tokens=False)
    cut = min((i for i in (text.find(t) for t in fmt.end_tokens) if i >= 0), default=len(text))
    return str(text[:cut])


def prompt_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
               fmt: ToolFormat | None = None) -> list[int]:
    """Token ids of the rendered prompt (chat template with the generation prompt; ``fmt``'s template when given)."""
    return list(tokenizer(render_prompt(tokenizer, messages, tools, fmt), add_special_tokens=False)["input_ids"])


def generate_turn(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    max_new_tokens: int = 160,
    fmt: ToolFormat,
) -> str:
    """Greedily decode one assistant turn after ``messages``; return its text without the end token.

    Decoding keeps special and added tokens (so ``<tool_call>`` tags survive) and cuts the text at
    the first of ``fmt``'s end tokens (there is no default format: a turn is written in the policy's). The prompt
    is the tokenizer's own chat template (the format's, once :func:`trainers.formats.apply_tool_format` set it).
    """
    decoded = decode(model, prompt_ids(tokenizer, messages, tools), stop_ids(tokenizer, fmt),
                     max_new_tokens=max_new_tokens)
    return turn_text(tokenizer, decoded.new_ids, fmt)
