"""A small, typed client for RunPod's REST API v2 on httpx.

Base URL ``https://api.runpod.io`` with every path under ``/v2`` (RunPod's REST v1 at
``rest.runpod.io/v1`` was retired in November 2026 and their GraphQL API is being shut down;
see docs.runpod.io/api-reference-v2/migrate-from-v1). Endpoints used, as specified by
RunPod's OpenAPI document (``https://api.runpod.io/v2/openapi.json``):

======  ==========================  =====================================================
POST    ``/v2/pods``                create a pod; ``201`` with the pod. Not idempotent (no
                                    idempotency key), so it is never blindly retried.
GET     ``/v2/pods``                ``{"pods": [...]}``
GET     ``/v2/pods/{id}``           one pod; ``status`` is PROVISIONING → STARTING → RUNNING,
                                    or EXITED, ERROR, TERMINATED; ``cost`` is USD per hour
DELETE  ``/v2/pods/{id}``           terminate (``204``, irreversible); ``404`` = already gone
GET     ``/v2/pods/{id}/logs``      server-sent events, ``data: {"ts", "source", "line"}``
GET     ``/v2/catalog/gpus``        ``{"gpus": [...]}`` with ``price.secure`` /
                                    ``price.community`` in USD per hour for one GPU
======  ==========================  =====================================================

Errors are RFC 9457 problem objects (``title``, ``status``, ``detail``, ``errors``). ``429``
carries ``Retry-After`` in seconds. Every request has a timeout; ``429``, ``5xx`` and network
failures are retried with exponential backoff (``Retry-After`` wins when present) — except
that a non-idempotent request is retried only when the server certainly did not act on it
(``429``, or a connection that was never established). Otherwise
:class:`RunPodUnavailableError` says the outcome is unknown and the caller decides (pod
creation looks the pod up by its unique name).

The API key comes from ``RUNPOD_API_KEY``; it is sent only in the ``Authorization`` header
and never appears in a message, a ``repr`` or a log line.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import httpx

from trainers.errors import TrainerError

API_KEY_ENV = "RUNPOD_API_KEY"
"""Environment variable holding the RunPod API key."""
API_URL_ENV = "BLOBKIT_RUNPOD_API_URL"
"""Environment variable overriding the API base URL (tests point it at 127.0.0.1)."""
DEFAULT_BASE_URL = "https://api.runpod.io"
"""RunPod REST API v2 host; paths carry the ``/v2`` prefix."""

Sleep = Callable[[float], None]


class RunPodError(TrainerError):
    """RunPod refused or failed a request; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.status))


class RunPodAuthError(RunPodError, PermissionError):
    """401/403: the API key is missing, wrong, or lacks access."""


class RunPodNotFoundError(RunPodError, LookupError):
    """404: the pod (or resource) does not exist (any more)."""


class RunPodRequestError(RunPodError, ValueError):
    """400/402/409/422: the request was rejected as it is; retrying the same request will not help."""


class RunPodUnavailableError(RunPodError, ConnectionError):
    """429/5xx/network trouble outlasted the retries, or a non-idempotent request's outcome is unknown."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry transient failures."""

    attempts: int = 6
    """Tries per request, the first included."""
    base_delay: float = 0.5
    """Backoff before the second try, in seconds; doubles each time."""
    max_delay: float = 30.0
    """Longest computed backoff, in seconds."""
    max_retry_after: float = 300.0
    """Longest wait accepted from a ``Retry-After`` header, in seconds."""

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based), without a server hint."""
        return min(self.max_delay, self.base_delay * (2**attempt))


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Parse a ``Retry-After`` header (delta seconds or an HTTP date); ``None`` when absent or invalid."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def _short(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def problem_detail(response: httpx.Response) -> str:
    """A one-line summary of an error response (RFC 9457 problem object when there is one)."""
    try:
        body = response.json()
    except ValueError:
        return _short(response.text) or response.reason_phrase
    if not isinstance(body, dict):
        return _short(body)
    parts = [str(body[key]) for key in ("title", "detail") if body.get(key)]
    errors = body.get("errors")
    if isinstance(errors, list) and errors:
        parts.append("; ".join(str(e) for e in errors[:5]))
    return _short(": ".join(parts)) or response.reason_phrase


def _never_sent(exc: httpx.TransportError) -> bool:
    """True when the request certainly did not reach the server (safe to repeat any method)."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


def send_with_retries(http: httpx.Client, method: str, url: str, *, policy: RetryPolicy, sleep: Sleep,
                      idempotent: bool, content_factory: Callable[[], Any] | None = None,
                      **kwargs: Any) -> httpx.Response:
    """Send one request, retrying transient failures per ``policy``; return the final response.

    ``content_factory`` rebuilds a streamed body for every try. 4xx responses other than 429
    are returned for the caller to interpret. Raises :class:`RunPodUnavailableError`.
    """
    where = f"{method} {url}"
    last, delay = "no attempt made", 0.0
    for attempt in range(policy.attempts):
        if attempt:
            sleep(delay)
        try:
            if content_factory is not None:
                kwargs["content"] = content_factory()
            response = http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            if not (idempotent or _never_sent(exc)):
                raise RunPodUnavailableError(f"{where}: the connection failed after the request was sent "
                                             f"({type(exc).__name__}: {_short(exc)}); it may or may not have "
                                             "taken effect") from None
            last, delay = f"{type(exc).__name__}: {_short(exc) or 'network error'}", policy.backoff(attempt)
            continue
        status = response.status_code
        if status != 429 and status < 500:
            return response
        last = f"HTTP {status}: {problem_detail(response)}"
        if status >= 500 and not idempotent:
            raise RunPodUnavailableError(f"{where}: {last}; the request may or may not have taken effect",
                                         status)
        hinted = retry_after_seconds(response.headers.get("Retry-After"), time.time())
        delay = policy.backoff(attempt) if hinted is None else min(hinted, policy.max_retry_after)
    raise RunPodUnavailableError(f"{where}: gave up after {policy.attempts} attempts ({last})")


