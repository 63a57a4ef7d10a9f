"""Shared-prefix SFT: the prefix every row of a batch starts with is run once, its KV cache shared by the rows.

Every row of a kit starts with the same system prompt and tool list (on the retail kit, 61 % of a row's tokens
under Qwen2.5's tool format). A padded batch runs those tokens through every layer once per row; here they run
once per batch:

1. the batch's shared prefix (:func:`shared_prefix_length`: the longest run of ids every row starts with, at
   least one id of each row left after it) runs as one sequence, with gradients, keeping its keys and values;
2. each row's rest (its *suffix*, right-padded) runs on top of that cache, expanded to the batch (a view: the
   rows read the same keys and values, and backward sums their gradients into the one prefix pass), with
   position ids continuing after the prefix;
3. the loss is the same sum of next-token negative log-likelihoods over labelled positions as the unshared batch:
   the suffix positions as usual, and the prefix positions (whose hidden states are the same for every row) with
   each row's own target, so a row whose first trained token follows the prefix directly is still scored.

The loss and every gradient equal the unshared batch's to float rounding (tests/test_shared_prefix.py checks
1e-5 on the tiny model, full-weight and LoRA); the work saved is about ``prefix x (rows - 1)`` tokens of every
layer's projections and MLP per batch. Logits are computed for labelled positions only, in chunks
(:func:`labelled_nll`), so a 49k vocabulary never materialises ``tokens x vocabulary`` floats at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LOSS_CHUNK = 1024
"""Labelled positions whose logits are materialised together (:func:`labelled_nll`)."""


@dataclass(frozen=True)
class NLL:
    """A batch's summed negative log-likelihood over its labelled next tokens (a 0-d tensor with gradients),
    how many tokens that is and how many the model's argmax got right."""

    total: Any
    count: int
    correct: int


def shared_prefix_length(input_ids: Any, attention_mask: Any | None) -> int:
    """Length of the longest id prefix all rows share, leaving at least one real id per row after it (0 for one row).

    ``input_ids`` and ``attention_mask``: [rows, length], right-padded (mask 1 on real ids).
    """
    import torch

    rows, length = input_ids.shape
    if rows < 2:
        return 0
    real = attention_mask.sum(-1) if attention_mask is not None else torch.full((rows,), length)
    same = (input_ids == input_ids[:1]).all(0)
    differs = (~same).nonzero()
    prefix = int(differs[0]) if len(differs) else length
    return max(0, min(prefix, int(real.min()) - 1))


def labelled_nll(head: Any, hidden: Any, targets: Any, chunk: int = LOSS_CHUNK, weights: Any | None = None) -> NLL:
    """sum(-log p(target)) of ``hidden`` [n, width] through ``head`` against ``targets`` [n], ``chunk`` rows at a time;
    with ``weights`` [n], each term multiplied by its weight (:mod:`trainers.turn_weights`).

    Each chunk's logits (float32) are recomputed in backward (``torch.utils.checkpoint``) instead of kept, so at most
    ``chunk x vocabulary`` of them exist at once, forward or backward.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def piece(h: Any, t: Any, w: Any) -> tuple[Any, Any]:
        logits = head(h).float()
        losses = F.cross_entropy(logits, t, reduction="none")
        return (losses.sum() if w is None else (losses * w).sum()), (logits.argmax(-1) == t).sum()

    total, correct = hidden.new_zeros((), dtype=torch.float32), 0
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start:start + chunk], targets[start:start + chunk]
        w = None if weights is None else weights[start:start + chunk]
        if torch.is_grad_enabled() and h.requires_grad and hidden.shape[0] > chunk:
            loss, right = checkpoint(piece, h, t, w, use_reentrant=False)
        else:
            loss, right = piece(h, t, w)
        total = total + loss
        correct += int(right)
    return NLL(total, int(targets.shape[0]), correct)


def _expanded_cache(model: Any, cache: Any, rows: int) -> Any:
    """A new DynamicCache whose layers are views of ``cache``'s keys and values repeated ``rows`` times."""
    from transformers import DynamicCache

    expanded = DynamicCache(config=model.config)
    layers: list[Any] = expanded.layers
    sources: list[Any] = cache.layers
    for layer, source in zip(layers, sources, strict=True):
        keys = source.keys.expand(rows, *source.keys.shape[1:])
        values = source.values.expand(rows, *source.values.shape[1:])
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return expanded


def _plain_layers(model: Any) -> bool:
    """Whether the model's cache is plain full-attention layers (a sliding window or linear attention: no sharing)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers)


def _cache_argument(model: Any) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def shared_prefix_nll(causal_lm: Any, input_ids: Any, attention_mask: Any | None, labels: Any, *,
                      chunk: int = LOSS_CHUNK, weights: Any | None = None) -> tuple[NLL, int]:
    """The batch's :class:`NLL` with its shared prefix run once (module docstring), and the prefix length.

    ``causal_lm``: a transformers causal LM (``.model`` the decoder, ``get_output_embeddings()`` the head; a PEFT
    model's base with LoRA layers in it works the same). ``input_ids``, ``attention_mask`` and ``labels``:
    [rows, length], right-padded, labels -100 where no loss is taken (labels[t] is the target of position t - 1,
    as in transformers). ``weights``: None, or per-position loss weights aligned with ``labels``
    (:func:`trainers.turn_weights.turn_start_weights`). With no shared prefix (one row, rows differing at the
    first id, or a cache that is not plain full-attention layers) it is the plain padded batch.
    """
    import torch
    from transformers import DynamicCache

    decoder, head = causal_lm.model, causal_lm.get_output_embeddings()
    rows, length = input_ids.shape
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    prefix = shared_prefix_length(input_ids, attention_mask) if _plain_layers(decoder) else 0
    argument = _cache_argument(decoder)
    parts: list[NLL] = []
    if prefix:
        cache = DynamicCache(config=decoder.config)
        shared = decoder(input_ids=input_ids[:1, :prefix], use_cache=True, **{argument: cache}).last_hidden_state[0]
        targets = labels[:, 1:prefix + 1]  # [rows, prefix]: the target of each prefix position, per row
        scored = (targets != -100).any(0).nonzero()[:, 0]
        if len(scored):
            # one hidden state per scored position, repeated for each row that labels it
            row_index, position_index = (targets[:, scored] != -100).nonzero(as_tuple=True)
            chosen = targets[:, scored][row_index, position_index]
            chosen_weights = None if weights is None else weights[:, 1:prefix + 1][:, scored][row_index, position_index]
            parts.append(labelled_nll(head, shared[scored][position_index], chosen, chunk, chosen_weights))
        past = _expanded_cache(decoder, cache, rows)
        positions = torch.arange(prefix, length, device=input_ids.device).expand(rows, -1)
        hidden = decoder(input_ids=input_ids[:, prefix:], attention_mask=mask, position_ids=positions,
                         use_cache=True, **{argument: past}).last_hidden_state
    else:
        hidden = decoder(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
    next_tokens = labels[:, prefix + 1:]
    labelled = next_tokens != -100
    suffix_weights = None if weights is None else weights[:, prefix + 1:][labelled]
    parts.append(labelled_nll(head, hidden[:, :-1][labelled], next_tokens[labelled], chunk, suffix_weights))
    total = parts[0].total if len(parts) == 1 else parts[0].total + parts[1].total
    return NLL(total, sum(p.count for p in parts), sum(p.correct for p in parts)), prefix
