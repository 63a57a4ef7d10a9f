"""Decision-weighted SFT loss: the first trained tokens of every assistant turn weigh more.

An assistant turn of a tool-using row decides early: its first tokens say whether it calls a tool or answers
(SmolLM2's tool format: ``\\n<tool_call>`` against ``\\nDone``) and, a few tokens on, which tool. Those few tokens
are where a turn that read its observation differs from one that did not (a leg ``confirmed`` against ``flown``
before ``set_meal``), yet under a per-token mean they are a few percent of a row's loss. ``--decision-weight W``
multiplies the negative log-likelihood of the first :data:`DECISION_TOKENS` trained tokens of each turn by ``W``
(every other trained token keeps weight 1); the loss is still divided by the number of trained tokens, so
``W = 1`` is exactly the unweighted loss.
"""

from __future__ import annotations

from typing import Any

DECISION_TOKENS = 16
"""Trained tokens at the start of each assistant turn that take the decision weight (SmolLM2's tool format: the
opening newline, ``<tool_call>``, the JSON up to the tool name and the name itself, about 14 tokens)."""


def turn_start_weights(labels: Any, weight: float, tokens: int = DECISION_TOKENS) -> Any:
    """Per-position loss weights [rows, length] (float32) aligned with ``labels`` [rows, length].

    ``labels`` is -100 where no loss is taken (labels[t] is the target of position t - 1, as in transformers); a
    turn is a run of consecutive trained labels. The first ``tokens`` labels of each run get ``weight``, every other
    position 1 (untrained positions' weights are never read).
    """
    import torch

    trained = labels != -100
    index = torch.arange(labels.shape[1], device=labels.device).expand_as(labels)
    # the index of the last untrained position at or before each position: a run starts just after it
    last_untrained = torch.where(trained, torch.full_like(index, -1), index).cummax(dim=1).values
    place = index - last_untrained  # 1 for a run's first label, 2 for its second, ...
    weights = torch.ones(labels.shape, dtype=torch.float32, device=labels.device)
    return weights.masked_fill(trained & (place <= tokens), float(weight))
