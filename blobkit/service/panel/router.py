"""The Train panel's pages at ``/`` and ``/twin/{env_id}`` (the seed's console path; the panel is ``#train``).

Routes only translate, like the JSON API's: each reads the session (:mod:`.sessions`), checks a posted form's
CSRF token (:mod:`.forms`), calls the same library function the API route calls (:mod:`blobkit.service.
environments`, :mod:`~blobkit.service.jobs`, :mod:`~blobkit.service.attempts`, :mod:`~blobkit.service.catalog`)
and renders a template. Another workspace's environment or job reads as not found, as in the API. The pages are
left out of the OpenAPI document (they are not an API).
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from blobkit.errors import BlobkitError, NotFoundError, SourceError

from .. import attempts, environments, jobs, recipes
from ..attempts import check_artifact_name
from ..auth import get_store
from ..catalog import TINY, catalog_ids, models_list
from ..http_errors import status_of
from ..records import TrainingJobRequest, WorkerConnection
from ..store import ServiceStore
from ..transfer import file_response
from . import cases, views
from .forms import FORM_BYTES, CsrfError, Posted, check_csrf, page_session, posted, read_form
from .pages import SECURITY_HEADERS, STATIC, PageRoute, render
from .sessions import (
    SESSION_COOKIE,
    SESSION_S,
    SIGNIN_COOKIE,
    Session,
    SignedOut,
    same_token,
    session_of,
    sign_in,
    sign_out,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)
STATIC_FILES = {"panel.css": "text/css", "panel.js": "text/javascript"}
WORKER_FIELDS = ("base_model", "epochs", "steps", "group_size", "max_minutes", "max_model_calls", "seed",
                 "train_cases_per_task", "eval_cases_per_task")
KIT_FIELDS = ("base_model", "method", "target", "lora_rank", "steps", "epochs", "seed")
WORKER_DEFAULTS = {"epochs": recipes.WORKER_EPOCHS, "steps": recipes.WORKER_STEPS, "group_size": recipes.WORKER_GROUP,
                   "max_minutes": f"{recipes.WORKER_MINUTES:g}", "max_model_calls": recipes.WORKER_MODEL_CALLS,
                   "seed": 42}
KIT_DEFAULTS = {"base_model": "Qwen/Qwen3-8B", "method": "grpo", "target": "local-mlx", "lora_rank": 16,
                "steps": recipes.KIT_STEPS, "epochs": recipes.KIT_EPOCHS, "seed": 42}


def _redirect(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303, headers=SECURITY_HEADERS)


def _safe_next(target: str | None) -> str:
    """A same-site path to go to after signing in (anything else goes to ``/``)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


# --------------------------------------------------------------------------- static files, sign-in


@router.get("/static/{name}")
def static(name: str) -> FileResponse:
    """The panel's stylesheet and script (public: they hold no data)."""
    if name not in STATIC_FILES:
        raise NotFoundError(f"no static file {name!r}")
    return FileResponse(STATIC / name, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache",
                                                                                "X-Content-Type-Options": "nosniff"})


def _sign_in_page(request: Request, message: str | None = None, status_code: int = 200,
                  target: str | None = None) -> Response:
    token = secrets.token_urlsafe(32)
    response = render(request, "signin.html", {"csrf": token, "message": message, "session": None,
                                                "next": _safe_next(target or request.query_params.get("next"))},
                      status_code=status_code)
    _cookie(response, request, SIGNIN_COOKIE, token, 3600)
    return response


@router.get("/")
def home(request: Request, store: ServiceStore = Depends(get_store)) -> Response:
    """Signed in: the workspace's environments and the upload form. Signed out: the sign-in form."""
    try:
        session = session_of(store, request.cookies.get(SESSION_COOKIE))
    except SignedOut:
        return _sign_in_page(request)
    return _environments_page(request, store, session)


