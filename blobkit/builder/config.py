"""What decides a kit's content: the build configuration, and how a build reports progress."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

MAX_TASKS_LIMIT = 256
MAX_RENAMED_REPLAYS = 16
"""The most renamed replays a build makes of one training case."""
"""The highest task cap a build accepts (a world declares at most 64 tools, so far fewer specs exist)."""
Progress = Callable[[str, int, int], None]
"""Called as ``progress(stage, done, total)`` while a build goes through its stages."""


class BuildConfig(BaseModel):
    """Everything that decides a kit's content (recorded in kit.json as ``build_config``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    seed: int = 42
    """Seed for minting, wording and the split."""
    max_tasks: int = Field(12, ge=1, le=MAX_TASKS_LIMIT)
    """Most tasks in the kit (authored tasks first, then minted ones, rotating over the templates); the build's
    tool coverage names each tool minting could use that the cap left out."""
    train_cases_per_task: int = Field(48, ge=1)
    """Training cases per task."""
    eval_cases_per_task: int = Field(6, ge=1)
    """Held-out cases per task."""
    eval_percent: int = Field(20, ge=0, le=100)
    """Share of anchor rows (percent) assigned to the held-out side."""
    scan_limit: int = Field(4000, ge=1)
    """Most anchor rows (or family rows) looked at per task."""
    renamed_replays: int = Field(0, ge=0, le=MAX_RENAMED_REPLAYS)
    """Extra SFT rows per training case: its reference chain replayed on copies of the seed whose identifying values
    (emails, names, references, keys) are renamed, each executed and verified (0: none)."""


def config_record(config: BuildConfig) -> dict[str, object]:
    """kit.json's ``build_config``: every field, less ``renamed_replays`` when it is 0 (so a kit built without them
    is byte-identical to one built before the option existed)."""
    record = config.model_dump(mode="json")
    if not config.renamed_replays:
        record.pop("renamed_replays")
    return record


def no_progress(stage: str, done: int, total: int) -> None:
    return None
