"""The README's service block (the seed's curl calls) runs as printed against a real ``blobkit serve``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from service_support import env, running_server

ROOT = Path(__file__).resolve().parents[1]


def readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- service-curl -->\n```bash\n(.*?)```", text, re.S)
    assert match, "the README's service block (<!-- service-curl -->) is missing"
    return match.group(1)


@pytest.mark.slow
def test_the_readme_service_calls_work_as_printed(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    with running_server(tmp_path / "service", tmp_path / "serve.log") as server:
        environ = env(URL=server.url, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + readme_block()], cwd=tmp_path, env=environ,
                              capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("trainable: ") and "Qwen/" in lines[1]
    sha = next(line.split()[0] for line in lines if line.endswith("timberline-retail-train-kit.tar.zst"))
    assert any(line.lower().startswith("x-content-sha256") and sha in line for line in lines)
    assert "--dry-run" in lines[-2] and lines[-1] == "queued"
