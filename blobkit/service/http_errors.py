"""One JSON error shape for every failure: :class:`~blobkit.service.records.ErrorBody`.

A route raises the library's :class:`~blobkit.errors.BlobkitError`; :data:`STATUS` maps its class (the
nearest entry along the class's MRO) to an HTTP status, and the body carries the error's ``code`` and its
one-line message. Request validation (a malformed body) becomes ``422`` naming the first field at fault;
an unknown route or method keeps its status in the same shape. No traceback ever reaches a client: an
unexpected exception is ``500`` with a generic message (and logged on the server).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from blobkit.errors import (
    AuthError,
    BlobkitError,
    ChecksumError,
    ConfigError,
    ConflictError,
    ForbiddenError,
    JobError,
    KitError,
    LeaseExpiredError,
    NotFoundError,
    NotTrainableError,
    PayloadTooLargeError,
    PolicyError,
    SourceError,
    UnknownBaseError,
    WorldFormatError,
)

from .records import ErrorBody, ErrorDetail

LOG = logging.getLogger("blobkit.service")

STATUS: dict[type[BaseException], int] = {
    AuthError: 401, ForbiddenError: 403, PolicyError: 403, NotFoundError: 404, LookupError: 404, ConflictError: 409,
    LeaseExpiredError: 410, PayloadTooLargeError: 413, UnknownBaseError: 400, ChecksumError: 400,
    WorldFormatError: 422, KitError: 422, SourceError: 422, NotTrainableError: 422, ConfigError: 422,
    JobError: 409, BlobkitError: 400,
}
"""HTTP status per error class; the nearest class along an error's MRO wins. Routers may add their own."""


def status_of(exc: BaseException) -> int:
    """The HTTP status of ``exc`` (see :data:`STATUS`)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def code_of(exc: BaseException) -> str:
    """The error's ``code`` attribute, else its class name in snake case."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__.removesuffix("Error")).lower() or "error"


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    """A response in the one error shape."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, **extra))
    headers = {"WWW-Authenticate": "X-API-Key"} if status == 401 else None
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers)


def _blobkit(request: Request, exc: Exception) -> JSONResponse:
    extra = {key: getattr(exc, key) for key in ("field", "accepted") if getattr(exc, key, None) is not None}
    return error_response(status_of(exc), code_of(exc), str(exc) or type(exc).__name__, **extra)


def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        return error_response(422, "invalid_request", f"the body is not valid JSON ({first.get('msg')}, at "
                              f"position {first.get('loc', ('', '?'))[-1]})")
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
    field = ".".join(loc) or None
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    message = f"{field + ': ' if field else ''}{first.get('msg', 'invalid')}{more}"
    return error_response(422, "invalid_request", message, field=field)


def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    LOG.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "the server failed on this request (see the server's log); "
                          "nothing was written for it")


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the one shape."""
    app.add_exception_handler(BlobkitError, _blobkit)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in ((400, "Bad request"), (401, "Missing or invalid X-API-Key"),
                                (404, "Not found in the caller's workspace"), (422, "Malformed body"))
}
"""The error responses every authenticated route documents in the OpenAPI document."""
