"""Data-parallel SFT on this CPU: steps/s and tokens/s of ``--processes 1`` against ``--processes 2``, one run.

Builds the retail example's kit and the tiny model (64 wide, 4 layers) in a temporary directory, then
trains LoRA SFT on the same rows at the same global batch with ``blobkit train --target local-torch``: one
process on torch's threads, one process on one thread (``OMP_NUM_THREADS=1``), and two gloo ranks
(``--processes 2``, one thread each), in turn for ``--rounds`` rounds so all see similar machine load.
The figures are the fit's own (``train_seconds`` and ``optimizer_updates``
of eval.json; trained tokens from plan.json), so model loading, the launcher's start and the evaluations are
left out; the launch overhead is printed separately (the whole command's wall time less the fit's).

Two things to know when reading the ratio: one process uses torch's threads on both cores, two ranks one
thread each (the launcher sets ``OMP_NUM_THREADS=1``), so on a 2-core machine the ranks can only win what
data parallelism does better than intra-op threads; and one process uses blobkit's compact CPU loss (only the
labelled positions through the LM head), the ranks TRL's loss (DDP's gradient hooks need the wrapped forward),
which ``sft_step_speed.py`` measured 1.38x slower per step.

Run::

    .venv/bin/python benchmarks/scale_out.py                      # 1 round of 1 epoch on 48 rows
    .venv/bin/python benchmarks/scale_out.py --rounds 2 --rows 192
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")


RUNS = {"1 process, torch's threads": (1, None), "1 process, 1 thread": (1, "1"), "2 processes": (2, None)}
"""What each run is: (--processes, OMP_NUM_THREADS or None for torch's default)."""


def _cli(*args: str, threads: str | None = None) -> str:
    environ = {**os.environ, **({"OMP_NUM_THREADS": threads} if threads else {})}
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], check=True, text=True, env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT).stdout


def _train(kit: Path, tiny: Path, rows: Path, out: Path, processes: int, threads: str | None,
           batch: int) -> dict[str, float]:
    started = time.perf_counter()
    _cli("train", "--world", str(kit), "--data", str(rows), "--base", str(tiny), "--method", "sft", "--target",
         "local-torch", "--processes", str(processes), "--batch-size", str(batch), "--epochs", "1", "--lora-rank",
         "8", "--max-length", "2048", "--eval-limit", "1", "--max-turns", "1", "--short-episodes", "--max-new-tokens",
         "8", "--out",
         str(out), "--json", threads=threads)
    wall = time.perf_counter() - started
    report = json.loads((out / "eval.json").read_text())
    tokens = json.loads((out / "plan.json").read_text())["tokens"]["tokens"]
    return {"seconds": report["train_seconds"], "steps": report["optimizer_updates"], "tokens": tokens,
            "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rows", type=int, default=48, help="SFT rows (a multiple of --batch-size)")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="blobkit-bench-") as tmp:
        built = json.loads(_cli("build", "--world", str(ROOT / "examples/retail_desk/world.json"), "--out",
                                f"{tmp}/kit", "--train-cases", "400", "--eval-cases", "4", "--json"))
        kit = Path(built["kit"]["path"])
        _cli("tiny-model", "--kit", str(kit), "--out", f"{tmp}/tiny")
        lines = (kit / "sft.jsonl").read_text().splitlines()[: args.rows]
        rows = Path(tmp) / "rows.jsonl"
        rows.write_text("".join(line + "\n" for line in lines))
        totals = {name: {"seconds": 0.0, "steps": 0.0, "tokens": 0.0, "wall": 0.0} for name in RUNS}
        loads = []
        for round_index in range(args.rounds):
            for number, (name, (processes, threads)) in enumerate(RUNS.items()):
                loads.append(os.getloadavg()[0])
                run = _train(kit, Path(f"{tmp}/tiny"), rows, Path(tmp) / f"run-{round_index}-{number}", processes,
                             threads, args.batch_size)
                for key, value in run.items():
                    totals[name][key] += value
        rate = {}
        for name, total in totals.items():
            rate[name] = (total["steps"] / total["seconds"], total["tokens"] / total["seconds"])
            print(f"{name}: {rate[name][0]:.3f} steps/s, {rate[name][1]:.0f} tokens/s ({total['steps']:.0f} steps of "
                  f"{args.batch_size} rows, {total['seconds']:.1f} s of fit; whole command {total['wall']:.1f} s)")
        two = rate["2 processes"]
        for name in list(RUNS)[:2]:
            print(f"ratio 2 processes / {name}: {two[0] / rate[name][0]:.2f}x steps/s, "
                  f"{two[1] / rate[name][1]:.2f}x tokens/s")
        print(f"cores here: {os.cpu_count()}; 1-minute load average before each run: "
              + ", ".join(f"{load:.1f}" for load in loads))


if __name__ == "__main__":
    main()
