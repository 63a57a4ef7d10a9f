"""The `blobkit` command line (``python -m blobkit.cli``): commands that translate library errors into one line."""

from __future__ import annotations

from .app import app, main

__all__ = ["app", "main"]
