"""The web view in a real Chromium (Debian's `chromium`, driven by playwright through
``executable_path``; no browser is ever downloaded) against a real `appliance serve` running
the 135M test model on a tiny corpus: submit a question on the page, watch the node table fill
from the server's events (and survive a reload), open the report, hover and keyboard-focus a
citation and see its verbatim quote; every request the page makes goes to the server itself."""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager

import httpx
import pytest

from conftest import TEST_MODEL, require_model_file
from serve_harness import Server, tiny_home

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")]

QUESTION = "Who named Aurora Lake?"


@pytest.fixture
def home(tmp_path):
    require_model_file()
    return tiny_home(tmp_path)


@contextmanager
def served_page(home):
    """A real server on ``home`` and a Chromium page on it; (server, page, every URL the page
    requested). On the way out: nothing was requested from anywhere else, and the server
    logged no traceback."""
    from playwright.sync_api import sync_playwright

    server = Server(home).start()
    requests: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
            yield server, page, requests
            browser.close()
    finally:
        server.stop()
    assert requests, "the browser made no request"
    outside = [url for url in requests if not url.startswith(server.url + "/")]
    assert not outside, outside
    assert "Traceback" not in server.log_text()


def test_submit_watch_report_and_citation_quote(home):
    from playwright.sync_api import expect

    with served_page(home) as (server, page, _):
        page.goto(f"{server.url}/")
        page.fill("#question", QUESTION)
        page.select_option("#profile", "quick")
        page.select_option("#backend", "corpus")
        page.select_option("#corpus", "tiny")
        page.select_option("#model", TEST_MODEL)
        page.click("#submit")
        page.wait_for_url(re.compile(r"/runs/j-[0-9a-f]{12}$"))
        run_id = page.url.rsplit("/", 1)[1]
        # The node table fills while the run runs (the page was loaded before any node existed).
        page.wait_for_selector("#nodes tr[data-node]", timeout=300_000)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            first_seen = client.get(f"/api/runs/{run_id}").json()
        assert first_seen["status"] in ("running", "done"), first_seen
        # A reload shows the same run and carries on following it.
        page.reload()
        expect(page.locator("#run-question")).to_have_text(QUESTION)
        expect(page.locator("#nodes tr[data-node]").first).to_be_visible()
        expect(page.locator("#report-link")).to_be_visible(timeout=600_000)
        expect(page.locator("#run-status")).to_have_text("done")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            job = client.get(f"/api/runs/{run_id}").json()
        assert page.locator("#nodes tr[data-node]").count() == len(job["nodes"]) > 0
        assert page.locator("#n-total").inner_text() == str(len(job["nodes"]))
        assert page.locator("#run-elapsed").inner_text() not in ("", "–")

        page.click("#report-link")
        page.wait_for_url(f"{server.url}/runs/{run_id}/report")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            report = client.get(f"/api/runs/{run_id}/report", params={"format": "json"}).json()
        cites = page.locator("#report .cite")
        assert cites.count() > 0, "the report has no citation"
        cite = cites.first
        n = int(cite.get_attribute("data-n") or 0)
        source = next(s for s in report["sources"] if s["n"] == n)
        popover = cite.locator(".pop")
        expect(popover).to_be_hidden()
        cite.hover()
        expect(popover).to_be_visible()
        expect(popover).to_contain_text(source["quotes"][0])
        expect(popover).to_contain_text(source["url"])
        # Keyboard: Tab reaches the citation and its popover shows without a pointer.
        page.mouse.move(0, 0)
        expect(popover).to_be_hidden()
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.classList.contains('cite')"):
                break
        focused = page.locator("#report .cite:focus")
        expect(focused).to_have_count(1)
        expect(focused.locator(".pop")).to_be_visible()


def test_a_batch_page_follows_its_runs_without_a_reload(home, tmp_path):
    """Upload a questions file on the page, follow the batch: each row's status, duration and
    report link, the counts and the progress bar change as the runs go on, with no reload."""
    from playwright.sync_api import expect

    questions = tmp_path / "questions.txt"
    questions.write_text(f"{QUESTION}\nWhere was Mira Holt born?\n", encoding="utf-8")
    with served_page(home) as (server, page, _):
        page.goto(f"{server.url}/")
        page.set_input_files("#bfile", str(questions))
        page.select_option("#bprofile", "quick")
        page.select_option("#bcorpus", "tiny")
        page.select_option("#bmodel", TEST_MODEL)
        page.click("#batch-submit")
        page.click("#batch-progress")
        page.wait_for_url(re.compile(r"/batch\?ids="))
        rows = page.locator("#batch-live tr[data-job]")
        expect(rows).to_have_count(2)
        loaded = page.locator("#batch-done").inner_text()
        assert loaded != "2 of 2 finished", "the runs finished before the page could follow them"
        expect(page.locator("#batch-done")).to_have_text("2 of 2 finished", timeout=600_000)
        expect(page.locator("#batch-live-note")).to_have_text("Every run has finished.")
        for i in range(2):
            row = rows.nth(i)
            expect(row.locator(".st .badge")).to_have_text("done")
            expect(row.locator(".rep a")).to_have_text("report")
            assert row.locator(".dur").inner_text() not in ("", "–")
        expect(page.locator('[data-count="done"]')).to_have_text("done 2")
        assert page.evaluate("document.getElementById('batch-bar').value") == 2
