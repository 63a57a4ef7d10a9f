"""A trainable LoRA model session: forward/backward with a named loss, AdamW steps, saved and restored state.

Gradients accumulate across :meth:`TrainingSession.forward_backward` calls until
:meth:`TrainingSession.optim_step` applies them (Tinker's semantics), so a batch sent in several
requests trains as one. Examples run one at a time (no padding, memory bounded by the longest
example). The model runs in eval mode (no dropout): the same weights and inputs give the same loss
and gradients on every call, which is what makes a resumed run equal an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainers.errors import InputDataError
from trainers.lora import ALPHA_PER_RANK

from .losses import LOSSES, REQUIRED
from .records import AdamSettings, Example, ForwardResult, LoraSettings
from .state import adapter_tensors, read_optimizer, write_adapter, write_optimizer, write_session_file
from .targets import lora_targets

FLOAT_INPUTS = ("weights", "logprobs", "advantages")


def load_base(base_path: Path) -> Any:
    """The base model in float32 from safetensors, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_path, use_safetensors=True, dtype=torch.float32).eval()


def lora_model(base_path: Path, lora: LoraSettings) -> Any:
    """The base with a freshly initialised adapter (seeded by ``lora.seed``, alpha = 2 r, no dropout)."""
    import torch
    from peft import LoraConfig, get_peft_model

    base = load_base(base_path)
    config = LoraConfig(r=lora.rank, lora_alpha=ALPHA_PER_RANK * lora.rank, target_modules=lora_targets(base, lora),
                        lora_dropout=0.0, task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(lora.seed)
        return get_peft_model(base, config).eval()


def _check_example(index: int, example: Example, loss: str, vocab: int) -> None:
    where = f"datum {index}"
    if example.tokens.ndim != 1 or example.length == 0:
        raise InputDataError(f"{where}: model_input must be a non-empty token sequence")
    if int(example.tokens.min()) < 0 or int(example.tokens.max()) >= vocab:
        raise InputDataError(f"{where}: model_input has token ids outside the vocabulary [0, {vocab})")
    for name in REQUIRED[loss]:
        if name not in example.inputs:
            raise InputDataError(f"{where}: loss {loss} needs loss_fn_inputs[{name!r}]")
    for name, values in example.inputs.items():
        if values.shape != (example.length,):
            raise InputDataError(f"{where}: loss_fn_inputs[{name!r}] has shape {list(values.shape)}, model_input "
                                 f"has {example.length} tokens (every loss input is one value per position)")
        if name == "target_tokens" and (int(values.min()) < 0 or int(values.max()) >= vocab):
            raise InputDataError(f"{where}: target_tokens has ids outside the vocabulary [0, {vocab})")
        if name in FLOAT_INPUTS and not np.all(np.isfinite(values)):
            raise InputDataError(f"{where}: loss_fn_inputs[{name!r}] has values that are not finite")


def check_examples(examples: Sequence[Example], loss: str, vocab: int) -> None:
    """InputDataError naming the datum and the input when a batch cannot be run with ``loss``."""
    if loss not in LOSSES:
        raise InputDataError(f"loss_fn {loss!r} is not served here; served: {', '.join(LOSSES)}")
    if not examples:
        raise InputDataError("forward_backward needs at least one datum")
    for index, example in enumerate(examples):
        _check_example(index, example, loss, vocab)


def target_logprobs(model: Any, tokens: Any, targets: Any) -> Any:
    """log p(targets[i] | tokens[: i + 1]) for every position, shape ``(T,)``, float32."""
    import torch

    logits = model(input_ids=tokens[None], use_cache=False).logits[0].float()
    return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


class TrainingSession:
    """One LoRA model being trained: its adapter, its optimizer, and the steps it took."""

    def __init__(self, base_path: Path, lora: LoraSettings) -> None:
        self.base_path, self.lora = Path(base_path), lora
        self.model = lora_model(self.base_path, lora)
        self.vocab = int(self.model.get_output_embeddings().weight.shape[0])
        self.optimizer: Any = None
        self.steps = 0

    @property
    def trainable(self) -> list[tuple[str, Any]]:
        """(name, parameter) of every trainable (adapter) parameter, in model order."""
        return [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]

    def forward_backward(self, examples: Sequence[Example], loss: str, config: Mapping[str, float] | None = None,
                         *, backward: bool = True) -> ForwardResult:
        """Run ``loss`` on every example; with ``backward``, add its gradients to those accumulated so far.

        Raises InputDataError (before anything runs) when an example does not fit the model or the loss.
        """
        import torch

        check_examples(examples, loss, self.vocab)
        loss_fn, config = LOSSES[loss], dict(config or {})
        outputs, total, weighted = [], 0.0, 0
        for example in examples:
            tensors = {name: torch.from_numpy(np.ascontiguousarray(values)) for name, values in example.inputs.items()}
            with torch.set_grad_enabled(backward):
                logp = target_logprobs(self.model, torch.from_numpy(example.tokens.astype(np.int64)),
                                       tensors["target_tokens"].long())
                terms = loss_fn(logp, tensors, config)
                example_loss = terms.sum()
                if backward:
                    example_loss.backward()
            total += float(example_loss.detach())
            weights = tensors.get("weights")
            weighted += int((weights != 0).sum()) if weights is not None else example.length
            outputs.append({"logprobs": logp.detach().numpy().astype(np.float32),
                            "elementwise_loss": terms.detach().numpy().astype(np.float32)})
        return ForwardResult(outputs, {"loss:sum": total, "tokens:sum": float(weighted)},
                             sum(example.length for example in examples))

    def gradients(self) -> dict[str, Any]:
        """The accumulated gradient of every trainable parameter (a copy; zeros where none accumulated)."""
        import torch

        return {name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                for name, p in self.trainable}

    def _optimizer(self, adam: AdamSettings) -> Any:
        import torch

        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW([p for _, p in self.trainable], lr=adam.learning_rate,
                                               betas=(adam.beta1, adam.beta2), eps=adam.eps,
                                               weight_decay=adam.weight_decay)
        for group in self.optimizer.param_groups:
            group.update(lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps,
                         weight_decay=adam.weight_decay)
        return self.optimizer

    def optim_step(self, adam: AdamSettings) -> dict[str, float]:
        """Apply the accumulated gradients with one AdamW step, then clear them; returns ``grad_norm`` (before
        clipping) and ``learning_rate``."""
        import torch

        optimizer = self._optimizer(adam)
        parameters = [p for _, p in self.trainable]
        clip = adam.grad_clip_norm if adam.grad_clip_norm > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, clip))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return {"grad_norm": norm, "learning_rate": adam.learning_rate}

    def adapter_state(self) -> dict[str, Any]:
        """A copy of the adapter's weights (PEFT's state dict, without the adapter name)."""
        from peft import get_peft_model_state_dict

        return {name: tensor.detach().clone() for name, tensor in get_peft_model_state_dict(
            self.model, save_embedding_layers=False).items()}

    def save(self, out: Path, *, optimizer: bool) -> None:
        """Write the adapter (and with ``optimizer`` the AdamW state) and ``session.json`` into ``out``."""
        write_adapter(self.model, out)
        if optimizer:
            write_optimizer(self.trainable, self.optimizer, out)
        write_session_file(out, self.lora, self.steps)

    def load(self, folder: Path, *, optimizer: bool, steps: int = 0) -> None:
        """Load the adapter saved in ``folder`` (and with ``optimizer`` the AdamW state; otherwise the optimizer
        starts fresh). Raises ConfigError when the folder does not match this session's adapter."""
        from peft import set_peft_model_state_dict

        from trainers.errors import ConfigError

        saved = adapter_tensors(Path(folder))
        expected = set(self.adapter_state())
        if set(saved) != expected:
            raise ConfigError(f"{folder}: the saved adapter's tensors do not match this model's adapter")
        set_peft_model_state_dict(self.model, saved)
        self.model.zero_grad(set_to_none=True)
        self.optimizer, self.steps = None, steps
        if optimizer:
            read_optimizer(self.trainable, self._optimizer(AdamSettings()), Path(folder))
