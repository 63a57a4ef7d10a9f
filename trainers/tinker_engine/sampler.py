"""Sampling from a frozen copy of a model's weights: sequences with their logprobs, and prompt logprobs.

A :class:`Sampler` holds its own model (the base alone, or the base with an adapter's weights), so
training the session it came from never changes what it samples. The ``num_samples`` sequences of
one request decode together as one batch with a KV cache; sequence ``i`` draws from its own
generator seeded with ``seed + i``, so a seeded request returns the same tokens every time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainers.errors import InputDataError
from trainers.generation import cache_argument, new_cache

from .records import LoraSettings, SampledSequence, SampleResult, SamplingSettings
from .session import load_base, lora_model


def _filtered(logits: Any, top_k: int, top_p: float) -> Any:
    """``logits`` with everything outside the top-k and the top-p nucleus set to -inf (one row)."""
    import torch

    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(-1)
        drop = cumulative - torch.softmax(ordered, dim=-1) >= top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


def _ends_with_stop(tokens: list[int], stops: tuple[tuple[int, ...], ...]) -> bool:
    return any(len(tokens) >= len(stop) and tuple(tokens[-len(stop):]) == stop for stop in stops)


class Sampler:
    """A model to sample from: the base at ``base_path``, with the adapter ``adapter`` (PEFT tensors) when given."""

    def __init__(self, base_path: Path, lora: LoraSettings | None = None, adapter: Mapping[str, Any] | None = None,
                 *, end_ids: tuple[int, ...] = (), decode: Callable[[list[int]], str] | None = None) -> None:
        self.base_path, self.lora = Path(base_path), lora
        self.end_ids, self.decode = end_ids, decode
        self.model = lora_model(self.base_path, lora) if lora is not None else load_base(self.base_path)
        self.vocab = int(self.model.get_output_embeddings().weight.shape[0])
        if adapter is not None:
            self.load_adapter(adapter)

    def load_adapter(self, adapter: Mapping[str, Any]) -> None:
        """Replace the adapter's weights with ``adapter`` (same LoRA settings)."""
        from peft import set_peft_model_state_dict

        if self.lora is None:
            raise InputDataError("this sampler serves the base model and has no adapter to load")
        set_peft_model_state_dict(self.model, dict(adapter))

    def _check(self, prompt: list[int], settings: SamplingSettings) -> None:
        if not prompt:
            raise InputDataError("the prompt is empty")
        if min(prompt) < 0 or max(prompt) >= self.vocab:
            raise InputDataError(f"the prompt has token ids outside the vocabulary [0, {self.vocab})")
        for stop in settings.stop:
            if not stop or min(stop) < 0 or max(stop) >= self.vocab:
                raise InputDataError(f"stop sequence {list(stop)} is empty or outside the vocabulary")

    def sample(self, prompt: list[int], num_samples: int, settings: SamplingSettings, *,
               prompt_logprobs: bool = False, stop_strings: tuple[str, ...] = ()) -> SampleResult:
        """``num_samples`` continuations of ``prompt`` (and the prompt's logprobs when asked).

        A sequence ends at a stop sequence, a stop string (matched on the decoded text), the
        end-of-sequence token, or ``settings.max_tokens``. Raises InputDataError for token ids
        outside the vocabulary or an empty prompt.
        """
        import torch

        self._check(prompt, settings)
        if num_samples < 1:
            raise InputDataError("num_samples must be at least 1")
        seed = settings.seed if settings.seed is not None else 0
        generators = [torch.Generator().manual_seed(seed + i) for i in range(num_samples)]
        with torch.inference_mode():
            ids = torch.tensor([prompt] * num_samples)
            cache = {cache_argument(self.model): new_cache(self.model)}
            output = self.model(input_ids=ids, use_cache=True, logits_to_keep=0 if prompt_logprobs else 1, **cache)
            scored = None
            if prompt_logprobs:
                logits = output.logits[0].float()
                logp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
                scored = [float("nan"), *logp.tolist()]
            tokens: list[list[int]] = [[] for _ in range(num_samples)]
            logprobs: list[list[float]] = [[] for _ in range(num_samples)]
            done = [False] * num_samples
            last = output.logits[:, -1].float()
            for _ in range(settings.max_tokens):
                step = []
                for row in range(num_samples):
                    token = tokens[row][-1] if done[row] else self._draw(last[row], settings, generators[row],
                                                                        tokens[row], logprobs[row])
                    step.append(token)
                    if not done[row] and self._finished(tokens[row], settings, stop_strings):
                        done[row] = True
                if all(done):
                    break
                output = self.model(input_ids=torch.tensor(step)[:, None], use_cache=True, **cache)
                last = output.logits[:, -1].float()
        sequences = [SampledSequence(tokens[row], logprobs[row], "stop" if done[row] else "length")
                     for row in range(num_samples)]
        return SampleResult(sequences, scored)

    def _draw(self, logits: Any, settings: SamplingSettings, generator: Any, tokens: list[int],
              logprobs: list[float]) -> int:
        import torch

        if settings.temperature == 0:
            token = int(torch.argmax(logits))
            logprobs.append(float(torch.log_softmax(logits, -1)[token]))
        else:
            scaled = logits / settings.temperature
            filtered = _filtered(scaled, settings.top_k, settings.top_p)
            token = int(torch.multinomial(torch.softmax(filtered, -1), 1, generator=generator))
            logprobs.append(float(torch.log_softmax(scaled, -1)[token]))
        tokens.append(token)
        return token

    def _finished(self, tokens: list[int], settings: SamplingSettings, stop_strings: tuple[str, ...]) -> bool:
        if tokens and tokens[-1] in self.end_ids:
            return True
        if _ends_with_stop(tokens, settings.stop):
            return True
        if stop_strings and self.decode is not None:
            text = self.decode(tokens[-32:])
            return any(stop in text for stop in stop_strings)
        return False
