"""Which linear layers a LoRA adapter adapts, from the SDK's ``train_attn``/``train_mlp``/``train_unembed`` flags.

The layers are found in the model, not named per family: a ``Linear`` inside a block's attention
module (a path segment containing ``attn`` or ``attention``), inside its MLP (``mlp``,
``feed_forward`` or ``ffn``), and the output embedding. With all three flags but ``train_unembed``
set, the set is exactly PEFT's ``all-linear`` (what ``trainers.lora.peft_lora_config`` trains), so a
Tinker adapter and a ``blobkit train`` adapter of one base adapt the same layers.
"""

from __future__ import annotations

from typing import Any

from trainers.errors import ConfigError

from .records import LoraSettings

ATTENTION_WORDS = ("attn", "attention")
MLP_WORDS = ("mlp", "feed_forward", "ffn")


def _kind(path: str) -> str | None:
    parents = path.lower().split(".")[:-1]
    if any(word in part for part in parents for word in ATTENTION_WORDS):
        return "attn"
    if any(word in part for part in parents for word in MLP_WORDS):
        return "mlp"
    return None


def lora_targets(model: Any, settings: LoraSettings) -> list[str]:
    """The module names (last path segment, sorted) of the linear layers ``settings`` adapts.

    Raises ConfigError when the flags leave nothing to train.
    """
    import torch

    wanted = {"attn": settings.train_attn, "mlp": settings.train_mlp}
    output = model.get_output_embeddings()
    names: set[str] = set()
    for path, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if module is output:
            if settings.train_unembed:
                names.add(path.split(".")[-1])
            continue
        kind = _kind(path)
        if kind is not None and wanted[kind]:
            names.add(path.split(".")[-1])
    if not names:
        raise ConfigError("lora_config trains nothing: set at least one of train_attn, train_mlp, train_unembed")
    return sorted(names)
