"""What a live SDK session holds: its training runs (models being trained) and its samplers.

A session is a train job (same id). It stays alive while its client heartbeats or calls; after
``heartbeat_timeout`` seconds of silence it expires: its train job is marked ``expired`` and its
models and samplers are let go (their memory freed), and its next heartbeat gets 410.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from trainers.tinker_engine.records import LoraSettings

from .bases import ServedBase
from .ordering import SeqQueue


@dataclass
class TrainingRun:
    """A model being trained: its engine session, its base and the ordering of its requests."""

    model_id: str
    """``SESSION:train:N``."""
    base: ServedBase
    lora: LoraSettings
    engine: Any
    """The :class:`trainers.tinker_engine.TrainingSession`."""
    queue: SeqQueue = field(default_factory=SeqQueue)


@dataclass
class SamplingRun:
    """A sampler: frozen weights of a base, a saved sampler checkpoint or a training run's snapshot."""

    sampling_session_id: str
    """``SESSION:sample:N``."""
    base: ServedBase
    model_path: str | None
    """The ``tinker://`` checkpoint it samples, None for the base itself or an unnamed snapshot."""
    engine: Any
    """The :class:`trainers.tinker_engine.Sampler`."""


@dataclass
class LiveSession:
    """One SDK session in memory."""

    session_id: str
    workspace: str
    owner: str
    seen_at: float = field(default_factory=time.monotonic)
    runs: dict[str, TrainingRun] = field(default_factory=dict)
    samplers: dict[str, SamplingRun] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def touch(self) -> None:
        """The client is alive."""
        self.seen_at = time.monotonic()

    def release(self, reason: str) -> None:
        """Let go of every model and sampler; fail requests still waiting for their turn."""
        with self.lock:
            runs, self.runs, self.samplers = list(self.runs.values()), {}, {}
        for run in runs:
            run.queue.drop(reason)


MAX_SAMPLERS = 4
"""Samplers one session keeps; creating another releases its oldest (an RL loop makes one per step)."""