@router.post("/sign-in")
async def sign_in_form(request: Request, store: ServiceStore = Depends(get_store)) -> Response:
    """Exchange an API key for a session cookie; the key is never put in a URL, a cookie or a page."""
    fields, _ = await read_form(request, FORM_BYTES, "paste only the API key")
    target = fields.get("next")
    if not same_token(request.cookies.get(SIGNIN_COOKIE), fields.get("csrf")):
        raise CsrfError("this sign-in form is out of date (nothing was done): reload the page and sign in again")
    try:
        token, _ = await run_in_threadpool(sign_in, store, fields.get("api_key", ""))
    except BlobkitError as exc:
        return _sign_in_page(request, f"{exc}", status_of(exc), target)
    response = _redirect(_safe_next(target))
    _cookie(response, request, SESSION_COOKIE, token, SESSION_S)
    response.delete_cookie(SIGNIN_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.post("/sign-out")
def sign_out_form(request: Request, form: Posted = Depends(posted),
                  store: ServiceStore = Depends(get_store)) -> Response:
    """End the session."""
    sign_out(store, request.cookies.get(SESSION_COOKIE))
    response = _redirect("/")
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


# --------------------------------------------------------------------------- environments


def _environments_page(request: Request, store: ServiceStore, session: Session, message: str | None = None,
                       status_code: int = 200) -> Response:
    listed = environments.list_environments(store, session.principal.workspace)
    return render(request, "environments.html", {"session": session, "environments": listed.environments,
                                                 "message": message, "max_bytes": environments.MAX_UPLOAD_BYTES},
                  status_code=status_code)


@router.post("/environments")
async def upload_world(request: Request, session: Session = Depends(page_session),
                       store: ServiceStore = Depends(get_store)) -> Response:
    """Register an uploaded world (at most 1 MiB), as ``POST /api/v1/twin/environments`` does."""
    try:
        fields, files = await read_form(request, environments.MAX_UPLOAD_BYTES + FORM_BYTES,
                                        environments.TOO_LARGE_HINT, file_limit=environments.MAX_UPLOAD_BYTES)
        check_csrf(session, request, fields)
        if "world" not in files or not files["world"][1]:
            raise SourceError("choose a world file (world.json, or a packaged world as .tar.zst) to upload")
        env = await run_in_threadpool(environments.add_world, store, session.principal.workspace, files["world"][1])
    except CsrfError:
        raise
    except BlobkitError as exc:
        return _environments_page(request, store, session, f"The world was not registered: {exc}", status_of(exc))
    return _redirect(f"/twin/{env.env_id}#train")


def _environment_page(request: Request, store: ServiceStore, session: Session, env_id: str, *,
                      connection: WorkerConnection | None = None, message: str | None = None,
                      values: dict[str, str] | None = None, status_code: int = 200) -> Response:
    workspace = session.principal.workspace
    env = environments.get_environment(store, workspace, env_id)
    listed = jobs.list_jobs(store, workspace, env_id) if env.kind == "world" else None
    models = models_list(store, workspace)
    worker_values = {**{k: str(v) for k, v in WORKER_DEFAULTS.items()}, **(values or {})}
    return render(request, "environment.html", {
        "session": session, "env": env, "jobs": [] if listed is None else list(reversed(listed.jobs)),
        "models": models, "bases": _advertised(models), "connection": connection, "message": message,
        "worker_values": worker_values, "kit_values": {k: str(v) for k, v in KIT_DEFAULTS.items()},
        "kit_bases": [base for base in catalog_ids() if base != TINY]}, status_code=status_code)


def _advertised(models: Any) -> list[str]:
    return sorted({base for worker in models.workers for base in worker.bases})


@router.get("/twin/{env_id}")
def environment(env_id: str, request: Request, session: Session = Depends(page_session),
                store: ServiceStore = Depends(get_store)) -> Response:
    """The environment: identity, tools, procedures, anchors, trainability; its Train panel (``#train``) and jobs."""
    return _environment_page(request, store, session, env_id)


@router.get("/twin/{env_id}/workers/status")
def workers_status(env_id: str, request: Request, session: Session = Depends(page_session),
                   store: ServiceStore = Depends(get_store)) -> Response:
    """The Train panel's connected workers and the bases they advertise (polled by the page)."""
    environments.get_environment(store, session.principal.workspace, env_id)
    models = models_list(store, session.principal.workspace)
    return render(request, "_workers.html", {"models": models, "bases": _advertised(models)})


@router.post("/twin/{env_id}/workers")
def create_worker_connection(env_id: str, request: Request, form: Posted = Depends(posted),
                             store: ServiceStore = Depends(get_store)) -> Response:
    """A worker connection (``POST /api/v1/workers``): the page shows its command with the fresh token, once."""
    workspace = form.session.principal.workspace
    environments.get_environment(store, workspace, env_id)
    name = form.text("name") or "worker"
    connection = attempts.create_worker(store, workspace, name, str(request.base_url).rstrip("/"))
    return _environment_page(request, store, form.session, env_id, connection=connection)


def _request(form: Posted, names: tuple[str, ...], launch: str) -> TrainingJobRequest:
    values: dict[str, Any] = {name: form.text(name) for name in names if form.text(name)}
    return TrainingJobRequest.model_validate({**values, "launch": launch})


async def _create(request: Request, store: ServiceStore, form: Posted, env_id: str, names: tuple[str, ...],
                  launch: str) -> Response:
    try:
        job_request = _request(form, names, launch)
        job = await run_in_threadpool(jobs.create_job, store, form.session.principal.workspace, env_id, job_request)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return _environment_page(request, store, form.session, env_id, values=dict(form.fields), status_code=422,
                                 message=f"Not started: {where}: {first['msg']}; correct it and try again")
    except NotFoundError:
        raise
    except BlobkitError as exc:
        return _environment_page(request, store, form.session, env_id, values=dict(form.fields),
                                 message=f"Not started: {exc}", status_code=status_of(exc))
    return _redirect(f"/twin/{env_id}/jobs/{job.job_id}")


@router.post("/twin/{env_id}/jobs")
async def train_and_verify(env_id: str, request: Request, form: Posted = Depends(posted),
                           store: ServiceStore = Depends(get_store)) -> Response:
    """Train and verify: a worker job (``launch: worker``) with the chosen base and budgets."""
    return await _create(request, store, form, env_id, WORKER_FIELDS, "worker")


@router.post("/twin/{env_id}/kits")
async def build_kit(env_id: str, request: Request, form: Posted = Depends(posted),
                    store: ServiceStore = Depends(get_store)) -> Response:
    """Build kit: the manual path (``launch: manual``): a downloadable kit and its ``blobkit train`` commands."""
    return await _create(request, store, form, env_id, KIT_FIELDS, "manual")


# --------------------------------------------------------------------------- jobs


def _job_context(store: ServiceStore, session: Session, env_id: str, job_id: str) -> dict[str, Any]:
    workspace = session.principal.workspace
    env = environments.get_environment(store, workspace, env_id)
    job = jobs.get_job(store, workspace, env_id, job_id)
    done = job.status in views.TERMINAL
    rows = cases.case_rows(store, workspace, job) if done and job.launch == "worker" else []
    return {"session": session, "env": env, "job": job, "terminal": done, "charts": views.charts(job),
            "bars": views.rate_bars(job), "replay_words": views.replay_words(job),
            "case_rows": rows, "case_models": cases.models_in(rows),
            "artifacts": {a.name: a for a in job.artifacts}, "model_names": cases.MODEL_NAMES,
            "events": [e for a in job.attempts for e in a.events][-40:]}


@router.get("/twin/{env_id}/jobs/{job_id}")
def job_page(env_id: str, job_id: str, request: Request, session: Session = Depends(page_session),
             store: ServiceStore = Depends(get_store)) -> Response:
    """A job: live progress (polled), its budgets, attempts, results, held-out cases and evidence; Cancel."""
    return render(request, "job.html", _job_context(store, session, env_id, job_id))


@router.get("/twin/{env_id}/jobs/{job_id}/live")
def job_live(env_id: str, job_id: str, request: Request, session: Session = Depends(page_session),
             store: ServiceStore = Depends(get_store)) -> Response:
    """The part of the job page that changes (the page's script polls it and swaps it in)."""
    return render(request, "_live.html", _job_context(store, session, env_id, job_id))


@router.post("/twin/{env_id}/jobs/{job_id}/cancel")
def cancel(env_id: str, job_id: str, form: Posted = Depends(posted),
           store: ServiceStore = Depends(get_store)) -> Response:
    """Cancel (``DELETE`` of the API): at once when no worker runs it, else at the worker's next safe point."""
    jobs.cancel_job(store, form.session.principal.workspace, env_id, job_id, reason="cancelled from the Train panel")
    return _redirect(f"/twin/{env_id}/jobs/{job_id}")


@router.get("/twin/{env_id}/jobs/{job_id}/kit")
def download_kit(env_id: str, job_id: str, session: Session = Depends(page_session),
                 store: ServiceStore = Depends(get_store)) -> FileResponse:
    """The kit archive, with ``X-Content-SHA256``."""
    path, kit = jobs.kit_blob(store, session.principal.workspace, env_id, job_id)
    return file_response(path, kit.sha256, kit.name, "application/zstd")


@router.get("/twin/{env_id}/jobs/{job_id}/artifacts/{name}")
def download_artifact(env_id: str, job_id: str, name: str, session: Session = Depends(page_session),
                      store: ServiceStore = Depends(get_store)) -> FileResponse:
    """One file of evidence, with ``X-Content-SHA256`` (``training.png`` is shown on the job page from here)."""
    path, sha256 = jobs.artifact_blob(store, session.principal.workspace, env_id, job_id, check_artifact_name(name))
    media = "image/png" if name.endswith(".png") else "application/octet-stream"
    response = file_response(path, sha256, name, media)
    if media == "image/png":
        response.headers["Content-Disposition"] = f'inline; filename="{name}"'
    return response


@router.get("/twin/{env_id}/jobs/{job_id}/cases/{model}/{case_id}")
def case_page(env_id: str, job_id: str, model: str, case_id: str, request: Request,
              session: Session = Depends(page_session), store: ServiceStore = Depends(get_store)) -> Response:
    """One held-out case as one model ran it: the whole conversation, the tool calls and the verifier's verdict."""
    workspace = session.principal.workspace
    env = environments.get_environment(store, workspace, env_id)
    job = jobs.get_job(store, workspace, env_id, job_id)
    case = cases.one_case(store, workspace, job, model, case_id)
    return render(request, "case.html", {"session": session, "env": env, "job": job, "case": case, "model": model,
                                         "model_name": cases.MODEL_NAMES[model], "pretty": cases.pretty,
                                         "file": cases.MODEL_FILES[model]})

