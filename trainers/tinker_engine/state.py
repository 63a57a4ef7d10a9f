"""Saving and loading a session's state: the PEFT adapter and the AdamW moments, safetensors only.

A state folder holds:

- ``adapter_model.safetensors`` + ``adapter_config.json``: the adapter as PEFT saves it (the config's
  ``target_modules`` sorted), so the folder loads with ``PeftModel.from_pretrained`` and exports as a
  blobkit export;
- ``optimizer.safetensors`` (training state only): per trainable parameter ``NAME.exp_avg``,
  ``NAME.exp_avg_sq`` and ``NAME.step`` (float32), the whole of ``torch.optim.AdamW``'s state;
- ``session.json``: the LoRA settings and the number of optimizer steps taken.

No pickle anywhere: the optimizer's state is tensors, and its hyperparameters come with every step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.errors import ConfigError
from world_format.canonical import atomic_write_json

from .records import LoraSettings

ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER_FILE = "optimizer.safetensors"
SESSION_FILE = "session.json"
SESSION_FORMAT = "blobkit-tinker-state"


def write_adapter(model: Any, out: Path) -> None:
    """Save ``model``'s adapter (PEFT ``save_pretrained``, safetensors) into ``out``; PEFT's model card is dropped."""
    from trainers.sft_torch import canonicalise_adapter_config

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, save_embedding_layers=False)
    (out / "README.md").unlink(missing_ok=True)
    canonicalise_adapter_config(out / ADAPTER_CONFIG)


def adapter_tensors(folder: Path) -> dict[str, Any]:
    """The adapter's tensors as PEFT saved them (keys without the adapter name)."""
    from safetensors.torch import load_file

    path = folder / ADAPTER_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: no {ADAPTER_FILE}: not a saved adapter")
    return load_file(str(path))


def write_optimizer(named: list[tuple[str, Any]], optimizer: Any, out: Path) -> None:
    """AdamW's per-parameter state for the trainable ``named`` parameters, as ``optimizer.safetensors``."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    for name, parameter in named:
        state = optimizer.state.get(parameter) if optimizer is not None else None
        if not state:
            continue
        tensors[f"{name}.exp_avg"] = state["exp_avg"].detach().contiguous()
        tensors[f"{name}.exp_avg_sq"] = state["exp_avg_sq"].detach().contiguous()
        tensors[f"{name}.step"] = state["step"].detach().float().reshape(1).contiguous()
    save_file(tensors, str(out / OPTIMIZER_FILE))


def read_optimizer(named: list[tuple[str, Any]], optimizer: Any, folder: Path) -> None:
    """Restore AdamW's per-parameter state saved by :func:`write_optimizer` into ``optimizer``.

    Raises ConfigError when the file is missing or does not match the parameters.
    """
    from safetensors.torch import load_file

    path = folder / OPTIMIZER_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: no {OPTIMIZER_FILE}: this checkpoint holds no optimizer state")
    tensors = load_file(str(path))
    for name, parameter in named:
        if f"{name}.step" not in tensors:
            continue
        exp_avg, exp_avg_sq = tensors[f"{name}.exp_avg"], tensors[f"{name}.exp_avg_sq"]
        if exp_avg.shape != parameter.shape or exp_avg_sq.shape != parameter.shape:
            raise ConfigError(f"{path}: optimizer state of {name} has shape {tuple(exp_avg.shape)}, the parameter "
                              f"{tuple(parameter.shape)}")
        optimizer.state[parameter] = {"step": tensors[f"{name}.step"].reshape(()).clone(),
                                      "exp_avg": exp_avg.clone(), "exp_avg_sq": exp_avg_sq.clone()}


def write_session_file(out: Path, lora: LoraSettings, steps: int) -> None:
    """``session.json``: the LoRA settings and optimizer steps taken."""
    atomic_write_json(out / SESSION_FILE, {"format": SESSION_FORMAT, "version": 1, "lora": lora.model_dump(),
                                           "optimizer_steps": steps})


def read_session_file(folder: Path) -> tuple[LoraSettings, int]:
    """(LoRA settings, optimizer steps) of a saved state folder; ConfigError when it is not one."""
    path = Path(folder) / SESSION_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != SESSION_FORMAT:
            raise ValueError(f"not a {SESSION_FORMAT} file")
        return LoraSettings.model_validate(record["lora"]), int(record["optimizer_steps"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: cannot read the saved session: {exc}") from None
