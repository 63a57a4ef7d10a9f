"""What a shadow replay's endpoint shows the model when its harness adds to the conversation what no config removes.

Codex 0.169 (``blobkit replay --harness codex``) declares four tools of its own beside an MCP server's
(``list_mcp_resources``, ``list_mcp_resource_templates``, ``read_mcp_resource``, ``request_user_input``), sends
the server's tools sorted by name as one Responses ``namespace``, and prefixes every MCP tool output with its
wall time (``Wall time: 0.0051 seconds\\nOutput:``), which changes from run to run. A :class:`Shadow` shows the
model only the namespace's functions, in the world's declaration order, and each observation without the timing
line: the conversation blobkit's own loop renders, so the replay is deterministic and comparable with
``blobkit replay``. Nothing else is touched: messages, calls and observations pass as sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
WALL_TIME = re.compile(r"\AWall time: [0-9.]+ seconds\nOutput:")
"""Codex's timing prefix on an MCP tool's output."""


@dataclass(frozen=True)
class Shadow:
    """The world's view of a harness's requests (see the module docstring)."""

    namespace: str
    """The MCP server's name in the harness's config (its tools' Responses namespace)."""
    order: tuple[str, ...]
    """The world's tools in declaration order."""

    def tools(self, specs: list[Row], spaces: dict[str, str]) -> list[Row]:
        """Only the namespace's functions, in :attr:`order` (any others it holds after them)."""
        inside = {s["function"]["name"]: s for s in specs if spaces.get(s["function"]["name"]) == self.namespace}
        return [inside[n] for n in self.order if n in inside] + [s for n, s in inside.items() if n not in self.order]

    def rows(self, rows: list[Row]) -> list[Row]:
        """Tool messages without the harness's timing prefix."""
        return [{**row, "content": WALL_TIME.sub("", row["content"])}
                if row.get("role") == "tool" and isinstance(row.get("content"), str) else row for row in rows]
