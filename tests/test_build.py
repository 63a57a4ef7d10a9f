"""`blobkit build`, `info` and `verify` on real worlds."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import EXAMPLES
from kit_cache import cached_build

from blobkit.builder import BuildConfig, build_kit
from blobkit.describe import describe
from blobkit.errors import ArchiveError, BlobkitError, ChecksumError, KitError
from blobkit.verify import verify_kit
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import Task
from world_format.vcode import evaluate

SMALL = BuildConfig(train_cases_per_task=6, eval_cases_per_task=2)


@pytest.fixture(scope="module")
def small_kit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import write_world
    from worlds import small_world

    root = tmp_path_factory.mktemp("kit")
    world = write_world(root / "src", small_world())
    return build_kit(world, root / "out", SMALL)


def test_build_record_has_the_promised_fields(small_kit: dict[str, Any]) -> None:
    assert small_kit["status"] == "kit_ready" and small_kit["tasks_persisted"] is False
    assert small_kit["tasks_count"] >= 5 and small_kit["sft_rows"] > 0 and small_kit["eval_cases"] > 0
    assert Path(small_kit["kit"]["archive"]).stat().st_size == small_kit["kit"]["bytes"]


def test_two_builds_are_byte_identical(small_kit: dict[str, Any], tmp_path: Path) -> None:
    from conftest import write_world
    from worlds import small_world

    again = build_kit(write_world(tmp_path / "src", small_world()), tmp_path / "out", SMALL)
    assert again["kit"]["sha256"] == small_kit["kit"]["sha256"]
    assert Path(again["kit"]["archive"]).read_bytes() == Path(small_kit["kit"]["archive"]).read_bytes()


def test_info_and_verify_pass_on_the_directory_and_the_archive(small_kit: dict[str, Any]) -> None:
    for path in (small_kit["kit"]["path"], small_kit["kit"]["archive"]):
        summary, _ = describe(Path(path))
        assert summary["kind"] == "kit" and summary["verified"] and summary["leakage"]["shared_anchors"] == 0
        with open_kit(Path(path)) as kit:
            report = verify_kit(kit)
        assert report["verified"], report["mismatches"]


def test_a_do_nothing_trace_fails_every_admitted_task_and_case(small_kit: dict[str, Any]) -> None:
    with open_kit(Path(small_kit["kit"]["path"])) as kit:
        runtime = kit.world().runtime()
        records = [r["prototype"] for r in kit.jsonl("tasks.jsonl")]
        records += [c["task"] for c in kit.jsonl("eval_cases.jsonl")]
        for record in records:
            task = Task.model_validate(record)
            with runtime.episode() as episode:
                assert evaluate(task.vcode, episode, None, task.answer).outcome == "fail"


def test_sft_rows_are_executed_chat_conversations(small_kit: dict[str, Any]) -> None:
    with open_kit(Path(small_kit["kit"]["path"])) as kit:
        rows = kit.jsonl("sft.jsonl")
        tool_names = {spec["function"]["name"] for spec in rows[0]["tools"]}
        for row in rows:
            roles = [m["role"] for m in row["messages"]]
            assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
            for message in row["messages"]:
                for call in message.get("tool_calls", []):
                    assert isinstance(call["function"]["arguments"], dict)
                    assert call["function"]["name"] in tool_names
                if message["role"] == "tool":
                    json.loads(message["content"])
            meta = row["metadata"]
            assert meta["sft_source"] == "reference_chain_replay"
            assert meta["arguments_source"] == "reference_chain_arg_builder"
            assert len(meta["observation_hashes"]) == roles.count("tool")


def test_templates_are_varied(small_kit: dict[str, Any]) -> None:
    with open_kit(Path(small_kit["kit"]["path"])) as kit:
        templates = set(kit.meta["templates"])
    assert {"lookup_field", "find_then_read", "write_ok", "write_refused", "aggregate_count"} <= templates


@pytest.mark.parametrize("eval_percent", [0, 100])
def test_a_world_that_cannot_hold_out_stops_before_writing(small_world_file: Path, tmp_path: Path,
                                                           eval_percent: int) -> None:
    out = tmp_path / "out"
    with pytest.raises(KitError, match="cannot hold out"):
        build_kit(small_world_file, out, BuildConfig(train_cases_per_task=4, eval_cases_per_task=2,
                                                     eval_percent=eval_percent))
    assert not out.exists() or not any(out.iterdir())


def _copy_kit(small_kit: dict[str, Any], tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "kit"
    shutil.copytree(small_kit["kit"]["path"], target)
    return target


def test_a_flipped_byte_is_refused(small_kit: dict[str, Any], tmp_path: Path) -> None:
    kit = _copy_kit(small_kit, tmp_path)
    data = bytearray((kit / "sft.jsonl").read_bytes())
    data[10] ^= 1
    (kit / "sft.jsonl").write_bytes(bytes(data))
    with pytest.raises(ChecksumError):
        describe(kit)


def test_an_extra_file_is_refused(small_kit: dict[str, Any], tmp_path: Path) -> None:
    kit = _copy_kit(small_kit, tmp_path)
    (kit / "world" / "extra.txt").write_text("x")
    with pytest.raises(ChecksumError, match="extra.txt"):
        describe(kit)


def _hostile_archive(path: Path, members: list[tarfile.TarInfo], payload: bytes = b"x") -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(payload) if member.isreg() else None)
    path.write_bytes(zstandard.ZstdCompressor().compress(buffer.getvalue()))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("members", [
    [_member("kit/"), _member("kit/../evil")],
    [_member("kit/", tarfile.DIRTYPE), _member("kit/link", tarfile.SYMTYPE, "/etc/passwd")],
], ids=["dotdot", "symlink"])
def test_hostile_archives_are_refused_and_leave_nothing(tmp_path: Path, members: list[tarfile.TarInfo],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    archive = _hostile_archive(tmp_path / "bad.tar.zst", members)
    with pytest.raises(ArchiveError):
        describe(archive)
    assert list(scratch.iterdir()) == []


def test_a_zstd_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from world_format import archive as archive_module

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(archive_module, "DEFAULT_BUDGET", archive_module.ArchiveBudget(max_total_bytes=1 << 20))
    bomb = tmp_path / "bomb.tar.zst"
    with open(bomb, "wb") as handle, zstandard.ZstdCompressor().stream_writer(handle) as writer:
        header = tarfile.TarInfo("kit/big")
        header.size = 64 << 20
        writer.write(header.tobuf(format=tarfile.PAX_FORMAT))
        for _ in range(64):
            writer.write(bytes(1 << 20))
    with pytest.raises(BlobkitError), archive_module.open_archive(bomb, archive_module.DEFAULT_BUDGET):
        pass
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_build_with_every_authored_task_admitted(example: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    record = cached_build(example / "world.json", tmp_path_factory,
                          BuildConfig(train_cases_per_task=4, eval_cases_per_task=2))
    world = load_world(example / "world.json").world
    with open_kit(Path(record["kit"]["path"])) as kit:
        authored = [r for r in kit.jsonl("rejected.jsonl") if r["source"] == "authored"]
        assert authored == [], [r["rejected_because"] for r in authored]
        assert kit.meta["leakage"]["shared_anchors"] == 0
    assert record["tasks_authored"] == len(world.tasks)


def test_cli_build_prints_the_record(small_world_file: Path, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", "build", "--world", str(small_world_file), "--out",
                             str(tmp_path / "o"), "--train-cases", "4", "--eval-cases", "2", "--json"],
                            capture_output=True, text=True, check=True)
    record = json.loads(result.stdout)
    assert record["status"] == "kit_ready" and set(record["kit"]) == {"path", "archive", "sha256", "bytes"}
    info = subprocess.run([sys.executable, "-m", "blobkit.cli", "info", record["kit"]["archive"], "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(info.stdout)["kind"] == "kit"
