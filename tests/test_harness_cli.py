"""The harness commands' help and their one-line errors (serve-model, mcp, replay --harness)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from typer.testing import CliRunner

from blobkit.cli import app


def test_serve_model_mcp_and_replay_show_an_example_and_the_harness_option() -> None:
    runner = CliRunner()
    for command in (["serve-model"], ["mcp"], ["replay"]):
        result = runner.invoke(app, [*command, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "Example:" in result.output, command
    assert "--harness" in runner.invoke(app, ["replay", "--help"], terminal_width=200).output


def _blobkit(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **({"PATH": path} if path is not None else {})}
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


def test_serving_a_folder_that_is_not_an_export_is_one_line(tmp_path: Path) -> None:
    done = _blobkit("serve-model", "--model", str(tmp_path), "--port", "0")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "not a blobkit export" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unknown_harness_or_a_missing_codex_is_one_line_naming_the_fix(kit_path: Path, tmp_path: Path) -> None:
    from trainers.export import export_model

    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * 16)
    export = export_model(weights, tmp_path / "export", kind="full", config={}, base={"name_or_path": "x"},
                          kit_sha256=None)
    unknown = _blobkit("replay", "--harness", "vim", "--model", str(export), "--kit", str(kit_path))
    assert unknown.returncode == 2 and "unknown harness 'vim'; harnesses: codex" in unknown.stderr
    missing = _blobkit("replay", "--harness", "codex", "--model", str(export), "--kit", str(kit_path),
                       path=str(Path(sys.executable).parent))
    assert missing.returncode == 2 and "npm install -g @openai/codex@0.169.0" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
