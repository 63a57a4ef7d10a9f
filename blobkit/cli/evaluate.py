"""Scoring any agent from outside: ``blobkit eval`` and the ready-made adversaries of ``blobkit adversary``."""

from __future__ import annotations

import json
from pathlib import Path

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


def evaluate(kit: Path = typer.Option(..., "--kit", help="Kit directory or archive."),
             trajectories: Path | None = typer.Option(None, "--trajectories",
                                                      help="JSON Lines: {case_id, messages}."),
             model: Path | None = typer.Option(None, "--model", help="Instead of --trajectories: a blobkit export "
                                               "(blobkit train, blobkit tinker checkpoints export) run greedily on "
                                               "the held-out cases."),
             limit: int | None = typer.Option(None, "--limit", min=1, help="With --model: the first N held-out "
                                              "cases (a partial score)."),
             min_pass_rate: float = typer.Option(1.0, "--min-pass-rate", help="Exit 1 below this pass rate."),
             allow_partial: bool = typer.Option(False, "--allow-partial",
                                                help="Accept a file that does not cover every held-out case."),
             max_turns: int | None = typer.Option(None, "--max-turns", help="Read at most this many assistant turns."),
             decoding: str | None = typer.Option(None, "--decoding", help="With --model: free, constrained or "
                                                 "grounded decoding (default: the export's own)."),
             show: int = typer.Option(10, "--show", min=0, help="Print at most N failing cases (0: none; --json "
                                      "always has every case)."),
             as_json: bool = typer.Option(False, "--json", help="Print {summary, cases} as JSON.")) -> None:
    """Score recorded agent conversations: re-execute their tool calls on the kit's world and let VCode judge.

    Each line is {"case_id": ..., "messages": [...]} in the kit's row format (or OpenAI's: content parts,
    JSON-string arguments); only assistant turns are read (tool messages are ignored: the world's real
    observations are fed back). The score is over the kit's distinct cases: a case repeated with the same
    messages counts once, with different messages it is an error naming both lines, and a case id the kit
    does not hold is an error. Training and held-out case ids are both accepted; the summary says how many
    of each side's cases the file covers. Exits 1 when the pass rate is below --min-pass-rate (default:
    every case must pass), or when the file does not cover every held-out case (partial) unless
    --allow-partial.

    With --model, the export's own greedy episodes on the held-out cases are scored the same way.

    Example: blobkit eval --kit KIT --trajectories agent.jsonl --show 5
    """
    from blobkit.errors import ConfigError
    from trainers.trajectories import read_trajectories, score_trajectories
    from world_format.kit import open_kit

    if (trajectories is None) == (model is None):
        raise ConfigError("give exactly one of --trajectories FILE and --model EXPORT")
    with open_kit(kit) as opened:
        if model is not None:
            from trainers.replay import score_export

            scored = score_export(model, opened, limit=limit, decoding=decoding)
        else:
            assert trajectories is not None
            scored = score_trajectories(opened, read_trajectories(trajectories), str(trajectories), max_turns)
    score, ordered = scored.score, scored.results
    if as_json:
        echo_json({"summary": scored.summary(),
                   "cases": [{"case_id": r.case_id, "passed": r.passed, "parse_failures": r.parse_failures,
                              "verdict": r.verdict.to_json()} for r in ordered]})
    else:
        typer.echo(f"pass rate {rate_text(score.model_dump())}")
        typer.echo(f"  {score.summary()}")
        failing = [result for result in ordered if not result.passed]
        for result in failing[:show]:
            typer.echo(f"  {result.case_id}: {result.verdict.outcome} {json.dumps(result.verdict.reason)[:160]}")
        if len(failing) > show:
            typer.echo(f"  … and {len(failing) - show} more failing cases (--show N prints more, --json all)")
    if score.partial and not allow_partial:
        typer.echo("error: the file does not cover every held-out case, so its pass rate is no claim about the "
                   "held-out set; score every held-out case, or pass --allow-partial", err=True)
        raise typer.Exit(1)
    if score.pass_rate < min_pass_rate:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the scoring commands."""
    app.command(name="eval")(evaluate)
    app.command()(adversary)
