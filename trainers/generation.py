"""Greedy generation of one assistant turn (CPU-friendly, KV-cached)."""

from __future__ import annotations

from typing import Any

from trainers.chat import END_TOKENS, render_prompt


def _stop_ids(tokenizer: Any) -> list[int]:
    ids: list[int] = []
    for token in END_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id not in ids:
            ids.append(token_id)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def generate_turn(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    max_new_tokens: int = 160,
) -> str:
    """Greedily decode one assistant turn after ``messages``; return its text without the end token.

    Decoding keeps special and added tokens (so ``<tool_call>`` tags survive) and cuts the text at
    the first end token (``<|im_end|>`` / ``<|endoftext|>``).
    """
    import torch
    from transformers import GenerationConfig

    prompt = render_prompt(tokenizer, messages, tools)
    encoded = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    device = next(model.parameters()).device
    input_ids = encoded["input_ids"].to(device)
    attention_mask = encoded["attention_mask"].to(device)
    stop_ids = _stop_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        eos_token_id=stop_ids,
        pad_token_id=pad_id,
    )
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            output = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    finally:
        if was_training:
            model.train()
    new_ids = output[0, input_ids.shape[1] :].tolist()
    text = tokenizer.decode(new_ids, skip_special_tokens=False)
    cut = min((i for i in (text.find(t) for t in END_TOKENS) if i >= 0), default=len(text))
    return text[:cut]
