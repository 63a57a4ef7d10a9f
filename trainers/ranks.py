"""This process's place in a data-parallel run, and the step-boundary agreement every rank must reach.

A multi-process run (``blobkit train --processes N``, :mod:`trainers.launch`) starts N copies of the fit, one
per rank, under torch's elastic launcher (the one ``accelerate launch`` and ``torchrun`` use), which sets
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``. One process is rank 0 of a world of size 1. Only rank 0 writes
(:attr:`World.is_main`). A budget or a cancellation must stop every rank at the same step boundary, or the
others would wait in the next step's collective forever: :class:`SyncedBudget` asks every rank and stops all of
them when any has a reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .budget import Budget

DDP_TIMEOUT_SECONDS = 300
"""How long a collective waits for a rank that stopped answering before the run fails (torch's default is 30
minutes); a rank that dies is noticed sooner, by the launcher."""


@dataclass(frozen=True)
class World:
    """Which rank this process is, of how many."""

    rank: int
    """0 .. size - 1; rank 0 evaluates, exports and writes."""
    size: int
    """Processes in the run (1 without a launcher)."""
    local_rank: int
    """Rank on this machine (the CUDA device index on a GPU machine)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> World:
        """The launcher's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; rank 0 of 1 when they are unset."""
        environ = os.environ if environ is None else environ
        return cls(int(environ.get("RANK", 0)), int(environ.get("WORLD_SIZE", 1)), int(environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether there is more than one rank."""
        return self.size > 1


def init_process_group() -> None:
    """Join the launcher's process group (gloo: GRPO's torch half trains on the CPU model) unless this is one
    process or the group exists already (TRL's trainer makes its own)."""
    import torch.distributed as dist

    if World.from_env().distributed and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=DDP_TIMEOUT_SECONDS))


def close_process_group() -> None:
    """Leave the process group this process joined (by :func:`init_process_group` or TRL's trainer), if any.

    Every rank calls it once its last collective is done, before the interpreter exits: a gloo group left to
    the interpreter's teardown can abort the process ("terminate called without an active exception", exit
    -6) while its worker threads still hold work. Nothing happens in one process or without a group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_gradients(parameters: list[Any]) -> None:
    """Sum every parameter's gradient over the ranks (a missing gradient counts as zeros); nothing in one process."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)


def gather(value: Any) -> list[Any]:
    """``value`` from every rank, in rank order (``[value]`` in a single process). Every rank must call it."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


class SyncedBudget(Budget):
    """A :class:`~trainers.budget.Budget` whose verdict is the same on every rank: the first reason any rank has
    (in rank order) stops them all at this boundary. Every rank must ask at every boundary."""

    def exhausted(self, next_step_calls: int = 0) -> str | None:
        """Why the next step must not start on any rank, or None."""
        kept, self.stopped_by = self.stopped_by, None
        local = super().exhausted(next_step_calls)
        self.stopped_by = kept
        reason = next((r for r in gather(local) if r), None)
        if reason and self.stopped_by is None:
            self.stopped_by = reason
        return reason
