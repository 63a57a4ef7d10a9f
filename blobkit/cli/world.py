"""World and kit commands: ``info``, ``pack``, ``build``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from blobkit.builder import BuildConfig
from blobkit.errors import ConfigError

from .options import given, model_options, with_parameters
from .output import STAGE_LABELS, echo_json, progress, show_progress, to_stderr


def info(path: Path = typer.Argument(..., help="A world directory, a world.json, a kit directory or a kit archive."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Describe and verify a world or a kit.

    Example: blobkit info examples/retail_desk/world.json --json
    """
    from blobkit.describe import describe

    summary, human = describe(path)
    if as_json:
        echo_json(summary)
    else:
        typer.echo(human)


def pack(source: Path = typer.Option(..., "--source", help="Single-file world.json (rows inline)."),
         out: Path = typer.Option(..., "--out", help="Directory to write the packaged world to.")) -> None:
    """Turn a single-file world export into a packaged world directory (deterministic).

    Example: blobkit pack --source examples/retail_desk/world.json --out build/retail-world
    """
    from world_format.loader import load_world
    from world_format.pack import write_package

    loaded = load_world(source)
    write_package(loaded, out)
    typer.echo(f"packaged {loaded.world.identity.id} into {out} (world sha256 {loaded.sha256})")


def build(world: Path = typer.Option(..., "--world", help="World directory or world.json."),
          out: Path = typer.Option(..., "--out", help="Directory that receives the kit and its archive."),
          as_json: bool = typer.Option(False, "--json", help="Print the build record as JSON."),
          **options: Any) -> None:
    """Build a verified, byte-reproducible training kit from a world.

    Example: blobkit build --world examples/retail_desk/world.json --out build/ --json
    """
    from blobkit.builder import build_kit
    from world_format.interrupts import deferred_interrupts

    try:
        config = BuildConfig(**given(options, BuildConfig))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"build config: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    with deferred_interrupts() as interrupts, progress(show_progress(as_json)) as update:

        def safe_point(stage: str, done: int, total: int) -> None:
            # every progress call is a safe point until the kit is published (write 2/2): stopping there writes
            # nothing, since write_manifested_dir removes its staging folder on the way out
            if (stage, done) != ("write", total):
                interrupts.check(f"{STAGE_LABELS.get(stage, stage)} ({done}/{total})")
            update(stage, done, total)

        record = build_kit(world, out, config, safe_point)
    if interrupts.received:
        to_stderr(f"interrupted ({interrupts.received}) after the kit was published: it is complete")
    if as_json:
        echo_json(record)
    else:
        typer.echo(f"kit ready: {record['kit']['path']}\n  archive {record['kit']['archive']} "
                   f"({record['kit']['bytes']} bytes, sha256 {record['kit']['sha256']})\n"
                   f"  tasks {record['tasks_count']} admitted, {record['tasks_rejected']} rejected; "
                   f"{record['sft_rows']} SFT rows; {record['eval_cases']} held-out cases")


def verify(kit: Path = typer.Argument(..., help="Kit directory or .tar.zst archive."),
           as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Re-execute every probe and SFT replay of a kit and compare with what it stores (exit 1 if it differs).

    A kit whose files fail their checksums (a flipped byte in the folder or the archive) also exits 1.

    Example: blobkit verify build/timberline-retail-train-kit.tar.zst
    """
    from blobkit.verify import verify_kit
    from world_format.errors import ArchiveError, ChecksumError
    from world_format.kit import open_kit

    try:
        with open_kit(kit) as opened, progress(show_progress(as_json)) as update:
            report = verify_kit(opened, update)
    except (ChecksumError, ArchiveError) as exc:  # the kit is not what it claims to be: a verdict, not bad input
        if as_json:
            echo_json({"verified": False, "mismatches": [str(exc)]})
        else:
            typer.echo(f"NOT verified: {exc}")
        raise typer.Exit(1) from None
    if as_json:
        echo_json(report)
    else:
        status = "verified" if report["verified"] else "NOT reproduced"
        typer.echo(f"{status}: {report['tasks_checked']} probe matrices, {report['train_cases_replayed']} replays, "
                   f"{report['eval_cases_checked']} held-out cases")
        for mismatch in report["mismatches"]:
            typer.echo(f"  mismatch: {mismatch}")
    if not report["verified"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the world and kit commands."""
    app.command()(info)
    app.command()(pack)
    app.command()(with_parameters(build, model_options(BuildConfig, only=("seed", "max_tasks", "train_cases_per_task",
                                                                         "eval_cases_per_task", "renamed_replays"))))
    app.command()(verify)
