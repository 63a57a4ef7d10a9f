"""What every archive member must satisfy, shared by the writer and the reader: budgets and names."""

from __future__ import annotations

import os
from dataclasses import dataclass

from world_format.errors import ArchiveError

MiB = 1 << 20
GiB = 1 << 30
# Decompressed bytes allowed beyond the file data: tar headers, pax records, padding, trailer.
OVERHEAD_FIXED = MiB
OVERHEAD_PER_MEMBER = 8 * 1024
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_BINARY = getattr(os, "O_BINARY", 0)


@dataclass(frozen=True)
class ArchiveBudget:
    """Limits for reading (and writing) an archive. All sizes are in bytes."""

    max_members: int = 10_000
    max_member_bytes: int = 512 * MiB
    max_total_bytes: int = 2 * GiB
    max_window_bytes: int = 1 << 27
    max_name_length: int = 255

    def __post_init__(self) -> None:
        for field_name in ("max_members", "max_member_bytes", "max_total_bytes", "max_window_bytes", "max_name_length"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArchiveError(f"ArchiveBudget.{field_name} must be a positive integer, got {value!r}")

    @property
    def max_decompressed_bytes(self) -> int:
        """The cap on the whole decompressed tar stream: file data plus a header allowance."""
        return self.max_total_bytes + OVERHEAD_FIXED + self.max_members * OVERHEAD_PER_MEMBER


DEFAULT_BUDGET = ArchiveBudget()


class Rejected(ArchiveError):
    """Internal: a reason to refuse the archive; the public error adds the archive's name."""


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted_name(name: str) -> str:
    shown = repr(name)
    return shown if len(shown) <= 120 else shown[:117] + "..."


def check_name(name: str, budget: ArchiveBudget) -> tuple[str, ...]:
    """Validate a canonical relative POSIX member name; return its components."""
    label = quoted_name(name)
    if not name:
        raise Rejected("a member has an empty name")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise Rejected(f"member {label}: name is not valid UTF-8") from None
    if len(encoded) > budget.max_name_length:
        raise Rejected(f"member {label}: name is {len(encoded)} bytes, over the {budget.max_name_length}-byte limit")
    if "\x00" in name:
        raise Rejected(f"member {label}: name contains a NUL byte")
    if "\\" in name:
        raise Rejected(f"member {label}: name contains a backslash")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise Rejected(f"member {label}: name contains a control character")
    if name.startswith("/"):
        raise Rejected(f"member {label}: absolute path")
    parts = tuple(name.split("/"))
    for part in parts:
        if part == "":
            raise Rejected(f"member {label}: empty path component")
        if part in (".", ".."):
            raise Rejected(f"member {label}: '{part}' path component")
    return parts
