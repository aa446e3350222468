"""The web view of `appliance serve` over HTTP against a real server on loopback (no run
executes: ``--workers 0``): every page renders with local assets only, forms need their CSRF
token, a forged or cross-site post is refused with a 4xx and one line, pages need the token
beyond loopback, and nothing a page is given becomes a path."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import pytest

from serve_harness import Server, tiny_home

QUESTION = "Who named Aurora Lake?"
PAGES = ("/", "/history", "/corpora", "/corpora?name=tiny&q=Mira+Holt")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tiny_home(tmp_path_factory.mktemp("serve-web"))


@pytest.fixture(scope="module")
def server(home):
    server = Server(home, "--workers", "0").start()
    yield server
    server.stop()


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match, page.text[:400]
    return match.group(1)


def refusal(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text[:300])
    match = re.search(r'<p class="error" id="(?:refusal|form-error)">([^<]+)</p>', response.text)
    assert match, response.text[:400]
    assert "Traceback" not in response.text
    return match.group(1)


def submit_form(client: httpx.Client, **fields: str) -> httpx.Response:
    token = csrf_of(client.get("/"))
    return client.post("/runs", data={"csrf": token, **fields})


def test_pages_render_with_local_assets_only(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for path in PAGES:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            assert response.headers["content-type"].startswith("text/html")
            assert "default-src 'self'" in response.headers["content-security-policy"]
            # Every src and href is this server's own (a path), never another host.
            for ref in re.findall(r'(?:src|href|action)="([^"]*)"', response.text):
                assert ref.startswith("/") and not ref.startswith("//"), (path, ref)
            assert "<script>" not in response.text and " style=" not in response.text
        for name, kind in (("app.css", "text/css"), ("app.js", "text/javascript")):
            asset = client.get(f"/static/{name}")
            assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
            assert "http://" not in asset.text and "https://" not in asset.text
        corpora = client.get("/corpora?name=tiny&q=Mira+Holt").text
        assert "tiny" in corpora and "corpus://tiny/" in corpora and 'id="hits"' in corpora
        form = client.get("/").text
        assert 'name="question"' in form and '<option value="tiny">' in form
        assert '<option value="smollm2-135m">' in form and '<option value="searxng">' in form


def test_form_submit_history_and_bulk_delete(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        response = submit_form(client, question=QUESTION, profile="quick", backend="corpus", corpus="tiny",
                               model="smollm2-135m")
        assert response.status_code == 303, response.text[:300]
        run_id = response.headers["location"].rsplit("/", 1)[1]
        run = client.get(f"/runs/{run_id}")
        assert run.status_code == 200 and QUESTION in run.text and 'id="nodes"' in run.text
        assert 'id="cancel-form"' in run.text
        job = client.get(f"/api/runs/{run_id}").json()
        assert (job["status"], job["corpus"], job["model"], job["profile"]) == ("queued", "tiny", "smollm2-135m",
                                                                               "quick")
        second = submit_form(client, question="How long is Aurora Lake?").headers["location"].rsplit("/", 1)[1]
        # History: text search and status filter.
        history = client.get("/history", params={"q": "how long"}).text
        assert second in history and run_id not in history
        assert run_id in client.get("/history", params={"status": "queued"}).text
        assert run_id not in client.get("/history", params={"status": "done"}).text
        refusal(client.get("/history", params={"status": "exploded"}), 400)
        # Bulk delete: queued runs are cancelled first, then deleted.
        page = client.get("/history")
        cancel = client.post("/history/delete", data={"csrf": csrf_of(page), "ids": [run_id, second]})
        assert cancel.status_code == 303 and "cancelled=2" in cancel.headers["location"]
        assert client.get(f"/api/runs/{run_id}").json()["status"] == "cancelled"
        delete = client.post("/history/delete", data={"csrf": csrf_of(page), "ids": [run_id, second]})
        assert "deleted=2" in delete.headers["location"]
        assert client.get(f"/api/runs/{run_id}").status_code == 404
        assert "Deleted 2 run(s)" in client.get(delete.headers["location"]).text


def test_bad_form_input_is_one_line_and_keeps_the_queue(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        before = client.get("/api/runs").json()["counts"]
        assert "corpus" in refusal(submit_form(client, question=QUESTION, corpus="nope"), 400)
        assert "model" in refusal(submit_form(client, question=QUESTION, model="gpt-9"), 400)
        assert "profile" in refusal(submit_form(client, question=QUESTION, profile="huge"), 400)
        refusal(submit_form(client, question="   "), 400)
        # The refused form comes back with what was typed.
        assert QUESTION in submit_form(client, question=QUESTION, corpus="nope").text
        assert client.get("/api/runs").json()["counts"] == before
    assert "Traceback" not in server.log_text()


def test_forged_and_cross_site_posts_are_refused(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        token = csrf_of(client.get("/"))   # this client now holds the CSRF cookie
        before = client.get("/api/runs").json()["counts"]
        # A forged post from a client without the cookie, or with a field that does not match it.
        forged = httpx.post(f"{server.url}/runs", data={"question": QUESTION, "csrf": token}, timeout=30)
        assert "CSRF" in refusal(forged, 403)
        assert "CSRF" in refusal(client.post("/runs", data={"question": QUESTION}), 403)
        assert "CSRF" in refusal(client.post("/runs", data={"question": QUESTION, "csrf": "x" * 43}), 403)
        assert "CSRF" in refusal(client.post("/history/delete", data={"ids": "j-0123456789ab"}), 403)
        # A post another site's page makes through the browser carries its Origin.
        evil = {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}
        assert "cross-origin" in refusal(client.post("/runs", data={"question": QUESTION, "csrf": token},
                                                     headers=evil), 403)
        api = client.post("/api/runs", json={"question": QUESTION}, headers={"origin": "http://evil.example"})
        assert api.status_code == 403 and "cross-origin" in api.json()["error"]
        # Not a form at all.
        assert refusal(client.post("/runs", content=b"{}", headers={"content-type": "application/json"}), 415)
        # A name that resolves to this machine is not a loopback name (DNS rebinding).
        rebound = client.get("/api/runs", headers={"host": "evil.example"})
        assert rebound.status_code == 403 and "loopback" in rebound.json()["error"]
        assert client.get("/api/runs").json()["counts"] == before
    log = server.log_text()
    assert "Traceback" not in log and log.count("CSRF token is missing") >= 4


def test_no_path_from_a_page(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for path in ("/runs/..%2F..%2Fetc%2Fpasswd", "/runs/j-..%2Fjobs/report", "/runs/j-0123456789ab/report",
                     "/static/..%2Fserve.py", "/static/app.py", "/nothing", "/runs/j-0123456789ab%00"):
            response = client.get(path)
            assert 400 <= response.status_code < 500, (path, response.status_code)
            assert "Traceback" not in response.text and "import " not in response.text
        refusal(client.get("/runs/j-0123456789ab"), 404)


def test_pages_need_the_token_beyond_loopback(tmp_path):
    server = Server(tmp_path, "--workers", "0", "--token", "s3cret-token-for-tests", host="127.0.0.2")
    server.start(token="s3cret-token-for-tests")
    try:
        assert refusal(httpx.get(f"{server.url}/", timeout=30), 401)
        refusal(httpx.get(f"{server.url}/history", params={"token": "wrong"}, timeout=30), 403)
        refusal(httpx.get(f"{server.url}/", cookies={"appliance_token": "wrong"}, timeout=30), 403)
        refusal(httpx.get(f"{server.url}/static/app.css", timeout=30), 401)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            opened = client.get("/history", params={"token": "s3cret-token-for-tests", "q": "lake"})
            # The token moves to an HttpOnly cookie and out of the address bar.
            assert opened.status_code == 303 and opened.headers["location"] == "/history?q=lake"
            assert "httponly" in opened.headers["set-cookie"].lower()
            assert client.get("/history?q=lake").status_code == 200
            assert client.get("/api/runs").status_code == 200
    finally:
        server.stop()
    assert "Traceback" not in server.log_text()


def test_report_citations_render_with_their_quotes():
    from appliance.web import render_report

    markdown = ("# Deep Dive: A lake\n\n## Answer\n\n**Mira Holt.** [1]\n\n## Findings\n\n"
                "- The lake was named in 1921. [1][2]\n- Not a citation: \\[3\\] <b>bold</b>\n\n"
                "## Sources\n\n[1] Aurora Lake - <corpus://tiny/aurora>  \nquality: primary\n\n"
                "> \"The lake was named by the surveyor Mira Holt in 1921.\"\n")
    report = {"sources": [
        {"n": 1, "url": "corpus://tiny/aurora", "title": "Aurora Lake",
         "quotes": ["The lake was named by the surveyor Mira Holt in 1921."]},
        {"n": 2, "url": "https://example.org/<script>", "title": "<img src=x>", "quotes": ["a \"quoted\" <tag>"]}]}
    rendered = render_report(markdown, report)
    cites = re.findall(r'<span class="cite" tabindex="0" data-n="(\d+)"', rendered)
    assert cites == ["1", "1", "2"]          # the escaped [3] and the source list are not citations
    assert "The lake was named by the surveyor Mira Holt in 1921." in rendered
    assert 'role="tooltip"' in rendered and "<b>" not in rendered and "<script>" not in rendered
    assert "&lt;img src=x&gt;" in rendered and "[3]" in rendered
    assert "<h2>Sources</h2>" in rendered


def test_batch_upload_queues_each_line_with_a_link(server):
    lines = [json.dumps({"question": "Who named Aurora Lake?"}), json.dumps({"question": 5}),
             json.dumps({"question": "Where was Mira Holt born?", "profile": "quick"}),
             json.dumps({"question": "How long is Aurora Lake?", "profile": "huge"})]
    upload = ("\n".join(lines) + "\n").encode()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        token = csrf_of(client.get("/"))
        assert 'id="batch-form"' in client.get("/").text
        before = client.get("/api/runs").json()["counts"]["queued"]
        response = client.post("/batch", data={"csrf": token, "corpus": "tiny"},
                               files={"file": ("questions.jsonl", upload, "application/octet-stream")})
        assert response.status_code == 201, response.text[:400]
        ids = re.findall(r"<a href=/runs/(j-[0-9a-f]{12})>", response.text)
        assert len(ids) == 2 and "2 not queued" in response.text and "profile" in response.text
        jobs = [client.get(f"/api/runs/{i}").json() for i in ids]
        assert [j["question"] for j in jobs] == ["Who named Aurora Lake?", "Where was Mira Holt born?"]
        assert [j["profile"] for j in jobs] == [None, "quick"] and {j["corpus"] for j in jobs} == {"tiny"}
        progress = client.get("/batch", params={"ids": ",".join(ids)})
        assert progress.status_code == 200 and "queued 2" in progress.text and all(i in progress.text for i in ids)
        assert f'data-batch-ids="{",".join(ids)}"' in progress.text and 'data-live="1"' in progress.text
        assert all(f'<tr data-job="{i}">' in progress.text for i in ids)
        refusal(client.get("/batch", params={"ids": "j-../x"}), 400)
        # The page follows the batch through one API call: its runs in the order given.
        followed = client.get("/api/runs", params={"ids": ",".join(reversed(ids))}).json()
        assert [r["id"] for r in followed["runs"]] == list(reversed(ids)) and followed["missing"] == []
        assert followed["counts"]["queued"] == 2 and sum(followed["counts"].values()) == 2
        gone = "j-" + "0" * 12
        assert client.get("/api/runs", params={"ids": f"{ids[0]},{gone}"}).json()["missing"] == [gone]
        for ids_param, words in (("j-../x", "not a run id"), (",", "1 to 1000"),
                                 (",".join("j-%012x" % n for n in range(1001)), "1 to 1000")):
            bad = client.get("/api/runs", params={"ids": ids_param})
            assert bad.status_code == 400 and words in bad.json()["error"], bad.text[:200]
        # Forged (no CSRF field), too big, not multipart: refused, nothing queued.
        forged = client.post("/batch", files={"file": ("q.txt", b"Who named Aurora Lake?\n", "text/plain")})
        assert "CSRF" in refusal(forged, 403)
        big = client.post("/batch", data={"csrf": token},
                          files={"file": ("q.txt", b"Who named Aurora Lake?\n" * 20000, "text/plain")})
        assert "over" in refusal(big, 413)
        assert client.get("/api/runs").json()["counts"]["queued"] == before + 2
        for run_id in ids:   # leave the queue as the other tests expect it
            client.delete(f"/api/runs/{run_id}")
    assert "Traceback" not in server.log_text()


def _nice_values(pid: int) -> dict[int, int]:
    """Each thread's nice value (field 19 of /proc/PID/task/TID/stat)."""
    values = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        values[int(task.name)] = int(stat.rsplit(")", 1)[1].split()[16])
    return values


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_thread_that_answers_requests_yields_to_the_runs(tmp_path):
    """The server's event loop (and the request handlers it starts) runs nicer than the job
    workers started before it, so clients polling hard never take the CPU from a run."""
    from appliance.serve import SERVE_NICENESS

    (tmp_path / "home").mkdir()
    served = Server(tmp_path / "home").start()
    try:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            assert client.get("/api/runs").status_code == 200   # the executor has a thread now
        values = _nice_values(served.process.pid)
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert values[served.process.pid] == min(19, base + SERVE_NICENESS)   # the main thread: the loop
        assert base in values.values(), values   # the job worker kept the priority it started with
    finally:
        served.stop()
