"""The failure-kind table of saved evaluations: why each failed held-out case failed, per model.

Reads a run directory's ``eval_cases_<model>.json`` files (written by every ``blobkit train``: base, sft, rl, rft)
and the kit they were scored on, sorts every failed case into one kind (``trainers.failure_kinds``: turn_limit,
procedure, answer_missing_value, answer_states_other, wrong_calls, wrong_arguments, verifier_error) and prints a
table, one column per model; runs written before eval.json carried ``failures`` are classified the same way.

Run::

    .venv/bin/python benchmarks/failure_table.py --kit KIT_DIR RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainers.failure_kinds import FailureKinds, count_failures  # noqa: E402
from world_format.kit import open_kit  # noqa: E402
from world_format.vcode import Verdict  # noqa: E402


@dataclass(frozen=True)
class _Event:
    tool: str


@dataclass(frozen=True)
class _Saved:
    """One saved case record, in the shape :func:`trainers.failure_kinds.failure_kind` reads."""

    verdict: Verdict
    answer: str | None
    trace: tuple[_Event, ...]
    reference: tuple[str, ...]


def saved_failures(path: Path, references: dict[str, tuple[str, ...]]) -> tuple[FailureKinds, int, int]:
    """(the failure kinds, cases, passed) of one ``eval_cases_*.json``."""
    cases: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    saved = [_Saved(Verdict(c["verdict"]["outcome"], c["verdict"]["reason"], tuple(c["verdict"]["checks"])),
                    c["answer"], tuple(_Event(e["tool"]) for e in c["trace"]), references[c["case_id"]])
             for c in cases]
    return count_failures(saved), len(cases), sum(1 for c in cases if c["passed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", type=Path, required=True, help="the kit directory the runs were evaluated on")
    parser.add_argument("runs", type=Path, nargs="+", help="run directories (each holds eval_cases_*.json)")
    args = parser.parse_args()
    with open_kit(args.kit) as kit:
        references = {c.case_id: tuple(s.tool for s in c.task.reference)
                      for side in ("train", "eval") for c in kit.cases(side)}
    columns: list[tuple[str, FailureKinds, int, int]] = []
    for run in args.runs:
        for path in sorted(run.glob("eval_cases_*.json")):
            name = f"{run.name}/{path.stem.removeprefix('eval_cases_')}"
            columns.append((name, *saved_failures(path, references)))
    width = max([len(name) for name, *_ in columns] + [12]) + 2
    print(f"{'kind':<22}" + "".join(f"{name:>{width}}" for name, *_ in columns))
    for kind in FailureKinds.model_fields:
        print(f"{kind:<22}" + "".join(f"{getattr(kinds, kind):>{width}}" for _, kinds, _, _ in columns))
    print(f"{'failed / cases':<22}" + "".join(f"{f'{n - p}/{n}':>{width}}" for _, _, n, p in columns))


if __name__ == "__main__":
    main()
