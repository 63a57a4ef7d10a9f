"""The replay: one held-out case replayed by the exported model, reloaded from disk in a fresh interpreter.

The point of the stage is the fresh process: nothing of the training run is in memory there, so
what passes is what was exported. :func:`run_spawned` starts a ``spawn`` child (a new Python
interpreter that imports what it needs), runs :func:`replay_export` in it (``trainers.replay``'s
``replay_case``) and receives its result as data, ``trainers.replay.replay_record``'s plain dict,
through a pipe; :func:`replay_summary` makes the stage's :class:`~.stage_records.ReplayStage` of it.
While the child runs, ``stop()`` is polled; a cancellation terminates it.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .stage_records import ReplayStage, ReplayVerdict

POLL_S = 0.5
"""Seconds between two polls of ``stop()`` while the child runs."""
JOIN_S = 10.0
"""Seconds a child is given to exit after sending its result, and after being terminated, before it is killed."""
ANSWER_CHARS = 1000
"""Longest replayed answer kept in the job record (replay.json keeps the whole episode)."""
CLAIMS = ("one held-out workflow replayed by the exported model reloaded in a fresh process; it says nothing "
          "beyond this case")


@dataclass(frozen=True)
class SpawnedRun:
    """How a spawned call ended: its value, or the child's error, or the reason it was stopped."""

    value: Any
    error: str | None
    stopped_by: str | None
    pid: int | None
    exitcode: int | None


def _child(conn: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run ``function(*args)`` and send ("value", result) or ("error", text) to the parent."""
    os.dup2(2, 1)  # stdout belongs to the parent (the CLI prints its JSON there); chatter goes to stderr
    sys.stdout = sys.stderr
    try:
        message: tuple[str, Any] = ("value", function(*args))
    except BaseException as exc:  # every failure, even KeyboardInterrupt, is reported to the parent
        message = ("error", f"{type(exc).__name__}: {exc}")
    conn.send(message)
    conn.close()


def _end(process: Any, wait_s: float) -> None:
    """Give the child ``wait_s`` seconds to exit, then terminate it (and kill it if it still lingers)."""
    process.join(wait_s)
    if process.is_alive():
        process.terminate()
        process.join(JOIN_S)
    if process.is_alive():
        process.kill()
    process.join()


def _wait(receive: Connection, stop: Callable[[], str | None], poll_s: float) -> tuple[str, Any]:
    """("value" | "error", payload) from the child, or ("stopped", reason) when ``stop()`` gave one first."""
    while not receive.poll(poll_s):
        reason = stop()
        if reason:
            return "stopped", reason
    try:
        kind, payload = receive.recv()
        return str(kind), payload
    except EOFError:
        return "error", "the process exited without a result"


def run_spawned(function: Callable[..., Any], args: tuple[Any, ...], stop: Callable[[], str | None],
                poll_s: float = POLL_S) -> SpawnedRun:
    """``function(*args)`` in a fresh ``spawn`` process; its return value comes back through a pipe.

    ``function`` and ``args`` must be picklable (a module-level function). ``stop()`` is polled
    every ``poll_s`` seconds; a reason to stop terminates the child, and so does any exception here.
    """
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(send, function, args), daemon=True)
    process.start()
    send.close()
    try:
        kind, payload = _wait(receive, stop, poll_s)
    except BaseException:
        _end(process, 0)
        raise
    finally:
        receive.close()
    _end(process, 0 if kind == "stopped" else JOIN_S)
    if kind == "stopped":
        return SpawnedRun(None, None, payload, process.pid, process.exitcode)
    if kind == "value":
        return SpawnedRun(payload, None, None, process.pid, process.exitcode)
    return SpawnedRun(None, f"{payload} (exit code {process.exitcode})", None, process.pid, process.exitcode)


def replay_export(export: Path, kit_dir: Path, max_turns: int) -> dict[str, Any]:
    """The first held-out case of ``kit_dir`` replayed by ``export``, as ``blobkit replay --json`` records it."""
    from trainers.replay import replay_case, replay_record
    from world_format.kit import open_kit

    with open_kit(kit_dir) as kit:
        result, manifest = replay_case(export, kit, None, max_turns=max_turns)
    return replay_record(result, manifest)


def replay_summary(run: SpawnedRun, call: str) -> ReplayStage:
    """The replay outcome for the job record: passed/failed by the case's VCode, or error when the child failed
    (then the case's fields are left unset: absent from the record)."""
    result = run.value
    how = {"fresh_process": True, "start_method": "spawn", "pid": run.pid, "exitcode": run.exitcode, "call": call,
           "claims": CLAIMS}
    if not isinstance(result, dict):
        return ReplayStage(**how, outcome="error", error=run.error or "no result")
    return ReplayStage(**how, outcome="passed" if result["passed"] else "failed", case_id=result["case_id"],
                       template=result["template"], verdict=ReplayVerdict.model_validate(result["verdict"]),
                       answer=None if result["answer"] is None else result["answer"][:ANSWER_CHARS],
                       turns=result["turns"], tool_calls=len(result["trace"]), model_kind=result.get("model_kind"))
