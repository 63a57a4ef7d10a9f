"""The three floors import downward only: blobkit -> trainers -> world_format (import-linter checks it too)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

BANNED = {"world_format": ("blobkit", "trainers"), "trainers": ("blobkit",)}


def _imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_no_module_imports_a_floor_above_its_own() -> None:
    upward = [f"{path.relative_to(ROOT)} imports {name}"
              for floor, banned in BANNED.items() for path in (ROOT / floor).rglob("*.py")
              for name in _imported(path) if name.split(".")[0] in banned]
    assert upward == []



def test_no_source_file_is_longer_than_about_500_lines_without_saying_why() -> None:
    long = [f"{path.relative_to(ROOT)}: {n} lines" for floor in ("world_format", "trainers", "blobkit")
            for path in (ROOT / floor).rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 520
            and "why this file is long" not in path.read_text(encoding="utf-8")[:2000]]
    assert long == []
