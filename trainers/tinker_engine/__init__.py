"""A LoRA model session for a Tinker-compatible service: forward/backward, AdamW steps, sampling, saved state.

One concept per module: :mod:`.records` (the typed records that cross into and out of the engine),
:mod:`.losses` (the loss functions, one registry), :mod:`.targets` (which linear layers a LoRA
adapts), :mod:`.session` (a trainable LoRA model with its optimizer), :mod:`.state` (saving and
loading adapter and optimizer state as safetensors), :mod:`.sampler` (sampling and prompt logprobs
from a frozen copy of the weights). Nothing here knows HTTP or the Tinker wire format; the service
(``blobkit.service.tinker``) translates requests into these records.
"""

from .losses import LOSSES, LossFn
from .records import (
    AdamSettings,
    Example,
    ForwardResult,
    LoraSettings,
    SampledSequence,
    SampleResult,
    SamplingSettings,
)
from .sampler import Sampler
from .session import TrainingSession
from .state import ADAPTER_FILE, OPTIMIZER_FILE, SESSION_FILE, read_session_file

__all__ = ["ADAPTER_FILE", "LOSSES", "OPTIMIZER_FILE", "SESSION_FILE", "AdamSettings", "Example", "ForwardResult",
           "LoraSettings", "LossFn", "SampleResult", "SampledSequence", "Sampler", "SamplingSettings",
           "TrainingSession", "read_session_file"]
