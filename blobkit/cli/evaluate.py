"""Scoring any agent from outside: ``blobkit eval`` and the ready-made adversaries of ``blobkit adversary``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from trainers.intervals import rate_text

from .output import echo_json

SIDES = {"train": ("train",), "eval": ("eval",), "both": ("train", "eval")}


def _agent_help() -> str:
    from blobkit.builder.agents import NAMES, REFERENCE

    return f"One of: {REFERENCE}, " + ", ".join(NAMES) + " (blobkit info lists where each applies)."


def adversary(kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
              agent: str = typer.Option(..., "--agent", help=_agent_help()),
              side: str = typer.Option("both", "--side", help="train, eval or both."),
              out: Path | None = typer.Option(None, "--out", help="Write the trajectories here (default: stdout).")
              ) -> None:
    """Write a ready-made agent's trajectories for the kit's cases (JSON Lines for blobkit eval --trajectories).

    Example: blobkit adversary --kit KIT --agent hedger --out hedger.jsonl
    """
    from blobkit.adversaries import AGENT_NAMES, trajectories
    from blobkit.errors import ConfigError
    from world_format.canonical import atomic_write_bytes, jsonl_bytes
    from world_format.kit import open_kit

    if agent not in AGENT_NAMES or side not in SIDES:
        raise ConfigError(f"--agent is one of {', '.join(AGENT_NAMES)}; --side one of {', '.join(SIDES)}")
    with open_kit(kit) as opened:
        lines = list(trajectories(opened, agent, SIDES[side]))
    data = jsonl_bytes(lines)
    if out is None:
        typer.echo(data.decode("utf-8"), nl=False)
    else:
        atomic_write_bytes(out, data)
        scope = "" if side == "both" else f"{side} "
        applies = "" if lines else f" ({agent} applies to no {scope}case of this kit)"
        typer.echo(f"{len(lines)} trajectories of {agent} written to {out}{applies}", err=True)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    from blobkit.errors import KitError, TrajectoryError
    from world_format.kit import read_jsonl

    try:
        lines = read_jsonl(path)
    except KitError as exc:
        raise TrajectoryError(str(exc)) from None
    for number, line in enumerate(lines, start=1):
        if not isinstance(line.get("case_id"), str) or not isinstance(line.get("messages"), list):
            raise TrajectoryError(f"{path}:{number}: each line needs a case_id (string) and messages (list)")
    if not lines:
        raise TrajectoryError(f"{path} holds no trajectories: nothing to score")
    return lines


def evaluate(kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
             trajectories: Path = typer.Option(..., "--trajectories", help="JSON Lines: {case_id, messages}."),
             min_pass_rate: float = typer.Option(1.0, "--min-pass-rate", help="Exit 1 below this pass rate."),
             max_turns: int | None = typer.Option(None, "--max-turns", help="Read at most this many assistant turns."),
             as_json: bool = typer.Option(False, "--json", help="Print {summary, cases} as JSON.")) -> None:
    """Score recorded agent conversations: re-execute their tool calls on the kit's world and let VCode judge.

    Each line is {"case_id": ..., "messages": [...]} in the kit's row format; only assistant turns are read
    (tool messages are ignored: the world's real observations are fed back). Training and held-out case ids
    are both accepted. Exits 1 when the pass rate is below --min-pass-rate (default: every case must pass).

    Example: blobkit eval --kit KIT --trajectories agent.jsonl --json
    """
    from blobkit.errors import TrajectoryError
    from trainers.evaluation import EvalSummary, replay_trajectory
    from world_format.kit import open_kit

    lines = _read_lines(trajectories)
    with open_kit(kit) as opened:
        cases = {case.case_id: case for case in opened.cases("train") + opened.cases("eval")}
        runtime = opened.world().runtime()
        try:
            results = []
            for number, line in enumerate(lines, start=1):
                if line["case_id"] not in cases:
                    raise TrajectoryError(f"{trajectories}:{number}: the kit has no case {line['case_id']!r}")
                results.append(replay_trajectory(runtime, cases[line["case_id"]], line["messages"], max_turns))
        finally:
            runtime.close()
    summary = EvalSummary(tuple(results)).to_json()
    if as_json:
        echo_json({"summary": summary, "cases": [{"case_id": r.case_id, "passed": r.passed,
                                                  "verdict": r.verdict.to_json()} for r in results]})
    else:
        typer.echo(f"pass rate {rate_text(summary)}")
        for result in results:
            if not result.passed:
                typer.echo(f"  {result.case_id}: {result.verdict.outcome} {json.dumps(result.verdict.reason)[:160]}")
    if summary["pass_rate"] < min_pass_rate:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the scoring commands."""
    app.command(name="eval")(evaluate)
    app.command()(adversary)
