"""The Train panel's pages through the ASGI app (FastAPI's TestClient over a real store): sign-in and its
cookie, CSRF on every form, every page behind a session, another workspace's ids as "not found", the 1 MiB
upload limit shown as a message, and the library records the pages show."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blobkit.service import ServiceStore, create_app, environments, jobs
from blobkit.service.attempts import create_worker, hello
from blobkit.service.environments import add_cluster_plane
from blobkit.service.panel.sessions import token_digest
from blobkit.service.records import TrainingJobRequest, WorkerHello

ROOT = Path(__file__).resolve().parents[1]
RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
SMALL = {"base_model": "tiny", "epochs": "1", "steps": "1", "train_cases_per_task": "2", "eval_cases_per_task": "2"}


class Panel:
    """A store with two workspaces: acme holds the retail world and a queued tiny job; globex holds nothing."""

    def __init__(self, root: Path) -> None:
        self.store = ServiceStore(root)
        self.app = create_app(self.store)
        self.key, self.other_key = self.store.create_key("acme"), self.store.create_key("globex")
        self.env = environments.add_world(self.store, "acme", RETAIL.read_bytes())
        self.env_id = self.env.env_id
        request = TrainingJobRequest.model_validate({**SMALL, "launch": "worker"})
        self.job_id = jobs.create_job(self.store, "acme", self.env_id, request).job_id
        self.plane_id = add_cluster_plane(self.store, "acme", "providers").env_id

    def client(self) -> TestClient:
        return TestClient(self.app, follow_redirects=False)

    def signed_in(self, key: str) -> tuple[TestClient, str]:
        """A client with a session of ``key``, and the session's CSRF token."""
        client = self.client()
        response = sign_in(client, key)
        assert response.status_code == 303, response.text
        return client, csrf_of(client.get("/").text)

    def rows(self, table: str) -> int:
        return int(self.store.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def sign_in(client: TestClient, key: str) -> Any:
    form = client.get("/")
    return client.post("/sign-in", data={"csrf": csrf_of(form.text), "api_key": key, "next": "/"})


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Panel]:
    made = Panel(tmp_path_factory.mktemp("panel") / "store")
    yield made
    made.store.close()


def page_urls(panel: Panel) -> list[str]:
    """Every GET page route, on acme's environment and job."""
    env, job = f"/twin/{panel.env_id}", f"/twin/{panel.env_id}/jobs/{panel.job_id}"
    return [env, f"{env}/workers/status", job, f"{job}/live", f"{job}/kit", f"{job}/artifacts/eval.json",
            f"{job}/cases/rl/case_1"]


def post_urls(panel: Panel) -> list[str]:
    """Every POST page route that changes something, on acme's environment and job."""
    env, job = f"/twin/{panel.env_id}", f"/twin/{panel.env_id}/jobs/{panel.job_id}"
    return ["/environments", f"{env}/workers", f"{env}/jobs", f"{env}/kits", f"{job}/cancel", "/sign-out"]


# --------------------------------------------------------------------------- sign-in and the session cookie


def test_signing_in_sets_an_httponly_samesite_strict_session_cookie_and_the_store_keeps_only_its_hash(
        panel: Panel) -> None:
    client = panel.client()
    response = sign_in(client, panel.key)
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = next(v for k, v in response.headers.multi_items() if k == "set-cookie" and "blobkit_session=" in v)
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    token = cookie.split(";")[0].split("=", 1)[1]
    assert panel.key not in cookie and panel.key[4:] not in token
    stored = panel.store.conn.execute("SELECT digest FROM panel_sessions").fetchall()
    assert (token_digest(token),) in stored and all(token not in row[0] for row in stored)
    page = client.get("/")
    assert page.status_code == 200 and "Upload a world" in page.text and panel.key not in page.text


def test_sign_in_refuses_a_form_without_its_token_a_wrong_key_and_a_worker_token(panel: Panel) -> None:
    before = panel.rows("panel_sessions")
    client = panel.client()
    client.get("/")
    no_token = client.post("/sign-in", data={"api_key": panel.key})
    assert no_token.status_code == 403 and "reload the page and sign in again" in no_token.text
    wrong = sign_in(client, "tml-" + "0" * 64)
    assert wrong.status_code == 401 and "not valid" in wrong.text and "blobkit_session" not in str(wrong.headers)
    token = create_worker(panel.store, "acme", "w", "http://x").token
    worker = sign_in(client, token)
    assert worker.status_code == 403 and "worker token" in worker.text
    assert panel.rows("panel_sessions") == before


