"""Load on one ``blobkit serve``: 32 concurrent clients creating, listing and reading jobs and downloading a kit.

Starts a server on 127.0.0.1 (a free port, a fresh store), registers the retail example, creates one kit (the
only build: later kit requests reuse it, as the service does for the same source and config), then runs
``--clients`` asyncio clients for ``--seconds``, each picking, in a seeded rotation, one of: create a kit job,
list the environment's jobs, read a job, download the kit (checking its sha256). Prints requests/s, p50/p99
latency per operation and overall, the error count (anything but the expected status, or a sha256 mismatch),
and the load average before and after. Traffic goes to 127.0.0.1 only; the run is bounded in time.

    python benchmarks/service_load.py --clients 32 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from service_support import create_key, start_server  # noqa: E402

OPERATIONS = ("create", "list", "read", "download")


async def client_loop(index: int, base: str, key: str, jobs: str, job_ids: list[str], kit_sha: str, until: float,
                      latencies: dict[str, list[float]], errors: list[str]) -> None:
    rng = random.Random(index)
    async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, timeout=120) as client:
        while time.monotonic() < until:
            op = rng.choice(OPERATIONS)
            started = time.perf_counter()
            try:
                if op == "create":
                    response = await client.post(jobs, json={"seed": 42})
                    ok = response.status_code == 201
                    if ok:
                        job_ids.append(response.json()["job_id"])
                elif op == "list":
                    response = await client.get(jobs)
                    ok = response.status_code == 200
                elif op == "read":
                    response = await client.get(f"{jobs}/{rng.choice(job_ids)}")
                    ok = response.status_code == 200
                else:
                    response = await client.get(f"{jobs}/{job_ids[0]}/kit")
                    ok = (response.status_code == 200 and hashlib.sha256(response.content).hexdigest() == kit_sha
                          == response.headers.get("x-content-sha256"))
            except httpx.HTTPError as exc:
                ok, response = False, None
                errors.append(f"{op}: {type(exc).__name__}: {exc}")
            latencies[op].append(time.perf_counter() - started)
            if not ok and response is not None:
                errors.append(f"{op}: HTTP {response.status_code} {response.text[:200]}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="blobkit-load-") as tmp:
        server = start_server(Path(tmp) / "store", Path(tmp) / "serve.log")
        try:
            key = create_key(server.store, "load")
            with server.client(key, timeout=600) as setup:
                env_id = setup.post("/api/v1/twin/environments",
                                    content=(ROOT / "examples/retail_desk/world.json").read_bytes()).json()["env_id"]
                jobs = f"/api/v1/twin/environments/{env_id}/training-jobs"
                first = setup.post(jobs, json={"seed": 42}).json()
            latencies: dict[str, list[float]] = {op: [] for op in OPERATIONS}
            errors: list[str] = []
            job_ids = [first["job_id"]]
            load_before = os.getloadavg()
            started = time.monotonic()
            until = started + args.seconds

            async def run_all() -> None:
                await asyncio.gather(*(client_loop(i, server.url, key, jobs, job_ids, first["kit"]["sha256"], until,
                                                   latencies, errors) for i in range(args.clients)))

            asyncio.run(run_all())
            elapsed = time.monotonic() - started
            load_after = os.getloadavg()
        finally:
            server.stop()
    every = [v for values in latencies.values() for v in values]
    report = {"clients": args.clients, "seconds": round(elapsed, 1), "requests": len(every),
              "requests_per_s": round(len(every) / elapsed, 1), "errors": len(errors),
              "p50_ms": round(1000 * statistics.median(every), 1), "p99_ms": round(1000 * percentile(every, 0.99), 1),
              "per_operation": {op: {"requests": len(v), "p50_ms": round(1000 * statistics.median(v), 1) if v else None,
                                     "p99_ms": round(1000 * percentile(v, 0.99), 1) if v else None}
                                for op, v in latencies.items()},
              "jobs_at_end": len(job_ids), "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in load_after], "cpus": os.cpu_count(),
              "first_errors": errors[:5]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