def raise_for_problem(response: httpx.Response, what: str) -> None:
    """Turn a 4xx/5xx response into the matching :class:`RunPodError`."""
    status = response.status_code
    if status < 400:
        return
    message = f"RunPod refused to {what}: HTTP {status}: {problem_detail(response)}"
    if status in (401, 403):
        raise RunPodAuthError(message + " (check RUNPOD_API_KEY and its permissions)", status)
    if status == 404:
        raise RunPodNotFoundError(message, status)
    if status == 429 or status >= 500:
        raise RunPodUnavailableError(message, status)
    raise RunPodRequestError(message, status)


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise RunPodError(f"RunPod answered {what} with something that is not JSON", response.status_code) from None
    if not isinstance(body, dict):
        raise RunPodError(f"RunPod answered {what} with JSON that is not an object", response.status_code)
    return body


class RunPodClient:
    """RunPod REST v2 client: pods, their logs and the GPU catalog. Use as a context manager."""

    def __init__(self, api_key: str, base_url: str = DEFAULT_BASE_URL, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, sleep: Sleep = time.sleep) -> None:
        if not api_key:
            raise RunPodAuthError(f"no RunPod API key: set {API_KEY_ENV}")
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout),
                                  headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"})

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **kwargs: Any) -> RunPodClient:
        """A client with the key from ``RUNPOD_API_KEY`` and the base URL from ``BLOBKIT_RUNPOD_API_URL``."""
        return cls(environ.get(API_KEY_ENV, ""), environ.get(API_URL_ENV) or DEFAULT_BASE_URL, **kwargs)

    def __repr__(self) -> str:
        return f"RunPodClient(base_url={self.base_url!r})"

    def __enter__(self) -> RunPodClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _call(self, method: str, path: str, what: str, *, idempotent: bool = True,
              **kwargs: Any) -> httpx.Response:
        response = send_with_retries(self._http, method, path, policy=self.retry, sleep=self._sleep,
                                     idempotent=idempotent, **kwargs)
        raise_for_problem(response, what)
        return response

    def create_pod(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v2/pods``; returns the new pod (status PROVISIONING). Outcome unknown → RunPodUnavailableError."""
        response = self._call("POST", "/v2/pods", "create a pod", idempotent=False, json=dict(body))
        return _json_object(response, "create pod")

    def get_pod(self, pod_id: str) -> dict[str, Any]:
        """``GET /v2/pods/{id}``; raises :class:`RunPodNotFoundError` once the pod is gone."""
        return _json_object(self._call("GET", f"/v2/pods/{pod_id}", f"get pod {pod_id}"), "get pod")

    def list_pods(self) -> list[dict[str, Any]]:
        """``GET /v2/pods``: every pod of the account."""
        body = _json_object(self._call("GET", "/v2/pods", "list pods"), "list pods")
        pods = body.get("pods")
        if not isinstance(pods, list):
            raise RunPodError("RunPod's pod list has no 'pods' array")
        return [pod for pod in pods if isinstance(pod, dict)]

    def terminate_pod(self, pod_id: str) -> bool:
        """``DELETE /v2/pods/{id}``; True when this call terminated it, False when it was already gone."""
        try:
            self._call("DELETE", f"/v2/pods/{pod_id}", f"terminate pod {pod_id}")
        except RunPodNotFoundError:
            return False
        return True

    def gpu_types(self) -> list[dict[str, Any]]:
        """``GET /v2/catalog/gpus``: GPU types with per-GPU hourly list prices."""
        body = _json_object(self._call("GET", "/v2/catalog/gpus", "list GPU types"), "list GPU types")
        gpus = body.get("gpus")
        if not isinstance(gpus, list):
            raise RunPodError("RunPod's GPU catalog has no 'gpus' array")
        return [gpu for gpu in gpus if isinstance(gpu, dict)]

    def pod_logs(self, pod_id: str, *, tail: int = 100, max_seconds: float = 5.0) -> list[str]:
        """Up to ``tail`` recent log lines of a pod (``GET /v2/pods/{id}/logs``, server-sent events).

        The stream of a live pod never ends, so reading stops after ``max_seconds`` or when the
        server is idle that long; whatever arrived by then is returned. Not retried.
        """
        lines: list[str] = []
        deadline = time.monotonic() + max_seconds
        timeout = httpx.Timeout(self.timeout, read=max(0.05, max_seconds))
        try:
            with self._http.stream("GET", f"/v2/pods/{pod_id}/logs", params={"tail": tail},
                                   headers={"Accept": "text/event-stream"}, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for_problem(response, f"stream logs of pod {pod_id}")
                for line in _sse_lines(response.iter_lines()):
                    lines.append(line)
                    if time.monotonic() > deadline:
                        break
        except httpx.TimeoutException:
            pass
        except httpx.TransportError as exc:
            raise RunPodUnavailableError(f"logs of pod {pod_id}: {type(exc).__name__}: {_short(exc)}") from None
        return lines[-tail:]


def _sse_lines(raw_lines: Iterator[str]) -> Iterator[str]:
    """The ``line`` of every ``data:`` event in a server-sent event stream."""
    for raw in raw_lines:
        if not raw.startswith("data:"):
            continue
        payload = raw[5:].strip()
        try:
            event = json.loads(payload)
        except ValueError:
            yield payload
            continue
        yield str(event.get("line", "")) if isinstance(event, dict) else str(event)
