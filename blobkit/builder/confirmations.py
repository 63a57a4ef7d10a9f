"""Authored confirmations completed: the write a scripted "yes" agrees to, read from the reference chain.

An authored task's turn that comes just before a ``confirm`` write agrees to that write; the builder sets its
``confirms`` (the tool and what a question about it must state, :func:`world_format.confirmation
.confirmation_request`) from the chain executed up to the write, so the scripted customer gives the "yes" only to
a question about it. A turn that already declares ``confirms`` (its own words, say a family's flights and dates)
keeps it.
"""

from __future__ import annotations

from world_format.chain import resolve_arguments, run_chain
from world_format.confirmation import confirmation_request, seed_lookup
from world_format.errors import ReplayError
from world_format.models import Task
from world_format.runtime import WorldRuntime


def with_confirmations(runtime: WorldRuntime, task: Task) -> Task:
    """``task`` with ``confirms`` set on every turn that precedes a ``confirm`` write and declares none (the task
    itself when there is none to set, or its chain does not run up to the write)."""
    world, turns = runtime.world, list(task.turns)
    for index, turn in enumerate(turns):
        step = task.reference[turn.after_step] if turn.after_step < len(task.reference) else None
        tool = world.tool(step.tool) if step is not None else None
        if turn.confirms is not None or step is None or tool is None or not tool.confirm:
            continue
        with runtime.episode() as episode:
            ran = run_chain(episode, task.reference[:turn.after_step])
        if not ran.clean:
            continue
        try:
            arguments = resolve_arguments(step, [event.observation for event in ran.events])
        except ReplayError:  # a step that cannot resolve leaves the turn as authored; the gate judges the chain
            continue
        turns[index] = turn.model_copy(update={"confirms": confirmation_request(world, tool, arguments,
                                                                                seed_lookup(runtime))})
    return task if turns == list(task.turns) else task.model_copy(update={"turns": tuple(turns)})
