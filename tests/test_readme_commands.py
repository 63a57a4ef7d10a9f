"""Every command the README prints and every ``--help`` example runs as printed (issue 23 item 1).

The commands are extracted, not copied: the README's ```bash blocks (lines starting ``blobkit``) and
the ``Example:`` of every command's help. Fast: each one parses (its command exists, every option
is one the command has, nothing required is missing), and each is either in :data:`RUN` or in
:data:`NOT_RUN` with the reason, so a new example cannot slip past. Slow: the ones in :data:`RUN`
run in order in a fresh folder, with placeholders (``KIT``, a key, a job id) filled from what the
earlier ones built, and must exit as stated.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from blobkit.cli import app

ROOT = Path(__file__).resolve().parent.parent
README_SKIPPED_BLOCKS = ("service-curl",)
"""README blocks another test runs as a whole (tests/test_readme_service.py)."""


def readme_commands() -> list[str]:
    """The ``blobkit`` lines of the README's bash blocks, comments and trailing ``&`` dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for marker, block in re.findall(r"(<!-- [\w-]+ -->\n)?```bash\n(.*?)```", text, re.S):
        if any(name in marker for name in README_SKIPPED_BLOCKS):
            continue
        for line in block.splitlines():
            command = line.split("  #")[0].strip().removesuffix("&").strip()
            if command.startswith("blobkit "):
                found.append(command)
    return found


