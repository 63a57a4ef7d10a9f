"""A rank leaves its process group before it exits (a gloo group left to the interpreter's teardown can abort
the process), and leaving is a no-op where there is no group."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

dist = pytest.importorskip("torch.distributed")

from trainers.ranks import close_process_group  # noqa: E402


def test_closing_leaves_the_group_and_a_second_close_or_no_group_is_a_no_op(tmp_path: Path) -> None:
    close_process_group()  # no group yet: nothing happens
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=timedelta(seconds=30))
    assert dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
