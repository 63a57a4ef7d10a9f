"""Posted forms: read with a size limit, and checked for the session's CSRF token before anything else.

:func:`posted` is the dependency of every state-changing page route: it finds the session (SignedOut without
one), reads the form with :func:`read_form` (urlencoded or multipart, at most ``limit`` bytes) and refuses it
(:class:`CsrfError`, 403) unless its ``csrf`` field, or the ``X-CSRF-Token`` header of a script's request, is the
session's token. An over-limit body is drained up to :data:`DRAIN_BYTES` before the error is answered, so a
browser still reads the message instead of a reset connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Depends, Request
from starlette.datastructures import UploadFile
from starlette.types import Message

from blobkit.errors import ForbiddenError, PayloadTooLargeError

from ..auth import get_store
from ..store import ServiceStore
from .sessions import SESSION_COOKIE, Session, same_token, session_of

FORM_BYTES = 64 << 10
"""Largest ordinary form (64 KiB)."""
DRAIN_BYTES = 16 << 20
"""An over-limit body up to this size is read to its end before the error is answered."""
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


class CsrfError(ForbiddenError):
    """A form without the session's CSRF token (403): nothing was done."""

    code = "csrf_failed"


@dataclass(frozen=True)
class Posted:
    """A checked form: the session that sent it, its text fields, and its file fields' bytes."""

    session: Session
    fields: dict[str, str]
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """Field name -> (the file's name, its bytes)."""

    def text(self, name: str, default: str = "") -> str:
        """A text field, stripped."""
        return self.fields.get(name, default).strip()


async def _drain(request: Request, budget: int) -> None:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > budget:
            return


def _limited(request: Request, limit: int, hint: str) -> Request:
    """The request, whose body raises PayloadTooLargeError once more than ``limit`` bytes arrived."""
    seen = 0
    receive = request.receive

    async def limited_receive() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise PayloadTooLargeError(f"the form is more than the {limit} bytes this page accepts; {hint}")
        return message

    return Request(request.scope, limited_receive)


async def read_form(request: Request, limit: int, hint: str,
                    file_limit: int | None = None) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
    """(text fields, file fields) of a posted form of at most ``limit`` bytes; a file over ``file_limit`` bytes is
    PayloadTooLargeError with ``hint``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        if int(declared) <= DRAIN_BYTES:
            await _drain(request, DRAIN_BYTES)
        raise PayloadTooLargeError(f"the upload is {int(declared)} bytes, more than this page accepts; {hint}")
    form = await _limited(request, limit, hint).form(max_files=2, max_fields=64)
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    try:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                data = await value.read(-1 if file_limit is None else file_limit + 1)
                if file_limit is not None and len(data) > file_limit:
                    raise PayloadTooLargeError(f"{value.filename or 'the file'} is more than {file_limit} bytes "
                                               f"(1 MiB), the most a world uploaded here may be; {hint}")
                files[name] = (value.filename or name, data)
            else:
                fields[name] = value
    finally:
        await form.close()
    return fields, files


def page_session(request: Request, store: ServiceStore = Depends(get_store)) -> Session:
    """The request's session; SignedOut without one (the page asks to sign in)."""
    return session_of(store, request.cookies.get(SESSION_COOKIE))


def check_csrf(session: Session, request: Request, fields: dict[str, str]) -> None:
    """CsrfError unless the form's ``csrf`` field (or the X-CSRF-Token header) is the session's token."""
    if not same_token(session.csrf, fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)):
        raise CsrfError("this form's security token is missing or out of date (nothing was done): reload the page "
                        "and submit the form again")


async def posted(request: Request, session: Session = Depends(page_session)) -> Posted:
    """A small form of the signed-in session, CSRF-checked."""
    fields, files = await read_form(request, FORM_BYTES, "this form takes a few short fields")
    check_csrf(session, request, fields)
    return Posted(session=session, fields=fields, files=files)