def _tree(command: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every command under a click group (typer vendors click, so it is read by its shape)."""
    found = {}
    for name, sub in getattr(command, "commands", {}).items():
        found[(*prefix, name)] = sub
        found.update(_tree(sub, (*prefix, name)))
    return found


COMMANDS = _tree(typer.main.get_command(app))


def help_examples() -> list[str]:
    """The ``Example:`` of every command's help, joined across the lines it is wrapped on."""
    found = []
    for command in COMMANDS.values():
        match = re.search(r"Example: (.*?)(?:\n\s*\n|$)", command.help or "", re.S)
        if match:
            found.append(" ".join(match.group(1).split()))
    return found


RUN: dict[str, int] = {
    # the README's own walk-through first: it builds what the placeholders stand for
    "blobkit info examples/retail_desk/world.json": 0,
    "blobkit build --world examples/retail_desk/world.json --out build/ --json": 0,
    "blobkit verify build/timberline-retail-train-kit.tar.zst": 0,
    "blobkit train --world build/timberline-retail-train-kit --base HuggingFaceTB/SmolLM2-135M-Instruct --preset lora "
    "--dry-run": 0,
    "blobkit build --world examples/retail_desk/world.json --out out/kit": 0,
    "blobkit tiny-model --kit out/kit/timberline-retail-train-kit --out out/tiny": 0,
    "blobkit serve keys create --store out/service --workspace acme": 0,
    "blobkit serve bases add --store out/service tiny out/tiny": 0,
    "blobkit serve policy set --store out/service --workspace acme --models tiny --max-lora-rank 8": 0,
    "blobkit tinker jobs list --store out/service --workspace acme": 0,
    # the help examples
    "blobkit info examples/retail_desk/world.json --json": 0,
    "blobkit pack --source examples/retail_desk/world.json --out build/retail-world": 0,
    "blobkit models --json": 0,
    "blobkit tiny-model --kit KIT --out out/tiny": 0,
    "blobkit adversary --kit KIT --agent hedger --out hedger.jsonl": 0,
    "blobkit eval --kit KIT --trajectories agent.jsonl --show 5": 0,
    "blobkit company inspect --source examples/retail_desk/world.json --json": 0,
    "blobkit serve keys create --store ./service --workspace acme": 0,
    "blobkit serve env add --store ./service --workspace acme --source examples/retail_desk/world.json": 0,
    "blobkit serve policy set --store ./service --workspace acme --models tiny --max-lora-rank 16 --max-tokens "
    "1000000 --deadline 2027-01-31T00:00:00Z": 0,
    "blobkit serve policy list --store ./service": 0,
    "blobkit serve bases add --store ./service tiny ./out/tiny": 0,
    "blobkit tinker jobs list --store ./service --workspace acme": 0,
    "blobkit tinker checkpoints list --store ./service --workspace acme": 0,
    "blobkit tinker usage --store ./service --workspace acme": 0,
    "blobkit train --world KIT --base out/tiny --method sft --target local-torch --preset tiny --out out/run": 0,
    "blobkit jobs list --job-store ./company-jobs --json": 0,
    "blobkit jobs show job-0123456789ab --job-store ./company-jobs --json": 0,
    "blobkit jobs cancel job-0123456789ab --job-store ./company-jobs": 0,
}
"""Commands run as printed (after placeholders are filled), with the exit code they must give."""

DRY_RUN_ONLY = ("blobkit train --world KIT --base out/tiny --method sft --target local-torch --preset tiny "
                "--out out/run",)
"""Run with ``--dry-run`` added: the full run trains for many minutes (tests/test_e2e_train.py runs training)."""

RUN_FIRST = ("blobkit company train --source examples/retail_desk/world.json --base-model tiny "
             "--job-store ./company-jobs",)
"""Run before the rest: the job the ``jobs`` examples act on (``company train``'s example without ``--run``
queues it; the pipeline itself is the slow tests/test_company.py)."""

NOT_RUN: dict[str, str] = {
    "blobkit serve --store out/service --port 8000": "a server that runs until stopped (tests/test_readme_service.py)",
    "blobkit serve --store ./service --port 8000": "a server that runs until stopped (tests/test_readme_service.py)",
    "blobkit worker --server $URL --token $TOKEN --job-store ./worker-jobs --bases tiny":
        "needs the server of the service-curl block (tests/test_readme_service.py)",
    "blobkit worker --server http://127.0.0.1:8000 --token tml-… --job-store ./worker-jobs --bases tiny":
        "needs a running server (tests/test_readme_service.py)",
    "blobkit jobs show $JOB --server $URL --token $KEY": "needs the server of the service-curl block",
    "blobkit company train --source examples/retail_desk/world.json --base-model tiny --job-store ./company-jobs "
    "--run": "the whole pipeline, minutes of training (queued without --run here; tests/test_company.py runs it)",
    "blobkit jobs resume job-0123456789ab --job-store ./company-jobs":
        "runs the whole pipeline (tests/test_company.py)",
    "blobkit replay --model out/run/export --kit KIT --json": "needs a trained export (tests/test_e2e_train.py)",
    "blobkit replay --harness codex --model out/run/export --kit KIT --case c-b00a8ed5638c260a":
        "needs a trained export and the codex harness (the harness tests)",
    "BLOBKIT_MODEL_KEY=secret blobkit serve-model --model out/run/export --port 8001":
        "a server that runs until stopped, on a trained export (the harness tests)",
    "BLOBKIT_MCP_KEY=secret blobkit mcp --kit KIT --case c-1234 --transport http --port 8002":
        "a server that runs until stopped (the harness tests)",
    "blobkit runpod sweep --yes": "needs RUNPOD_API_KEY and a RunPod account (tests/test_runpod_sweep.py fakes it)",
    "blobkit tinker checkpoints export tinker://tj-…:train:0/sampler_weights/final --out ./export --store ./service "
    "--workspace acme":
        "needs a Tinker session's checkpoint (tests/test_tinker_slow.py)",
    "blobkit tinker jobs status tj-0123456789abcdef --store ./service --workspace acme":
        "needs a Tinker session (tests/test_tinker_api.py)",
}
"""Commands not run here, each with why and which test covers it."""


def all_commands() -> list[str]:
    """README commands, then help examples, each once, in that order."""
    return list(dict.fromkeys(readme_commands() + help_examples()))


def _command_and_args(line: str) -> tuple[Any, list[str], tuple[str, ...]]:
    words = shlex.split(line)
    while "=" in words[0] and not words[0].startswith("-"):  # VAR=value before the command
        words = words[1:]
    words = words[1:]
    for length in (3, 2, 1):
        if tuple(words[:length]) in COMMANDS:
            return COMMANDS[tuple(words[:length])], words[length:], tuple(words[:length])
    raise AssertionError(f"{line}: no such command")


def test_every_documented_command_is_either_run_or_skipped_for_a_stated_reason() -> None:
    commands = all_commands()
    assert len(commands) >= 30
    unclassified = [c for c in commands if c not in RUN and c not in NOT_RUN]
    assert not unclassified, unclassified
    stale = [c for c in [*RUN, *NOT_RUN] if c not in commands]
    assert not stale, stale


@pytest.mark.parametrize("line", all_commands())
def test_every_documented_command_parses(line: str) -> None:
    """The command exists and takes every option given (values are placeholders: parsing checks names and arity)."""
    command, args, path = _command_and_args(line)
    context = command.make_context(" ".join(path), list(args), resilient_parsing=False)
    assert context.params is not None


def _fill(line: str, known: dict[str, str]) -> str:
    for placeholder, value in known.items():
        line = line.replace(placeholder, value)
    return line


@pytest.mark.slow  # builds the retail kit several times and a tiny model, about two minutes on two cores
def test_the_documented_commands_run_as_printed(tmp_path: Path) -> None:
    work = tmp_path / "fresh"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    known = {"KIT": "build/timberline-retail-train-kit"}

    def run(line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(_fill(line, known), shell=True, cwd=work, env=environment, capture_output=True,
                              text=True, timeout=600, check=False)

    for line in RUN_FIRST:  # what the jobs examples act on
        done = run(line)
        assert done.returncode == 0, (line, done.stdout[-1500:], done.stderr[-1500:])
        known["job-0123456789ab"] = re.findall(r"queued (job-[0-9a-f]+)", done.stdout)[0]
    for line in [c for c in all_commands() if c in RUN]:
        if line.startswith("blobkit eval ") and "agent.jsonl" in line:
            assert run("blobkit adversary --kit KIT --agent reference --out agent.jsonl").returncode == 0
        done = run(line + (" --dry-run" if line in DRY_RUN_ONLY else ""))
        assert done.returncode == RUN[line], (line, done.stdout[-1500:], done.stderr[-1500:])
        assert "Traceback" not in done.stderr, line


@pytest.mark.slow  # builds a small kit and trains the tiny model for a fraction of an epoch, about a minute
def test_the_readme_python_api_example_builds_trains_and_evaluates(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    script = re.search(r"<!-- python-api -->\n```python\n(.*?)```", text, re.S)
    assert script is not None
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = subprocess.run([sys.executable, "-c", script.group(1)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                         "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^\d+ rows; held-out pass rate [\d.]+ -> [\d.]+$", done.stdout.splitlines()[-1])
    assert (tmp_path / "out" / "api" / "run" / "eval.json").is_file()
