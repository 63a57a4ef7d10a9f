"""``blobkit serve-model``: exports behind an OpenAI-compatible endpoint (chat completions with tools, and the
Responses subset function-calling agents such as Codex use)."""

from __future__ import annotations

from .errors import AuthenticationError, ModelNotFoundError, ServingError

__all__ = ["AuthenticationError", "ModelNotFoundError", "ServingError"]
