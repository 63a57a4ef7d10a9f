"""The Train panel in a real browser: headless Chromium (Debian's) driven by Playwright against ``blobkit serve``
on 127.0.0.1, with a real ``blobkit worker`` process started from the command the panel prints.

Slow: the end-to-end walk trains the tiny model on the retail example (1 SFT epoch, 1 GRPO step, 2+2 cases per
task; a few minutes on two shared CPU cores). Screenshots of every step are kept under out/panel-artifacts/.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from panel_support import Shots, artifacts_dir, chromium
from service_support import Server, create_key, env, start_server

ROOT = Path(__file__).resolve().parents[1]
RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
TRAIN_S = 1500
SMALL = {"epochs": "1", "steps": "1", "train_cases_per_task": "2", "eval_cases_per_task": "2"}
BROWSER_WAIT_MS = 120_000
"""How long a page action waits (an upload inspects the world on the server; on a loaded 2-core machine that
took over Playwright's default 30 s)."""

pytestmark = pytest.mark.slow
UNLABELLED = """Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea, button'))
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
  .map(el => el.outerHTML)"""
"""Form controls without a label, an aria-label or text (none may be)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as made:
        yield made


def _sign_in(page: Any, url: str, key: str) -> None:
    """Sign in from the keyboard: focus the key field, type the key, press Enter."""
    page.goto(url + "/")
    _sign_in_to(page, key)
    page.wait_for_selector("text=Upload a world")


def _upload(page: Any, path: Path) -> str:
    page.set_input_files("#world", str(path))
    page.click("text=Upload and inspect")
    page.wait_for_url(re.compile(r"/twin/env_[0-9a-f]+"), timeout=120_000)
    return str(page.url.split("/twin/")[1].split("#")[0])


def _fill_small_job(page: Any) -> None:
    page.click("summary:has-text('Case counts')")
    for name, value in SMALL.items():
        page.fill(f"#{name}", value)


def _no_horizontal_scroll(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def _start_worker(command: str, cwd: Path, log: Path) -> subprocess.Popen[str]:
    """Run the printed command as printed (``blobkit`` is this environment's console script)."""
    argv = shlex.split(command)
    assert argv[:2] == ["blobkit", "worker"], command
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.Popen(argv, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            text=True, env=env(PATH=path))


def test_the_whole_flow_sign_in_upload_connect_a_worker_train_verify_read_results_and_cancel(
        tmp_path: Path, browser: Any) -> None:
    shots = Shots(artifacts_dir("e2e"))
    server = start_server(tmp_path / "store", tmp_path / "serve.log", 0, "--lease-seconds", "30")
    worker: subprocess.Popen[str] | None = None
    try:
        key = create_key(server.store, "acme")
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.set_default_timeout(BROWSER_WAIT_MS)
        page = context.new_page()
        page.goto(server.url + "/")
        shots.take(page, "sign-in")
        _sign_in(page, server.url, key)
        assert key not in page.content()
        assert "blobkit_session" not in page.evaluate("document.cookie")  # HttpOnly: not readable from scripts
        shots.take(page, "environments")

        env_id = _upload(page, RETAIL)
        assert page.locator("h1").inner_text().startswith("Timberline Outfitters")
        assert page.locator(".verdict").first.inner_text().startswith("trainable:")
        assert page.locator("#tools-h").is_visible() and page.locator("text=Anchors").is_visible()
        shots.take(page, "environment")

        page.fill("#worker-name", "e2e")
        page.click("text=Create worker connection")
        command = page.locator("#worker-command").inner_text().strip()
        worker_id = page.locator(".connection code").first.inner_text()
        assert f"--server {server.url}" in command and "--token tml-" in command
        assert page.locator("#train-button").is_disabled()
        shots.take(page, "worker-command")
        page.evaluate("window.__notReloaded = true")
        worker = _start_worker(command, tmp_path, tmp_path / "worker.log")
        page.wait_for_selector("#base_model option[value=tiny]", state="attached", timeout=120_000)
        assert page.evaluate("window.__notReloaded === true")  # the panel updated by itself
        assert worker_id in page.locator("#workers").inner_text() and page.locator("#train-button").is_enabled()
        shots.take(page, "worker-connected")

        _fill_small_job(page)
        page.click("#train-button")
        page.wait_for_url(re.compile(r"/jobs/tj_[0-9a-f]+$"), timeout=120_000)
        job_url = page.url
        page.evaluate("window.__notReloaded = true")
        seen = _watch(page, shots)
        assert page.evaluate("window.__notReloaded === true")  # every change came without a reload
        assert seen[0] in ("queued", "running") and seen[-1] == "succeeded", seen
        assert len(seen) >= 3, seen  # at least: running in two stages, then succeeded
        results = shots.take(page, "results")
        Shots.publish(results, "job-results.png")
        _read_results(page)

        page.locator("#cases a.verdict-link").last.click()
        page.wait_for_selector("#conv-h")
        for who in ("Customer", "Agent"):  # the tiny model may write no well-formed tool call: see test_panel.py
            assert page.locator(f".msg .who:has-text('{who}')").count() > 0, who
        calls, observations = page.locator(".call").count(), page.locator(".msg.tool").count()
        assert observations >= calls  # every call the agent made is answered by an observation
        assert page.locator("#case-verdict").inner_text() in ("pass", "fail")
        assert page.locator("#case-reason").inner_text()
        shots.take(page, "case-conversation")

        page.goto(job_url)
        link = page.locator("#evidence a", has_text="eval.json").first
        with page.expect_download() as download_info:
            link.click()
        saved = tmp_path / "eval.json"
        download_info.value.save_as(saved)
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == link.get_attribute("data-sha256")

        page.set_viewport_size({"width": 390, "height": 844})
        assert _no_horizontal_scroll(page)
        shots.take(page, "results-390px")
        page.set_viewport_size({"width": 1280, "height": 900})

        assert worker.wait(120) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        worker = _cancel_a_second_job(page, server, env_id, shots, command, tmp_path)
        # the worker stopped the cancelled job at a safe point and exits non-zero (its job did not succeed)
        assert worker.wait(300) == 1, (tmp_path / "worker-2.log").read_text()[-3000:]
        worker = None
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        server.stop()


def _watch(page: Any, shots: Shots) -> list[str]:
    """Follow the job page until it ends; returns the distinct (status, stage) states it showed, as text."""
    seen: list[str] = []
    published = False
    deadline = time.monotonic() + TRAIN_S
    while time.monotonic() < deadline:
        status = page.locator("#job-status").inner_text()
        stage = page.locator("#job-stage").inner_text() if page.locator("#job-stage").count() else ""
        state = status if status != "running" else f"running:{stage}"
        if not seen or seen[-1] != state:
            seen.append(state)
            shot = shots.take(page, f"job-{state.replace(':', '-')}")
            charted = status == "running" and stage != "job" and page.locator(".chart-svg .dot").count() >= 2
            if charted and (stage == "rl" or not published):  # the README's: training under way, with a chart
                Shots.publish(shot, "job-progress.png")
                published = True
        if page.locator("[data-terminal=true]").count():
            # the page may have turned terminal between reading the status above and this check: read it again
            final = page.locator("#job-status").inner_text()
            return seen if seen[-1] == final else [*seen, final]
        time.sleep(1.0)
    raise AssertionError(f"the job page did not reach an end within {TRAIN_S} s; it showed {seen}")


def _read_results(page: Any) -> None:
    text = page.locator("#results").inner_text()
    for label in ("Base:", "SFT:", "RL:"):
        assert label in text and "held-out cases" in text, text
    assert re.search(r"95 % interval \d", text) and "independent entities" in text
    assert page.locator("#rl-minus-sft").inner_text().endswith("cases")
    assert re.match(r"The exported model, reloaded fresh, (passed|failed) case ", page.locator("#replay-verdict")
                    .inner_text())
    assert page.locator("img.plot").first.evaluate("img => img.complete && img.naturalWidth > 0")
    assert page.locator("#cases tbody tr").count() > 0 and page.locator("#attempts tbody tr").count() == 1


def _cancel_a_second_job(page: Any, server: Server, env_id: str, shots: Shots, command: str,
                         tmp_path: Path) -> subprocess.Popen[str]:
    """Queue a second job, start the printed worker command again, and cancel the job once it runs."""
    page.goto(f"{server.url}/twin/{env_id}#train")
    page.wait_for_selector("#base_model option[value=tiny]", state="attached")
    _fill_small_job(page)
    page.click("#train-button")
    page.wait_for_url(re.compile(r"/jobs/tj_[0-9a-f]+$"), timeout=120_000)
    assert page.locator("#job-status").inner_text() == "queued"
    shots.take(page, "second-job-queued")
    worker = _start_worker(command, tmp_path, tmp_path / "worker-2.log")
    page.wait_for_selector("#job-status:has-text('running')", timeout=120_000)
    shots.take(page, "second-job-running")
    page.focus("#cancel-form button")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    if page.locator("#job-status").inner_text() == "running":
        page.wait_for_selector("text=Cancel requested")
        shots.take(page, "second-job-cancel-requested")
    page.wait_for_selector("#job-status:has-text('cancelled')", timeout=300_000)
    assert "cancelled from the Train panel" in page.locator("#live").inner_text()
    assert page.locator("#attempts tbody tr").count() == 1
    shots.take(page, "second-job-cancelled")
    return worker


def test_in_the_browser_forms_need_their_token_other_workspaces_see_not_found_and_errors_are_messages(
        tmp_path: Path, browser: Any) -> None:
    shots = Shots(artifacts_dir("guards"))
    server = start_server(tmp_path / "store", tmp_path / "serve.log")
    try:
        key, other = create_key(server.store, "acme"), create_key(server.store, "globex")
        with server.client(key, timeout=300) as client:
            env_id = client.post("/api/v1/twin/environments", content=RETAIL.read_bytes()).json()["env_id"]
            job = client.post(f"/api/v1/twin/environments/{env_id}/training-jobs",
                              json={"launch": "worker", "base_model": "tiny", **{k: int(v) for k, v in SMALL.items()}})
            assert job.status_code == 202, job.text
        job_url = f"{server.url}/twin/{env_id}/jobs/{job.json()['job_id']}"

        context = browser.new_context(viewport={"width": 390, "height": 844}, locale="en-US",
                                      timezone_id="Asia/Tokyo", permissions=["clipboard-read", "clipboard-write"])
        context.set_default_timeout(BROWSER_WAIT_MS)
        page = context.new_page()
        page.goto(job_url)  # signed out: the sign-in page, which returns to the job afterwards
        assert page.locator("h1").inner_text() == "Sign in"
        _sign_in_to(page, key)
        page.wait_for_url(job_url)
        assert "blobkit_session" not in page.evaluate("document.cookie")
        assert page.locator("#job-status").inner_text() == "queued" and _no_horizontal_scroll(page)
        created = page.locator("time").first
        assert _local_text(page, created.get_attribute("datetime"), "Asia/Tokyo") == \
            created.inner_text().replace("\u202f", " ")  # the viewer's time zone, not the server's UTC
        shots.take(page, "job-390px")
        page.goto(f"{server.url}/twin/{env_id}")
        assert _no_horizontal_scroll(page)
        assert page.evaluate(UNLABELLED) == []
        shots.take(page, "environment-390px")
        with page.expect_navigation(wait_until="load"):  # the copy handler is attached once the page has loaded
            page.click("text=Create worker connection")
        page.focus("button[data-copy=worker-command]")
        page.keyboard.press("Enter")
        page.wait_for_selector("button[data-copy=worker-command]:has-text('Copied')")
        assert page.evaluate("navigator.clipboard.readText()") == page.locator("#worker-command").inner_text().strip()

        page.goto(job_url)
        page.evaluate("document.querySelector('#cancel-form [name=csrf]').remove()")
        page.click("#cancel-form button")
        assert "security token is missing" in page.locator(".alert").inner_text()
        shots.take(page, "csrf-refused")
        page.goto(job_url)
        assert page.locator("#job-status").inner_text() == "queued"  # nothing was done

        page.goto(server.url + "/")
        big = tmp_path / "world.json"
        big.write_bytes(b"{" + b" " * (1 << 20) + b"}")
        page.set_input_files("#world", str(big))
        page.click("text=Upload and inspect")
        assert "blobkit company train --source ./world.json" in page.locator(".alert").inner_text()
        shots.take(page, "upload-too-large")

        stranger = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        stranger.set_default_timeout(BROWSER_WAIT_MS)
        stranger.goto(server.url + "/")
        _sign_in_to(stranger, other)
        stranger.goto(job_url)
        assert stranger.locator("h1").inner_text() == "Not found" and "Timberline" not in stranger.content()
        shots.take(stranger, "other-workspace-not-found")
    finally:
        server.stop()


def _local_text(page: Any, iso: str, zone: str) -> str:
    """How en-US writes ``iso`` in ``zone`` (month/day/year, 12-hour clock), as toLocaleString does."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    when = datetime.fromisoformat(iso).astimezone(ZoneInfo(zone))
    return f"{when.month}/{when.day}/{when.year}, {int(when.strftime('%I'))}:{when:%M:%S} {when:%p}"


def _sign_in_to(page: Any, key: str) -> None:
    page.focus("#api_key")
    page.keyboard.type(key)
    with page.expect_navigation():
        page.keyboard.press("Enter")
