"""Tests for world_format.archive: reproducible .tar.zst writing and hardened extraction."""

from __future__ import annotations

import dataclasses
import io
import os
import random
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from blobkit.errors import ArchiveError, KitError
from world_format.archive import (
    ArchiveBudget,
    extract_tar_zst,
    extracted_root_cleanup,
    open_archive,
    write_tar_zst,
)
from world_format.canonical import file_sha256

MiB = 1 << 20

TREE: dict[str, bytes] = {
    "a.txt": b"alpha\n",
    "b/z.bin": bytes(range(256)) * 40,
    "b/c/d.txt": b"deep",
    "\u00e9t\u00e9/\u00fcber.txt": "caf\u00e9 \u2603".encode("utf-16-le"),
    "long/" + "x" * 150 + ".txt": b"a name longer than ustar's 100 bytes",
    "empty": b"",
    "a-b/sibling.txt": b"sorts between a.txt and b/",
}
EMPTY_DIRS = ["emptydir", "b/c/empty-inner"]


def make_tree(
    base: Path, *, reverse: bool = False, mtime: int = 1_000_000, file_mode: int = 0o644, dir_mode: int = 0o755
) -> Path:
    base.mkdir(parents=True)
    items: list[tuple[str, bytes | None]] = [*TREE.items(), *((d, None) for d in EMPTY_DIRS)]
    if reverse:
        items.reverse()
    for rel, data in items:
        path = base / rel
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for path in sorted(base.rglob("*"), reverse=True):
        path.chmod(dir_mode if path.is_dir() else file_mode)
        os.utime(path, (mtime, mtime))
    return base


def tree_snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def expected_snapshot() -> dict[str, bytes | None]:
    snap: dict[str, bytes | None] = dict(TREE)
    for rel in [*TREE, *EMPTY_DIRS]:
        parts = rel.split("/")
        upto = len(parts) if rel in EMPTY_DIRS else len(parts) - 1
        for depth in range(1, upto + 1):
            snap["/".join(parts[:depth])] = None
    return dict(sorted(snap.items()))


# ---------------------------------------------------------------------------------------------
# Hostile-archive builders
# ---------------------------------------------------------------------------------------------

Member = tuple[tarfile.TarInfo, bytes | None]


