"""Rendering pages: the templates, the security headers, and :class:`PageRoute`, which turns errors into pages.

Every page route of :mod:`.router` uses :class:`PageRoute`: a library error (:class:`~blobkit.errors.BlobkitError`)
becomes the error page with the status the JSON API would give (:func:`blobkit.service.http_errors.status_of`)
and its one-line message; a malformed form field names the field; a request without a session asks to sign in
(a page) or answers 401 (a script's request). No traceback reaches the browser. Responses carry a strict
Content-Security-Policy (scripts and styles from the package's static files only), ``no-store`` and
``nosniff``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from blobkit.errors import BlobkitError

from ..http_errors import code_of, status_of
from .sessions import SignedOut

LOG = logging.getLogger("blobkit.service.panel")
HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = Jinja2Templates(env=jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                                   undefined=jinja2.StrictUndefined))
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
FRAGMENT_HEADER = "X-Panel-Fragment"
"""Set by the panel's script on the requests it makes itself (polling): no redirect to the sign-in page."""


def utc_iso(when: float | None) -> str:
    """Unix time as ISO 8601 UTC (the ``datetime`` of a ``<time>`` element the script shows in local time)."""
    return "" if when is None else datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def utc_text(when: float | None) -> str:
    """Unix time as text in UTC (what a browser without the script shows)."""
    return "—" if when is None else datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


TEMPLATES.env.filters["utc_iso"] = utc_iso
TEMPLATES.env.filters["utc_text"] = utc_text
TEMPLATES.env.filters["pct"] = lambda value: "—" if value is None else f"{100 * float(value):.1f} %"


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    """A template rendered with the security headers."""
    response = TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    return response


def error_page(request: Request, status: int, message: str, code: str, session: Any = None) -> HTMLResponse:
    """The error page: what went wrong and what to do next."""
    title = {404: "Not found", 401: "Sign in needed", 403: "Not allowed", 413: "Too large",
             409: "Not possible now", 410: "Lease expired", 422: "Not accepted"}.get(status, "Something went wrong")
    return render(request, "error.html", {"title": title, "message": message, "code": code, "status": status,
                                          "session": session}, status_code=status)


def _field_message(errors: list[Any]) -> str:
    first = errors[0] if errors else {"loc": (), "msg": "invalid"}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
    where = ".".join(loc)
    return f"{where + ': ' if where else ''}{first.get('msg', 'invalid')}; correct it and submit the form again"


def _signed_out(request: Request) -> Response:
    if request.method == "GET" and FRAGMENT_HEADER.lower() not in request.headers:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/?next={quote(target, safe='')}", status_code=303, headers=SECURITY_HEADERS)
    return error_page(request, 401, "you are signed out (or your session ended): sign in again with your "
                      "workspace's API key", "unauthorized")


class PageRoute(APIRoute):
    """A page route: library errors, malformed fields and a missing session become pages, never JSON or a
    traceback."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except SignedOut:
                return _signed_out(request)
            except BlobkitError as exc:
                return error_page(request, status_of(exc), str(exc) or type(exc).__name__, code_of(exc))
            except RequestValidationError as exc:
                return error_page(request, 422, _field_message(list(exc.errors())), "invalid_request")
            except ValidationError as exc:
                return error_page(request, 422, _field_message(list(exc.errors())), "invalid_request")

        return page
