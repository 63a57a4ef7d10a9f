"""Writing a manifested folder: every staged file reaches the disk before the folder is swapped in, and a failure
leaves the old folder as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import world_format.manifest as manifest
from world_format.manifest import FileTable, write_manifested_dir

FILES = {"a.txt": b"alpha\n", "world/seed.sqlite": b"\x00" * 4096, "z.jsonl": b"{}\n"}


def render(table: FileTable) -> bytes:
    return json.dumps({"files": table}, sort_keys=True).encode()


def test_every_staged_file_and_folder_is_flushed_before_the_swap(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    flushed: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(manifest.os, "fsync", recording_fsync)
    out = tmp_path / "kit"
    seen_at_publish: list[bool] = []
    write_manifested_dir(out, FILES, "kit.json", render, before_publish=lambda staging: seen_at_publish.append(
        out.exists() or not (staging / "world" / "seed.sqlite").is_file()))
    assert seen_at_publish == [False]  # the archive step sees the complete staging folder, not the target
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a.txt", "kit.json", "world/seed.sqlite", "z.jsonl"]
    staged = {Path(path).relative_to(Path(flushed[0]).parent).as_posix() for path in flushed[:4]}
    assert staged == {"a.txt", "kit.json", "world/seed.sqlite", "z.jsonl"}
    assert any(Path(path).name == "world" for path in flushed[4:])  # the folders, after the files


def test_a_failure_while_publishing_leaves_the_old_folder_and_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "kit"
    write_manifested_dir(out, {"a.txt": b"old\n"}, "kit.json", render)

    def fail(staging: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_manifested_dir(out, FILES, "kit.json", render, before_publish=fail)
    assert (out / "a.txt").read_bytes() == b"old\n" and not (out / "world").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit"]