def test_every_page_route_without_a_session_asks_to_sign_in(panel: Panel) -> None:
    client = panel.client()
    for url in page_urls(panel):
        response = client.get(url)
        assert response.status_code == 303 and response.headers["location"].startswith("/?next="), url
        polled = client.get(url, headers={"X-Panel-Fragment": "1"})
        assert polled.status_code == 401 and "sign in again" in polled.text, url
    for url in post_urls(panel):
        assert client.post(url, data={"csrf": "x"}).status_code == 401, url


def test_signing_out_ends_the_session(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    assert client.post("/sign-out", data={"csrf": csrf}).status_code == 303
    assert client.get(f"/twin/{panel.env_id}").status_code == 303


# --------------------------------------------------------------------------- CSRF


def test_every_form_needs_the_sessions_csrf_token_and_nothing_is_done_without_it(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    counts = {table: panel.rows(table) for table in ("environments", "training_jobs", "workers")}
    for url in post_urls(panel):
        for token in (None, "not-the-token"):
            data = {**SMALL, **({"csrf": token} if token else {})}
            files = {"world": ("world.json", RETAIL.read_bytes(), "application/json")} if url == "/environments" \
                else None
            response = client.post(url, data=data, files=files)
            assert response.status_code == 403 and "security token" in response.text, (url, response.text[:300])
    assert {table: panel.rows(table) for table in counts} == counts
    assert jobs.get_job(panel.store, "acme", panel.env_id, panel.job_id).status == "queued"
    assert client.get("/").status_code == 200  # still signed in: sign-out needed the token too
    assert client.post(f"/twin/{panel.env_id}/workers", data={"csrf": csrf, "name": "ok"}).status_code == 200


# --------------------------------------------------------------------------- workspaces


def test_another_workspaces_environment_and_job_urls_show_not_found(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.other_key)
    for url in page_urls(panel):
        response = client.get(url)
        assert response.status_code == 404 and "Not found" in response.text, url
        assert "Timberline" not in response.text, url
    counts = {table: panel.rows(table) for table in ("training_jobs", "workers")}
    for url in post_urls(panel)[1:-1]:
        response = client.post(url, data={**SMALL, "csrf": csrf})
        assert response.status_code == 404 and "Not found" in response.text, url
    assert {table: panel.rows(table) for table in counts} == counts
    assert jobs.get_job(panel.store, "acme", panel.env_id, panel.job_id).status == "queued"
    listed = client.get("/")
    assert panel.env_id not in listed.text and "None yet" in listed.text


# --------------------------------------------------------------------------- environments


def test_an_upload_over_1_mib_shows_the_services_message_and_registers_nothing(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    before = panel.rows("environments")
    big = b"{" + b" " * environments.MAX_UPLOAD_BYTES + b"}"
    response = client.post("/environments", data={"csrf": csrf}, files={"world": ("world.json", big, "text/plain")})
    assert response.status_code == 413, response.text[:300]
    assert "blobkit company train --source ./world.json" in response.text and "Traceback" not in response.text
    just_over = b" " * (environments.MAX_UPLOAD_BYTES + 1)
    response = client.post("/environments", data={"csrf": csrf},
                           files={"world": ("world.json", just_over, "text/plain")})
    assert response.status_code == 413 and "1 MiB" in response.text
    assert panel.rows("environments") == before


def test_an_invalid_world_is_shown_as_a_message(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    before = panel.rows("environments")
    response = client.post("/environments", data={"csrf": csrf},
                           files={"world": ("world.json", b'{"identity": {}}', "application/json")})
    assert response.status_code == 422 and "The world was not registered" in response.text
    assert 'role="alert"' in response.text and "Traceback" not in response.text
    assert panel.rows("environments") == before


def test_the_environment_page_shows_identity_tools_procedures_anchors_and_the_inspect_verdict(panel: Panel) -> None:
    client, _ = panel.signed_in(panel.key)
    page = client.get(f"/twin/{panel.env_id}").text
    env = panel.env
    assert env.world is not None and env.trainability is not None and env.procedures is not None
    assert env.world.id in page and env.trainability.verdict in page
    assert all(tool.name in page for tool in env.tools)
    assert env.anchors and all(f"<code>{a.table}</code>: {a.rows} rows" in page for a in env.anchors)
    assert f"<code>{env.procedures.identify}</code>" in page
    assert 'id="train"' in page and "Create worker connection" in page and "Build kit" in page
    headers = client.get(f"/twin/{panel.env_id}").headers
    assert "script-src 'self'" in headers["content-security-policy"] and headers["cache-control"] == "no-store"


def test_a_cluster_plane_shows_why_it_cannot_be_trained(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    assert "holds no exportable" in client.get(f"/twin/{panel.plane_id}").text
    response = client.post(f"/twin/{panel.plane_id}/jobs", data={**SMALL, "csrf": csrf})
    assert response.status_code == 409 and "cluster-plane" in response.text


# --------------------------------------------------------------------------- the Train panel


def test_a_worker_connection_shows_its_command_once_and_the_panel_lists_the_bases_it_advertises(
        panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    shown = client.post(f"/twin/{panel.env_id}/workers", data={"csrf": csrf, "name": "gpu-box"})
    command = re.search(r'<pre id="worker-command"[^>]*>([^<]+)</pre>', shown.text)
    assert command and "blobkit worker --server http://testserver --token tml-" in command.group(1)
    token = command.group(1).split("--token ")[1].split()[0]
    assert token not in client.get(f"/twin/{panel.env_id}").text  # shown once
    principal = panel.store.resolve_key(token)
    hello(panel.store, principal, WorkerHello(bases=["tiny"], name="gpu-box"))
    status = client.get(f"/twin/{panel.env_id}/workers/status", headers={"X-Panel-Fragment": "1"}).text
    assert "gpu-box" in status and 'data-bases="tiny"' in status
    assert '<option value="tiny"' in client.get(f"/twin/{panel.env_id}").text


def test_train_and_verify_queues_a_worker_job_and_shows_bad_fields_as_messages(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    before = panel.rows("training_jobs")
    bad = client.post(f"/twin/{panel.env_id}/jobs", data={**SMALL, "epochs": "-1", "csrf": csrf})
    assert bad.status_code == 422 and "epochs" in bad.text and "Not started" in bad.text
    unknown = client.post(f"/twin/{panel.env_id}/jobs", data={**SMALL, "base_model": "nope/nope", "csrf": csrf})
    assert unknown.status_code == 400 and "Qwen/Qwen3-8B" in unknown.text
    assert panel.rows("training_jobs") == before
    made = client.post(f"/twin/{panel.env_id}/jobs", data={**SMALL, "csrf": csrf})
    assert made.status_code == 303
    assert re.fullmatch(rf"/twin/{panel.env_id}/jobs/tj_[0-9a-f]+", made.headers["location"])
    job_id = made.headers["location"].rsplit("/", 1)[1]
    job = jobs.get_job(panel.store, "acme", panel.env_id, job_id)
    assert job.status == "queued" and job.recipe is not None and job.recipe.config.sft.epochs == 1
    page = client.get(made.headers["location"]).text
    assert 'data-terminal="false"' in page and "Queued: waiting for a connected worker" in page
    cancelled = client.post(f"{made.headers['location']}/cancel", data={"csrf": csrf})
    assert cancelled.status_code == 303
    assert jobs.get_job(panel.store, "acme", panel.env_id, job_id).status == "cancelled"
    assert 'data-terminal="true"' in client.get(f"{made.headers['location']}/live").text


def test_build_kit_shows_the_commands_and_a_download_whose_sha256_matches(panel: Panel) -> None:
    client, csrf = panel.signed_in(panel.key)
    made = client.post(f"/twin/{panel.env_id}/kits", data={"csrf": csrf, "method": "sft", "epochs": "2"})
    assert made.status_code == 303, made.text[:300]
    page = client.get(made.headers["location"]).text
    job = jobs.get_job(panel.store, "acme", panel.env_id, made.headers["location"].rsplit("/", 1)[1])
    assert job.status == "kit_ready" and job.commands is not None
    for command in (job.commands.dry_run, job.commands.train, job.commands.runpod):
        assert command.replace("&", "&amp;") in page
    assert job.kit.sha256 in page and page.count("data-copy=") == 3
    download = client.get(made.headers["location"] + "/kit")
    assert hashlib.sha256(download.content).hexdigest() == job.kit.sha256 == download.headers["x-content-sha256"]


# --------------------------------------------------------------------------- held-out cases


def _reference_episode(kit: Any) -> dict[str, Any]:
    """A held-out case run by a scripted agent replaying the reference trajectory, as eval_cases_*.json holds it."""
    from blobkit.adversaries import trajectories
    from trainers.evaluation import run_episode
    from trainers.formats import FORMATS
    from trainers.turns import PerTurn

    line = next(trajectories(kit, "reference", ("eval",)))
    texts = iter("".join(f"<tool_call>\n{json.dumps(c['function'])}\n</tool_call>" for c in m.get("tool_calls") or [])
                 or m["content"] for m in line["messages"] if m["role"] == "assistant")
    case = next(c for c in kit.cases("eval") if c.case_id == line["case_id"])
    runtime = kit.world().runtime()
    try:
        agent = PerTurn(lambda messages, tools: next(texts, "Done."), FORMATS["hermes"])
        return dict(json.loads(json.dumps(run_episode(agent, runtime, case, 12).to_json())))
    finally:
        runtime.close()


def test_a_per_case_record_as_the_evaluation_writes_it_reads_as_a_whole_conversation(retail_kit: Any) -> None:
    """The panel's typed case record accepts what :meth:`EpisodeResult.to_json` writes (drift fails here), and it
    holds the customer, the agent's calls with their arguments, the observations and the verdict."""
    from blobkit.service.panel.cases import CaseResult

    record = CaseResult.model_validate(_reference_episode(retail_kit))
    roles = [m.role for m in record.messages]
    assert roles[:2] == ["system", "user"] and "assistant" in roles and "tool" in roles
    calls = [call for m in record.messages for call in m.tool_calls or []]
    assert calls and [c.function.name for c in calls] == [event.tool for event in record.trace]
    assert record.verdict.outcome == "pass" and record.passed


def test_a_case_uploaded_as_evidence_opens_as_a_readable_conversation_for_its_workspace_only(
        panel: Panel, retail_kit: Any) -> None:
    """Through the worker API: claim the job, upload eval_cases_rl.json (a reference episode's record), and the
    case page shows the customer, the agent's tool calls with their arguments, the observations and the verdict."""
    made = create_worker(panel.store, "acme", "w", "http://testserver")
    worker = TestClient(panel.app, headers={"X-API-Key": made.token})
    claimed = worker.post("/api/v1/workers/claim", json={"bases": ["tiny"]})
    assert claimed.status_code == 200, claimed.text
    attempt_id, job_id = claimed.json()["attempt"]["attempt_id"], claimed.json()["job_id"]
    episode = _reference_episode(retail_kit)
    body = json.dumps([episode]).encode()
    uploaded = worker.put(f"/api/v1/attempts/{attempt_id}/artifacts/eval_cases_rl.json", content=body,
                          headers={"X-Content-SHA256": hashlib.sha256(body).hexdigest()})
    assert uploaded.status_code == 201, uploaded.text
    client, _ = panel.signed_in(panel.key)
    url = f"/twin/{panel.env_id}/jobs/{job_id}/cases/rl/{episode['case_id']}"
    page = client.get(url)
    assert page.status_code == 200, page.text[:500]
    assert page.text.count('class="msg user"') >= 1 and page.text.count('class="msg agent"') >= 1
    first_call = next(m for m in episode["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    assert f"Tool call <code>{first_call['name']}</code>" in page.text
    for name, value in first_call["arguments"].items():
        assert f"&#34;{name}&#34;: " in page.text and str(value) in page.text
    assert page.text.count('class="msg tool"') == len(episode["trace"]) > 0
    assert 'id="case-verdict">pass<' in page.text
    other, _ = panel.signed_in(panel.other_key)
    assert other.get(url).status_code == 404
    assert client.get(f"/twin/{panel.env_id}/jobs/{job_id}/cases/rl/no-such-case").status_code == 404


def test_the_rate_bars_print_the_fraction_itself_not_the_records_4_place_rate_rounded_again() -> None:
    from blobkit.company.records import JobResults, Rate
    from blobkit.service.panel.views import rate_bars
    from blobkit.service.records import TrainingJob
    from trainers.intervals import wilson_interval

    # 14/17 = 0.823529…: the record keeps 0.8235, which printed again at one place of a percent reads 82.3 %.
    sft = Rate(pass_rate=0.8235, cases=17, passed=14, entities=9, interval_95=wilson_interval(14, 17),
               measured_by="sft")
    job = TrainingJob.model_construct(results=JobResults(complete=True, sft=sft))
    (bar,) = rate_bars(job)
    assert bar.label == "SFT" and bar.percent == "82 %"
    assert bar.text.startswith("SFT: 82.4 % (14/17 held-out cases, 9 independent entities; 95 % interval 59.0–93.8 %)")
