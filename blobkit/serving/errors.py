"""The model endpoint's errors: each maps to one HTTP status and one OpenAI error ``type``."""

from __future__ import annotations

from blobkit.errors import BlobkitError


class ServingError(BlobkitError, ValueError):
    """A request the model endpoint refuses (HTTP 400, ``invalid_request_error``); ``param`` names the field."""

    status = 400
    kind = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (str(self), self.param)


class ModelNotFoundError(ServingError, LookupError):
    """A request named a model that is not loaded (HTTP 404); the message lists the loaded ones."""

    status = 404


class AuthenticationError(ServingError, PermissionError):
    """A request without the endpoint's API key (HTTP 401)."""

    status = 401
    kind = "authentication_error"
