"""The OpenAI-compatible app of ``blobkit serve-model``: ``/v1/models``, ``/v1/chat/completions``, ``/v1/responses``.

Routes translate: they authenticate (``Authorization: Bearer KEY``), read the request into row messages
(:mod:`blobkit.serving.messages`), ask the loaded export for one turn (:mod:`blobkit.serving.engine`) and write
it back (:mod:`blobkit.serving.replies`). Every error is OpenAI's shape, ``{"error": {"message", "type", "param",
"code"}}``: a malformed body is 400, a missing key 401, a model not loaded 404 naming the loaded ones.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from blobkit.errors import BlobkitError

from .engine import LoadedModel
from .errors import AuthenticationError, ModelNotFoundError, ServingError
from .messages import chat_rows, chat_tools, response_rows, response_tools
from .records import ChatRequest, ResponsesRequest
from .replies import chat_chunks, chat_completion, response_events, response_object, response_output
from .shadow import Shadow

LOG = logging.getLogger("blobkit.serving")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _stops(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 4:
        raise ServingError("stop: at most 4 sequences", "stop")
    return stops


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools rendered under ``tool_choice`` (``none``: no tools); ``required`` and named functions are
    refused: this endpoint does not constrain decoding, so it cannot promise a call."""
    if choice in (None, "auto"):
        return tools
    if choice == "none":
        return []
    raise ServingError(f"tool_choice {choice!r} is not served: the model decodes freely, so only 'auto' and 'none' "
                       "can be kept; ask with 'auto'", "tool_choice")


def create_app(models: Mapping[str, LoadedModel], api_key: str, shadow: Shadow | None = None) -> FastAPI:
    """The app serving ``models`` (id → loaded export) to callers holding ``api_key``.

    ``shadow``: Responses requests are shown to the model through it (:mod:`blobkit.serving.shadow`; ``blobkit
    replay --harness codex`` sets one)."""
    app = FastAPI(title="blobkit serve-model", version="1",
                  description="An OpenAI-compatible endpoint for blobkit exports (chat completions with tools, the "
                              "Responses subset function-calling agents use).")

    def authorised(request: Request) -> None:
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), api_key.encode()):
            raise AuthenticationError("missing or wrong API key: send Authorization: Bearer KEY (the key "
                                      "blobkit serve-model printed, or the one in its --api-key-env variable)")

    def loaded(name: str) -> LoadedModel:
        if name not in models:
            raise ModelNotFoundError(f"the model {name!r} is not loaded here; loaded: {', '.join(sorted(models))}",
                                     "model")
        return models[name]

    @app.get("/v1/models", dependencies=[Depends(authorised)])
    def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "blobkit",
                                            "kind": model.manifest.get("kind"),
                                            "tool_format": model.tool_format.name}
                                           for name, model in sorted(models.items())]}

    @app.post("/v1/chat/completions", dependencies=[Depends(authorised)], response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse:
        model = loaded(body.model)
        rows, tools = chat_rows(body.messages), _tool_choice(body.tool_choice, chat_tools(body.tools))
        caps = [cap for cap in (body.max_tokens, body.max_completion_tokens) if cap]
        turn = await run_in_threadpool(model.turn, rows, tools, max_tokens=min(caps) if caps else None,
                                       temperature=body.temperature or 0.0, seed=body.seed, stop=_stops(body.stop))
        if body.tool_choice == "none":
            turn = _without_calls(turn)
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return _stream(chat_chunks(turn, rows, body.model, usage))
        return JSONResponse(chat_completion(turn, rows, body.model))

    @app.post("/v1/responses", dependencies=[Depends(authorised)], response_model=None)
    async def responses(body: ResponsesRequest) -> JSONResponse | StreamingResponse:
        model = loaded(body.model)
        if body.previous_response_id:
            raise ServingError("previous_response_id: nothing is stored here; send the whole conversation as input",
                               "previous_response_id")
        rows = response_rows(body.input, body.instructions)
        specs, spaces = response_tools(body.tools)
        if shadow is not None:
            rows, specs = shadow.rows(rows), shadow.tools(specs, spaces)
        tools = _tool_choice(body.tool_choice, specs)
        turn = await run_in_threadpool(model.turn, rows, tools, max_tokens=body.max_output_tokens,
                                       temperature=body.temperature or 0.0)
        if body.tool_choice == "none":
            turn = _without_calls(turn)
        if body.stream:
            return _stream(response_events(turn, rows, spaces, body.model))
        return JSONResponse(response_object(response_output(turn, rows, spaces), turn, body.model,
                                            f"resp_{secrets.token_hex(12)}", int(time.time())))

    _install_errors(app)
    return app


def _without_calls(turn: Any) -> Any:
    """A turn under ``tool_choice: none``: its text only, even if the model wrote a call."""
    from dataclasses import replace

    from trainers.formats import ParsedTurn

    return replace(turn, parsed=ParsedTurn(content=turn.parsed.content), finish_reason=(
        "stop" if turn.finish_reason == "tool_calls" else turn.finish_reason))


def _stream(events: Iterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def _install_errors(app: FastAPI) -> None:
    """Every error in OpenAI's shape; never a traceback."""

    async def serving(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServingError)
        return JSONResponse(error_body(str(exc), exc.kind, exc.param, type(exc).__name__), status_code=exc.status)

    async def blobkit(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(error_body(str(exc), "invalid_request_error"), status_code=400)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        message = f"{param + ': ' if param else ''}{first.get('msg', 'invalid')}"
        return JSONResponse(error_body(message, "invalid_request_error", param), status_code=400)

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return JSONResponse(error_body(str(exc.detail), "invalid_request_error"), status_code=exc.status_code)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        LOG.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("the server failed on this request (see its log)", "server_error"),
                            status_code=500)

    app.add_exception_handler(ServingError, serving)
    app.add_exception_handler(BlobkitError, blobkit)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, unexpected)
