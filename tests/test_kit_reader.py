"""The typed kit reader checks structure, not only checksums: missing files, keys and bad lines name where."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from world_format.canonical import canonical_bytes
from world_format.errors import KitError
from world_format.kit import KIT_FILE, open_kit
from world_format.manifest import file_entry


@pytest.fixture(scope="module")
def kit_dir(kit_path: Path) -> Path:
    """The session's small kit (conftest): these tests only read it, or change copies of it."""
    return kit_path


def _copy_with(kit_dir: Path, tmp_path: Path, name: str, data: bytes | None) -> Path:
    """A copy of the kit with one file replaced (or removed) and kit.json's table kept consistent."""
    copy = tmp_path / "kit"
    shutil.copytree(kit_dir, copy)
    meta = json.loads((copy / KIT_FILE).read_text())
    if data is None:
        (copy / name).unlink()
        meta["files"].pop(name)
    else:
        (copy / name).write_bytes(data)
        meta["files"][name] = file_entry(data)
    (copy / KIT_FILE).write_bytes(canonical_bytes(meta) + b"\n")
    return copy


def test_a_kit_reads_back_as_typed_cases_tasks_and_rows(kit_dir: Path) -> None:
    with open_kit(kit_dir) as kit:
        held_out, train = kit.cases("eval"), kit.cases("train")
        assert held_out and all(case.prompt is not None and case.side == "eval" for case in held_out)
        assert train and all(case.side == "train" for case in train)
        assert kit.tasks() and all(not task.rejected_because for task in kit.tasks())
        assert len(kit.rows()) == kit.info.record["sft_rows"]


def test_a_truncated_jsonl_line_is_refused_naming_file_and_line(kit_dir: Path, tmp_path: Path) -> None:
    lines = (kit_dir / "sft.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:40] + b"\n"
    with pytest.raises(KitError, match=r"sft\.jsonl:2: invalid JSON"), \
            open_kit(_copy_with(kit_dir, tmp_path, "sft.jsonl", b"".join(lines))):
        pass


def test_a_case_without_its_task_is_refused_naming_the_key(kit_dir: Path, tmp_path: Path) -> None:
    lines = (kit_dir / "eval_cases.jsonl").read_text().splitlines()
    case = json.loads(lines[0])
    del case["task"]["anchor"]
    lines[0] = json.dumps(case)
    with pytest.raises(KitError, match=r"eval_cases\.jsonl:1: /task/anchor: Field required"), \
            open_kit(_copy_with(kit_dir, tmp_path, "eval_cases.jsonl", ("\n".join(lines) + "\n").encode())):
        pass


def test_a_kit_missing_one_of_its_files_is_refused_naming_it(kit_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(KitError, match="train_cases.jsonl is missing"), \
            open_kit(_copy_with(kit_dir, tmp_path, "train_cases.jsonl", None)):
        pass


def test_kit_json_without_its_record_is_refused_naming_the_key(kit_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "kit"
    shutil.copytree(kit_dir, copy)
    meta = json.loads((copy / KIT_FILE).read_text())
    del meta["record"]
    (copy / KIT_FILE).write_bytes(canonical_bytes(meta) + b"\n")
    with pytest.raises(KitError, match="kit.json: /record: Field required"), open_kit(copy):
        pass


_FILES = ["tasks.jsonl", "rejected.jsonl", "train_cases.jsonl", "eval_cases.jsonl", "sft.jsonl", "kit.json"]


def _mutate(kit_dir: Path, out: Path, name: str, how: str, position: int) -> Path:
    """A copy of the kit with one file mutated (checksums kept valid): dropped, a key dropped, a line corrupted."""
    copy = out / "kit"
    shutil.copytree(kit_dir, copy)
    meta = json.loads((copy / KIT_FILE).read_text())
    if name == KIT_FILE:
        keys = sorted(k for k in meta if k != "files")
        if how == "drop key":
            meta.pop(keys[position % len(keys)])
        elif how == "corrupt":
            meta[keys[position % len(keys)]] = [position]
    else:
        lines = (copy / name).read_text().splitlines()
        if how == "drop file":
            (copy / name).unlink()
            meta["files"].pop(name)
        elif lines:
            index = position % len(lines)
            if how == "drop key":
                record = json.loads(lines[index])
                record.pop(sorted(record)[position % len(record)])
                lines[index] = json.dumps(record)
            else:
                lines[index] = lines[index][: position % max(len(lines[index]), 1)]
            data = ("\n".join(lines) + "\n").encode()
            (copy / name).write_bytes(data)
            meta["files"][name] = file_entry(data)
    (copy / KIT_FILE).write_bytes(canonical_bytes(meta) + b"\n")
    return copy


@given(name=st.sampled_from(_FILES), how=st.sampled_from(["drop file", "drop key", "corrupt"]),
       position=st.integers(min_value=0, max_value=500))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_mutated_kits_give_a_typed_error_or_a_kit(kit_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                                                   name: str, how: str, position: int) -> None:
    from blobkit.describe import describe
    from blobkit.verify import verify_kit
    from world_format.errors import BlobkitError

    copy = _mutate(kit_dir, tmp_path_factory.mktemp("mutated"), name, how, position)
    try:
        describe(copy)
        with open_kit(copy) as kit:
            verify_kit(kit)
    except BlobkitError:
        pass
