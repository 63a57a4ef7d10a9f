"""The Train panel's browser tests: headless Chromium (the Debian package, /usr/bin/chromium) driven by Playwright,
and screenshots kept as test artifacts under ``out/panel-artifacts/`` (``BLOBKIT_PANEL_ARTIFACTS`` overrides)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("BLOBKIT_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("BLOBKIT_PANEL_ARTIFACTS", ROOT / "out" / "panel-artifacts"))
DOCS = ROOT / "docs" / "panel"


def artifacts_dir(name: str) -> Path:
    """A fresh folder of screenshots for one test."""
    folder = ARTIFACTS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (skips the test when the system has none: .ci/run installs it)."""
    if not Path(CHROMIUM).is_file() and shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    """Numbered full-page screenshots of one test."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.count = folder, 0

    def take(self, page: Any, name: str, full_page: bool = True) -> Path:
        """Save ``NN-name.png``; returns its path."""
        self.count += 1
        path = self.folder / f"{self.count:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    @staticmethod
    def publish(path: Path, name: str) -> None:
        """Copy a screenshot into docs/panel/ (only when BLOBKIT_PANEL_DOCS=1: the committed README images)."""
        if os.environ.get("BLOBKIT_PANEL_DOCS") == "1":
            DOCS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS / name)