def reg(name: str, data: bytes = b"data") -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def dir_(name: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, None


def special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def tar_bytes(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def zst(raw: bytes, *, checksum: bool = True) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_checksum=checksum, write_content_size=True).compress(raw)


def with_root(*members: Member) -> list[Member]:
    return [dir_("root"), *members]


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    folder = tmp_path / "dest"
    folder.mkdir()
    return folder


def assert_rejected(
    tmp_path: Path, dest: Path, blob: bytes, match: str | None = None, budget: ArchiveBudget | None = None
) -> ArchiveError:
    archive = tmp_path / "hostile.tar.zst"
    archive.write_bytes(blob)
    with pytest.raises(ArchiveError, match=match) as info:
        if budget is None:
            extract_tar_zst(archive, dest)
        else:
            extract_tar_zst(archive, dest, budget)
    message = str(info.value)
    assert "\n" not in message
    assert str(archive) in message
    assert list(dest.iterdir()) == [], "a failed extraction left files behind"
    return info.value


def zero_stream_zst(n_bytes: int, *, prefix: bytes = b"", declare_size: bool = False) -> bytes:
    """``prefix`` then ``n_bytes`` of zeros, zstd-compressed by streaming (fast, little memory)."""
    out = io.BytesIO()
    total = len(prefix) + n_bytes
    cctx = zstandard.ZstdCompressor(level=1, write_checksum=True, write_content_size=declare_size)
    with cctx.stream_writer(out, size=total if declare_size else -1, closefd=False) as writer:
        writer.write(prefix)
        block = bytes(MiB)
        left = n_bytes
        while left:
            step = min(left, len(block))
            writer.write(block[:step])
            left -= step
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def test_round_trip_restores_every_file_and_directory(tmp_path: Path, dest: Path) -> None:
    source = make_tree(tmp_path / "src")
    archive = tmp_path / "out" / "kit.tar.zst"
    digest, size = write_tar_zst(source, archive, "kit-1")
    assert digest == file_sha256(archive)
    assert size == archive.stat().st_size
    root = extract_tar_zst(archive, dest)
    try:
        assert root.name == "kit-1"
        assert root.parent.parent == dest
        assert tree_snapshot(root) == expected_snapshot()
    finally:
        extracted_root_cleanup(root)
    assert list(dest.iterdir()) == []


def test_two_writes_of_the_same_tree_are_byte_identical_whatever_order_mtime_or_mode(tmp_path: Path) -> None:
    first = make_tree(tmp_path / "one", mtime=1_000_000, file_mode=0o600, dir_mode=0o700)
    second = make_tree(tmp_path / "two", reverse=True, mtime=1_700_000_000, file_mode=0o755, dir_mode=0o775)
    result_a = write_tar_zst(first, tmp_path / "a.tar.zst", "kit")
    result_b = write_tar_zst(second, tmp_path / "b.tar.zst", "kit")
    result_c = write_tar_zst(first, tmp_path / "c.tar.zst", "kit")
    assert (tmp_path / "a.tar.zst").read_bytes() == (tmp_path / "b.tar.zst").read_bytes()
    assert result_a == result_b == result_c
    assert write_tar_zst(first, tmp_path / "d.tar.zst", "other")[0] != result_a[0]


def test_written_members_are_sorted_with_fixed_metadata(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src", mtime=1_234_567)
    archive = tmp_path / "k.tar.zst"
    write_tar_zst(source, archive, "kit")
    blob = archive.read_bytes()
    params = zstandard.get_frame_parameters(blob[:18])
    assert params.has_checksum
    raw = zstandard.ZstdDecompressor().decompress(blob)
    assert params.content_size == len(raw)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == "kit"
    rels = [n[len("kit/") :] for n in names[1:]]
    assert rels == sorted(rels)
    assert set(rels) == set(expected_snapshot())
    for member in members:
        assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (0, 0, 0, "", "")
        assert member.mode == (0o755 if member.isdir() else 0o644)
        assert member.isdir() or member.type == tarfile.REGTYPE
        assert set(member.pax_headers) <= {"path"}


def test_write_replaces_an_existing_archive_and_leaves_no_temp_files(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    archive = out / "kit.tar.zst"
    archive.write_bytes(b"stale")
    write_tar_zst(source, archive, "kit")
    assert [p.name for p in out.iterdir()] == ["kit.tar.zst"]
    assert archive.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"


def test_write_refuses_a_symlink_in_the_source(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    (source / "b" / "link").symlink_to(source / "a.txt")
    with pytest.raises(ArchiveError, match="symlink"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit")
    assert not (tmp_path / "k.tar.zst").exists()


def test_write_refuses_a_symlinked_directory_in_the_source(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    (source / "dirlink").symlink_to(source / "b", target_is_directory=True)
    with pytest.raises(ArchiveError, match="symlink"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_write_refuses_a_fifo_in_the_source(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    os.mkfifo(source / "pipe")
    with pytest.raises(ArchiveError, match="not a regular file"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit")


def test_write_refuses_a_source_that_is_a_symlink_or_missing(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    (tmp_path / "alias").symlink_to(source, target_is_directory=True)
    with pytest.raises(ArchiveError):
        write_tar_zst(tmp_path / "alias", tmp_path / "k.tar.zst", "kit")
    with pytest.raises(ArchiveError):
        write_tar_zst(tmp_path / "missing", tmp_path / "k.tar.zst", "kit")


def test_write_refuses_an_archive_inside_its_own_source(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    with pytest.raises(ArchiveError, match="inside"):
        write_tar_zst(source, source / "b" / "k.tar.zst", "kit")


@pytest.mark.parametrize("root_name", ["", "a/b", "..", ".", "bad\\name", "nl\nname"])
def test_write_refuses_a_bad_root_name(tmp_path: Path, root_name: str) -> None:
    source = make_tree(tmp_path / "src")
    with pytest.raises(ArchiveError):
        write_tar_zst(source, tmp_path / "k.tar.zst", root_name)


def test_write_refuses_a_tree_over_its_budget(tmp_path: Path) -> None:
    source = make_tree(tmp_path / "src")
    with pytest.raises(ArchiveError, match="members"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit", budget=ArchiveBudget(max_members=3))
    with pytest.raises(ArchiveError, match="member limit"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit", budget=ArchiveBudget(max_member_bytes=100))
    with pytest.raises(ArchiveError, match="over the 40-byte limit"):
        write_tar_zst(source, tmp_path / "k.tar.zst", "kit", budget=ArchiveBudget(max_name_length=40))
    assert not (tmp_path / "k.tar.zst").exists()


# ---------------------------------------------------------------------------------------------
# Extraction helpers and budgets
# ---------------------------------------------------------------------------------------------


def test_open_archive_yields_the_root_and_removes_it_on_exit(tmp_path: Path, dest: Path) -> None:
    archive = tmp_path / "k.tar.zst"
    write_tar_zst(make_tree(tmp_path / "src"), archive, "kit")
    with open_archive(archive, dest_parent=dest) as root:
        assert (root / "a.txt").read_bytes() == TREE["a.txt"]
    assert list(dest.iterdir()) == []
    with pytest.raises(RuntimeError), open_archive(archive, dest_parent=dest) as root:
        assert root.is_dir()
        raise RuntimeError("boom")
    assert list(dest.iterdir()) == []


def test_extracted_root_cleanup_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    victim = tmp_path / "precious" / "root"
    victim.mkdir(parents=True)
    with pytest.raises(ArchiveError, match="refusing"):
        extracted_root_cleanup(victim)
    assert victim.is_dir()


def test_archive_budget_is_frozen_and_validated() -> None:
    budget = ArchiveBudget()
    assert (budget.max_members, budget.max_member_bytes, budget.max_total_bytes) == (10_000, 512 * MiB, 2 << 30)
    assert (budget.max_window_bytes, budget.max_name_length) == (1 << 27, 255)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.max_members = 1  # type: ignore[misc]
    for bad in (0, -1):
        with pytest.raises(ArchiveError):
            ArchiveBudget(max_members=bad)


def test_archive_error_is_a_kit_error() -> None:
    assert issubclass(ArchiveError, KitError)


def test_extract_accepts_an_archive_exactly_at_its_budgets(tmp_path: Path, dest: Path) -> None:
    members = with_root(reg("root/a", b"x" * 100), reg("root/b", b"y" * 100))
    archive = tmp_path / "ok.tar.zst"
    archive.write_bytes(zst(tar_bytes(members)))
    budget = ArchiveBudget(max_members=3, max_member_bytes=100, max_total_bytes=200, max_name_length=6)
    with open_archive(archive, budget, dest_parent=dest) as root:
        assert (root / "b").read_bytes() == b"y" * 100


def test_extract_creates_missing_parent_directories(tmp_path: Path, dest: Path) -> None:
    archive = tmp_path / "ok.tar.zst"
    archive.write_bytes(zst(tar_bytes([reg("root/deep/er/file.txt", b"hi")])))
    with open_archive(archive, dest_parent=dest) as root:
        assert (root / "deep" / "er" / "file.txt").read_bytes() == b"hi"


def test_extract_rejects_a_missing_archive(tmp_path: Path, dest: Path) -> None:
    with pytest.raises(ArchiveError, match="corrupt or unreadable"):
        extract_tar_zst(tmp_path / "nope.tar.zst", dest)
    assert list(dest.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Hostile members
# ---------------------------------------------------------------------------------------------


def _with_pax(info: tarfile.TarInfo, headers: dict[str, str]) -> tarfile.TarInfo:
    info.pax_headers = headers
    return info


def _sized(info: tarfile.TarInfo, size: int) -> tarfile.TarInfo:
    info.size = size
    return info


HOSTILE_MEMBERS: dict[str, tuple[Callable[[], list[Member]], str]] = {
    "a_dotdot_member": (lambda: with_root(reg("../evil")), "'..' path component"),
    "a_dotdot_inside_the_root": (lambda: with_root(reg("root/../evil")), "'..' path component"),
    "an_absolute_member": (lambda: [reg("/etc/x")], "absolute path"),
    "a_symlink_member": (lambda: with_root(special("root/link", tarfile.SYMTYPE, "/etc/passwd")), "symlink"),
    "a_hardlink_member": (
        lambda: with_root(reg("root/a"), special("root/hl", tarfile.LNKTYPE, "root/a")),
        "hardlink",
    ),
    "a_character_device_member": (lambda: with_root(special("root/tty", tarfile.CHRTYPE)), "device"),
    "a_fifo_member": (lambda: with_root(special("root/pipe", tarfile.FIFOTYPE)), "fifo"),
    "two_top_level_directories": (
        lambda: [dir_("root"), reg("root/a"), dir_("other"), reg("other/b")],
        "outside the single top-level",
    ),
    "a_file_at_the_top_level": (lambda: [reg("loose.txt")], "top level must be a directory"),
    "duplicate_member_names": (lambda: with_root(reg("root/a", b"1"), reg("root/a", b"2")), "duplicate"),
    "a_duplicate_directory": (lambda: with_root(dir_("root/d"), dir_("root/d")), "duplicate"),
    "a_member_name_with_a_backslash": (lambda: with_root(reg("root/a\\b")), "backslash"),
    "a_member_name_with_a_newline": (lambda: with_root(reg("root/a\nb")), "control character"),
    "an_empty_path_component": (lambda: with_root(reg("root//a")), "empty path component"),
    "a_dot_path_component": (lambda: with_root(reg("root/./a")), "'.' path component"),
    "a_file_used_as_a_directory": (lambda: with_root(reg("root/a"), reg("root/a/b")), "is a file"),
    "a_file_over_an_implied_directory": (lambda: with_root(reg("root/d/x"), reg("root/d")), "as a directory"),
    "a_directory_with_data": (
        lambda: with_root((_sized(dir_("root/d")[0], 512), bytes(512))),
        "nonzero size",
    ),
    "a_pax_sparse_member": (
        lambda: with_root(
            (_with_pax(reg("root/s", b"x" * 10)[0], {"GNU.sparse.size": "10", "GNU.sparse.map": "0,10"}), b"x" * 10)
        ),
        "sparse",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
def test_extract_rejects_a_hostile_member(tmp_path: Path, dest: Path, case: str) -> None:
    build, match = HOSTILE_MEMBERS[case]
    assert_rejected(tmp_path, dest, zst(tar_bytes(build())), match)


def test_extract_rejects_a_gnu_sparse_member(tmp_path: Path, dest: Path) -> None:
    info, _ = reg("root/sparse", b"")
    info.type = tarfile.GNUTYPE_SPARSE
    blob = zst(tar_bytes(with_root((info, None)), fmt=tarfile.GNU_FORMAT))
    assert_rejected(tmp_path, dest, blob, "sparse")


def test_extract_rejects_a_name_that_is_not_utf8(tmp_path: Path, dest: Path) -> None:
    blob = zst(tar_bytes(with_root(reg("root/\udcff")), fmt=tarfile.GNU_FORMAT))
    assert_rejected(tmp_path, dest, blob, "UTF-8")


def test_extract_rejects_a_name_over_the_length_budget(tmp_path: Path, dest: Path) -> None:
    blob = zst(tar_bytes(with_root(reg("root/" + "n" * 30))))
    assert_rejected(tmp_path, dest, blob, "over the 20-byte limit", ArchiveBudget(max_name_length=20))


def test_extract_rejects_a_gnu_long_name_that_escapes(tmp_path: Path, dest: Path) -> None:
    blob = zst(tar_bytes(with_root(reg("root/" + "d/" * 60 + "../../x")), fmt=tarfile.GNU_FORMAT))
    assert_rejected(tmp_path, dest, blob, "'..' path component")


def test_extract_rejects_a_symlink_member(tmp_path: Path, dest: Path) -> None:
    blob = zst(tar_bytes(with_root(special("root/link", tarfile.SYMTYPE, "../../etc/passwd"))))
    assert_rejected(tmp_path, dest, blob, "'root/link' is a symlink")


def test_extract_rejects_a_hardlink_member(tmp_path: Path, dest: Path) -> None:
    blob = zst(tar_bytes(with_root(reg("root/a"), special("root/b", tarfile.LNKTYPE, "root/a"))))
    assert_rejected(tmp_path, dest, blob, "'root/b' is a hardlink")


def test_extract_rejects_a_dotdot_member(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, zst(tar_bytes(with_root(reg("../evil")))), "'..'")
    assert not (tmp_path / "evil").exists()


def test_extract_rejects_an_absolute_member(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, zst(tar_bytes([reg("/etc/x")])), "absolute")


# ---------------------------------------------------------------------------------------------
# Budgets and bombs
# ---------------------------------------------------------------------------------------------


def test_extract_rejects_too_many_members(tmp_path: Path, dest: Path) -> None:
    members = with_root(*(reg(f"root/f{i}", b"x") for i in range(5)))
    assert_rejected(tmp_path, dest, zst(tar_bytes(members)), "more than 3 members", ArchiveBudget(max_members=3))


def test_extract_rejects_a_member_over_the_per_member_budget(tmp_path: Path, dest: Path) -> None:
    members = with_root(reg("root/small", b"x" * 10), reg("root/big", b"x" * 101))
    assert_rejected(
        tmp_path, dest, zst(tar_bytes(members)), "'root/big' is 101 bytes", ArchiveBudget(max_member_bytes=100)
    )


def test_extract_rejects_members_over_the_total_budget(tmp_path: Path, dest: Path) -> None:
    members = with_root(*(reg(f"root/f{i}", b"x" * 100) for i in range(3)))
    assert_rejected(
        tmp_path, dest, zst(tar_bytes(members)), "total more than 250 bytes", ArchiveBudget(max_total_bytes=250)
    )


BOMB_BUDGET = ArchiveBudget(max_total_bytes=10 * MiB, max_members=16)


def test_extract_rejects_a_zstd_bomb_of_zeros_quickly(tmp_path: Path, dest: Path) -> None:
    blob = zero_stream_zst(200 * MiB)
    assert len(blob) < 64 * 1024
    started = time.monotonic()
    assert_rejected(tmp_path, dest, blob, "decompresses to more than", BOMB_BUDGET)
    assert time.monotonic() - started < 3


def test_extract_rejects_a_bomb_hidden_after_the_end_of_archive_quickly(tmp_path: Path, dest: Path) -> None:
    prefix = tar_bytes(with_root(reg("root/a", b"hello")))
    blob = zero_stream_zst(200 * MiB, prefix=prefix)
    started = time.monotonic()
    assert_rejected(tmp_path, dest, blob, "decompresses to more than", BOMB_BUDGET)
    assert time.monotonic() - started < 3


def test_extract_rejects_a_frame_that_declares_a_huge_size_before_decompressing(tmp_path: Path, dest: Path) -> None:
    blob = zero_stream_zst(200 * MiB, declare_size=True)
    started = time.monotonic()
    assert_rejected(tmp_path, dest, blob, "declares 209715200 decompressed bytes", BOMB_BUDGET)
    assert time.monotonic() - started < 1


def test_extract_rejects_a_member_that_declares_a_huge_size(tmp_path: Path, dest: Path) -> None:
    info, _ = reg("root/huge", b"")
    info.size = 200 * MiB
    header = tar_bytes([dir_("root")])[:512] + info.tobuf(tarfile.PAX_FORMAT)
    blob = zero_stream_zst(200 * MiB, prefix=header)
    budget = ArchiveBudget(max_total_bytes=64 * MiB, max_member_bytes=32 * MiB, max_members=16)
    started = time.monotonic()
    assert_rejected(tmp_path, dest, blob, "'root/huge' is 209715200 bytes", budget)
    assert time.monotonic() - started < 3


def test_extract_rejects_a_frame_whose_window_exceeds_the_budget(tmp_path: Path, dest: Path) -> None:
    raw = tar_bytes(with_root(reg("root/data", random.Random(1).randbytes(2 * MiB) * 2)))
    params = zstandard.ZstdCompressionParameters(window_log=28, compression_level=3, write_checksum=1)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        writer.write(raw)
    blob = out.getvalue()
    assert zstandard.get_frame_parameters(blob[:18]).window_size == 1 << 28
    assert_rejected(tmp_path, dest, blob, "window", ArchiveBudget(max_window_bytes=1 << 20))
    assert_rejected(tmp_path, dest, blob, "window")  # 256 MiB is over the default 128 MiB too


# ---------------------------------------------------------------------------------------------
# Corrupt streams
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def good_archive(tmp_path: Path) -> bytes:
    archive = tmp_path / "good.tar.zst"
    write_tar_zst(make_tree(tmp_path / "src"), archive, "kit")
    return archive.read_bytes()


@pytest.mark.parametrize("keep", [0.5, 0.9, -1, -4])
def test_extract_rejects_a_truncated_archive(tmp_path: Path, dest: Path, good_archive: bytes, keep: float) -> None:
    cut = int(len(good_archive) * keep) if keep > 0 else len(good_archive) + int(keep)
    assert_rejected(tmp_path, dest, good_archive[:cut], "truncated")


def test_extract_rejects_random_garbage(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, random.Random(7).randbytes(4096), "not a zstd archive")


def test_extract_rejects_an_empty_file(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, b"", "not a zstd archive")


def test_extract_rejects_an_uncompressed_tar(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, tar_bytes(with_root(reg("root/a"))), "not a zstd archive")


def test_extract_rejects_compressed_garbage(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, zst(random.Random(3).randbytes(4096)), "corrupt")


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75, -1, -3])
def test_extract_rejects_an_archive_with_one_flipped_byte(
    tmp_path: Path, dest: Path, good_archive: bytes, where: float
) -> None:
    pos = int(len(good_archive) * where) if where > 0 else len(good_archive) + int(where)
    damaged = bytearray(good_archive)
    damaged[pos] ^= 0x55
    assert_rejected(tmp_path, dest, bytes(damaged))


def test_every_single_bit_flip_is_rejected_or_changes_nothing(tmp_path: Path, dest: Path) -> None:
    source = tmp_path / "small"
    (source / "d").mkdir(parents=True)
    (source / "d" / "f.txt").write_bytes(b"small but real content\n" * 3)
    archive = tmp_path / "small.tar.zst"
    write_tar_zst(source, archive, "kit")
    good = archive.read_bytes()
    expected = zstandard.ZstdDecompressor().decompress(good)
    damaged_path = tmp_path / "damaged.tar.zst"
    for pos in range(len(good)):
        damaged = bytearray(good)
        damaged[pos] ^= 0x01
        damaged_path.write_bytes(damaged)
        try:
            root = extract_tar_zst(damaged_path, dest)
        except ArchiveError:
            assert list(dest.iterdir()) == []
            continue
        # zstd has a few don't-care bits; such a flip must decode to the very same tar stream.
        extracted_root_cleanup(root)
        assert zstandard.ZstdDecompressor().decompress(bytes(damaged)) == expected


def test_extract_rejects_a_frame_without_a_checksum(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, zst(tar_bytes(with_root(reg("root/a"))), checksum=False), "checksum")


def test_extract_rejects_data_after_the_zstd_frame(tmp_path: Path, dest: Path, good_archive: bytes) -> None:
    assert_rejected(tmp_path, dest, good_archive + b"x", "after the zstd frame")
    assert_rejected(tmp_path, dest, good_archive + good_archive, "after the zstd frame")


def test_extract_rejects_a_corrupt_header_after_the_first_member(tmp_path: Path, dest: Path) -> None:
    raw = bytearray(tar_bytes(with_root(reg("root/a", b"first"), reg("root/b", b"second"))))
    third_header = 512 + 512 + 512  # root/, root/a header, root/a data
    assert raw[third_header : third_header + 6] == b"root/b"
    raw[third_header + 150] ^= 0x01  # inside the checksum field
    assert_rejected(tmp_path, dest, zst(bytes(raw)), "corrupt tar header")


def test_extract_rejects_a_tar_without_an_end_marker(tmp_path: Path, dest: Path) -> None:
    raw = tar_bytes(with_root(reg("root/a", b"first")))
    assert_rejected(tmp_path, dest, zst(raw[: 3 * 512]), "no end-of-archive marker")
    assert_rejected(tmp_path, dest, zst(raw[: 3 * 512 + 100]), "ends inside a header")


def test_extract_rejects_data_after_the_end_of_archive_marker(tmp_path: Path, dest: Path) -> None:
    raw = tar_bytes(with_root(reg("root/a", b"first")))
    assert_rejected(tmp_path, dest, zst(raw + b"hidden"), "after the end-of-archive marker")


def test_extract_rejects_a_tar_with_no_members(tmp_path: Path, dest: Path) -> None:
    assert_rejected(tmp_path, dest, zst(tar_bytes([])), "no members")


def test_an_archives_bytes_do_not_depend_on_the_pieces_the_tar_is_fed_to_zstd_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from world_format.archive import write as archive_write

    source = tmp_path / "kit"
    (source / "world").mkdir(parents=True)
    rng = random.Random(10)
    words = [bytes(rng.choice(b"abcdefgh") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    (source / "world" / "seed.sqlite").write_bytes(b" ".join(rng.choice(words) for _ in range(700_000)))
    (source / "a.jsonl").write_bytes(b"{}\n" * 5000)
    digests = set()
    for chunk in (archive_write.CHUNK_BYTES, tarfile.RECORDSIZE, 3 * tarfile.BLOCKSIZE):
        monkeypatch.setattr(archive_write, "CHUNK_BYTES", chunk)
        digests.add(write_tar_zst(source, tmp_path / f"out-{chunk}.tar.zst", "kit")[0])
    assert len(digests) == 1



def _large_tree(base: Path, words: int) -> Path:
    """A kit-like tree: a seed of ``words`` words (about 5.8 bytes each) and a small file."""
    (base / "world").mkdir(parents=True)
    rng = random.Random(28)
    vocabulary = [bytes(rng.choice(b"abcdefgh") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    (base / "world" / "seed.sqlite").write_bytes(b" ".join(rng.choice(vocabulary) for _ in range(words)))
    (base / "a.jsonl").write_bytes(b"{}\n" * 5000)
    return base


def _check_workers_do_not_change_the_bytes(tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch,
                                           words: int) -> None:
    from world_format.archive import write as archive_write

    source = _large_tree(tmp_path / "kit", words)
    single = write_tar_zst(source, tmp_path / "single.tar.zst", "kit")[0]
    monkeypatch.setattr(archive_write, "MULTI_WORKER_BYTES", 1 << 20)
    digests = set()
    for workers in (1, 2, 3):
        monkeypatch.setattr(archive_write, "compression_workers", lambda workers=workers: workers)
        digests.add(write_tar_zst(source, tmp_path / f"workers-{workers}.tar.zst", "kit")[0])
    assert len(digests) == 1 and single not in digests  # one multi-worker archive, not the single-threaded one
    with open_archive(tmp_path / "workers-2.tar.zst", dest_parent=dest) as root:
        assert (root / "world" / "seed.sqlite").read_bytes() == (source / "world" / "seed.sqlite").read_bytes()
        assert (root / "a.jsonl").read_bytes() == (source / "a.jsonl").read_bytes()


def test_a_large_archives_bytes_do_not_depend_on_how_many_workers_compress_it(
        tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_workers_do_not_change_the_bytes(tmp_path, dest, monkeypatch, 1_000_000)  # about 6 MB: one zstd job


@pytest.mark.slow
def test_a_large_archive_of_several_zstd_jobs_has_the_same_bytes_for_any_number_of_workers(
        tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_workers_do_not_change_the_bytes(tmp_path, dest, monkeypatch, 8_000_000)  # about 46 MB: several jobs


def test_only_an_archive_of_at_least_64_mib_of_tar_is_compressed_by_workers() -> None:
    from world_format.archive import write as archive_write

    assert 64 * MiB == archive_write.MULTI_WORKER_BYTES  # changing it changes the bytes of archives near it
    assert archive_write.zstd_threads(64 * MiB - 1) == 0
    assert 1 <= archive_write.zstd_threads(64 * MiB) == archive_write.compression_workers() <= 4
