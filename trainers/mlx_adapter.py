"""Converting LoRA adapters between mlx-lm's layout and PEFT's, on disk, in both directions.

The two store the same low-rank update differently (read from mlx-lm 0.32 ``tuner/lora.py`` and
peft 0.21 ``tuners/lora/layer.py``)::

    mlx-lm  adapters.safetensors    <module>.lora_a (in, r), <module>.lora_b (r, out)
            adapter_config.json     {"fine_tune_type": "lora", "num_layers": N,
                                     "lora_parameters": {"rank": r, "scale": s, "dropout": p, "keys": [...]}}
            y = W x + s * (x @ lora_a) @ lora_b

    PEFT    adapter_model.safetensors  base_model.model.<module>.lora_A.weight (r, in), ….lora_B.weight (out, r)
            adapter_config.json        {"r": r, "lora_alpha": a, "target_modules": [...], ...}
            y = W x + (a / r) * B (A x)          (a / sqrt(r) with use_rslora)

so ``lora_A = lora_a.T``, ``lora_B = lora_b.T`` and ``lora_alpha = scale * r``. Module paths are the
Hugging Face ones on both sides (``model.layers.3.self_attn.q_proj``), which holds for the Qwen2 and
Llama families mlx-lm loads. Only LoRA on the linear layers of the transformer blocks is converted;
DoRA, embedding LoRA, trained biases and ``modules_to_save`` are refused with a message.

Tensors are read and written with ``safetensors.torch`` (bf16-safe, no mlx needed), so an mlx
adapter can be exported on a machine without mlx.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from trainers.config import read_json_object
from trainers.errors import ConfigError
from world_format.canonical import atomic_write_json

MLX_WEIGHTS = "adapters.safetensors"
PEFT_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")
_PEFT_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])\.weight$")
_MLX_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[ab])$")
_PEFT_REFUSED = {"use_dora": "DoRA", "modules_to_save": "modules_to_save", "rank_pattern": "rank_pattern",
                 "alpha_pattern": "alpha_pattern", "trainable_token_indices": "trainable_token_indices",
                 "fan_in_fan_out": "fan_in_fan_out"}


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "the adapter config", "the adapter config must be a JSON object")


def _read_tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    if not path.is_file():
        raise ConfigError(f"{path}: no adapter weights here")
    return dict(load_file(str(path)))


def _write_tensors(path: Path, tensors: dict[str, Any], metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: tensors[k].contiguous() for k in sorted(tensors)}, str(tmp), metadata=metadata)
    tmp.replace(path)


def block_module(module: str, where: Path) -> tuple[int, str]:
    """(block index, path inside the block) of a module path such as ``model.layers.3.mlp.up_proj``."""
    match = _LAYER.search(module)
    if match is None:
        raise ConfigError(f"{where}: LoRA on {module!r} is outside the transformer blocks; only the blocks' "
                          "linear layers convert between mlx and PEFT")
    return int(match.group(1)), match.group(2)


def _pairs(tensors: dict[str, Any], pattern: re.Pattern[str], where: Path) -> dict[str, dict[str, Any]]:
    """Group ``<module>.<a|b>`` tensors by module; refuse unknown keys and half pairs."""
    modules: dict[str, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        match = pattern.match(key)
        if match is None:
            raise ConfigError(f"{where}: tensor {key!r} is not a LoRA A/B matrix (DoRA, embedding LoRA and "
                              "trained biases do not convert)")
        modules.setdefault(match.group("module"), {})[match.group("part").lower()] = tensor
    for module, parts in modules.items():
        if set(parts) != {"a", "b"}:
            raise ConfigError(f"{where}: {module} has only lora_{''.join(parts)}; both A and B are needed")
    if not modules:
        raise ConfigError(f"{where}: the adapter holds no LoRA tensors")
    return modules


def _rank(modules: dict[str, dict[str, Any]], axis: int, where: Path) -> int:
    """The one LoRA rank: axis ``axis`` of every A matrix (1 for mlx's (in, r), 0 for PEFT's (r, in))."""
    ranks = {int(parts["a"].shape[axis]) for parts in modules.values()}
    if len(ranks) != 1:
        raise ConfigError(f"{where}: modules have different ranks {sorted(ranks)}; one rank is supported")
    return ranks.pop()


def _whole_number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def mlx_to_peft(mlx_dir: Path, peft_dir: Path, *, base_model_name_or_path: str) -> Path:
    """Write the mlx-lm LoRA adapter in ``mlx_dir`` as a PEFT adapter in ``peft_dir``; return ``peft_dir``.

    ``target_modules`` lists the exact module paths, sorted, as PEFT saves an ``all-linear``
    adapter and local-torch canonicalises it.
    """
    mlx_dir, peft_dir = Path(mlx_dir), Path(peft_dir)
    config = _read_json(mlx_dir / ADAPTER_CONFIG)
    if config.get("fine_tune_type", "lora") != "lora":
        raise ConfigError(f"{mlx_dir}: fine_tune_type {config['fine_tune_type']!r} is not LoRA; only LoRA converts")
    params = config.get("lora_parameters") or {}
    if "scale" not in params:
        raise ConfigError(f"{mlx_dir / ADAPTER_CONFIG}: lora_parameters.scale is missing")
    modules = _pairs(_read_tensors(mlx_dir / MLX_WEIGHTS), _MLX_KEY, mlx_dir)
    rank = _rank(modules, 1, mlx_dir)
    tensors: dict[str, Any] = {}
    for module, parts in modules.items():
        block_module(module, mlx_dir)
        tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = parts["a"].T
        tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = parts["b"].T
    peft_config = {
        "base_model_name_or_path": base_model_name_or_path, "bias": "none", "fan_in_fan_out": False,
        "inference_mode": True, "init_lora_weights": True, "lora_alpha": _whole_number(float(params["scale"]) * rank),
        "lora_dropout": float(params.get("dropout", 0.0)), "peft_type": "LORA", "r": rank,
        "target_modules": sorted(modules), "task_type": "CAUSAL_LM",
        "use_dora": False, "use_rslora": False,
    }
    _write_tensors(peft_dir / PEFT_WEIGHTS, tensors, {"format": "pt"})
    atomic_write_json(peft_dir / ADAPTER_CONFIG, peft_config)
    return peft_dir


def _peft_scale(config: dict[str, Any], where: Path) -> float:
    """mlx-lm's ``scale`` for a PEFT config, refusing the options mlx-lm's LoRA cannot express."""
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(f"{where}: peft_type {config.get('peft_type')!r} is not LORA")
    for key, label in _PEFT_REFUSED.items():
        if config.get(key):
            raise ConfigError(f"{where}: {label} is set; mlx-lm LoRA cannot express it, so it does not convert")
    if config.get("bias", "none") != "none":
        raise ConfigError(f"{where}: bias {config['bias']!r} trains biases; only bias 'none' converts")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def peft_to_mlx(peft_dir: Path, mlx_dir: Path) -> Path:
    """Write the PEFT LoRA adapter in ``peft_dir`` as an mlx-lm adapter in ``mlx_dir``; return ``mlx_dir``.

    The mlx config adapts every block (``num_layers: -1``) at the adapter's inner-block paths;
    modules the PEFT adapter leaves out keep a zero ``lora_b`` on load, so the outputs are equal.
    """
    peft_dir, mlx_dir = Path(peft_dir), Path(mlx_dir)
    config = _read_json(peft_dir / ADAPTER_CONFIG)
    scale = _peft_scale(config, peft_dir / ADAPTER_CONFIG)
    modules = _pairs(_read_tensors(peft_dir / PEFT_WEIGHTS), _PEFT_KEY, peft_dir)
    rank = _rank(modules, 0, peft_dir)
    tensors: dict[str, Any] = {}
    keys: set[str] = set()
    for module, parts in modules.items():
        if not module.startswith(PEFT_PREFIX):
            raise ConfigError(f"{peft_dir}: tensor path {module!r} does not start with {PEFT_PREFIX!r}")
        path = module[len(PEFT_PREFIX):]
        keys.add(block_module(path, peft_dir)[1])
        tensors[f"{path}.lora_a"] = parts["a"].T
        tensors[f"{path}.lora_b"] = parts["b"].T
    mlx_config = {"fine_tune_type": "lora", "num_layers": -1,
                  "lora_parameters": {"rank": rank, "scale": scale, "dropout": float(config.get("lora_dropout", 0.0)),
                                      "keys": sorted(keys)}}
    _write_tensors(mlx_dir / MLX_WEIGHTS, tensors, {"format": "mlx"})
    atomic_write_json(mlx_dir / ADAPTER_CONFIG, mlx_config)
    return mlx_dir
