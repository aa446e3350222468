"""The job queue behind `appliance serve`, end to end with the real 135M model on a tiny corpus:
submit, poll, events, report, cancel, delete; and a server killed with SIGKILL while one run
runs and two wait, restarted: all three finish, the running one replays its cached calls, and
no run runs twice at once. Runs go in worker processes: one killed on its own fails its job
in one line and is replaced; none outlives a killed server."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from conftest import cached_calls, require_model_file
from serve_harness import Server, tiny_home, wait_status

pytestmark = pytest.mark.slow

QUESTIONS = ["Who named Aurora Lake?", "Where was Mira Holt born?", "How long is Aurora Lake?"]
FIELDS = {"profile": "quick", "corpus": "tiny", "backend": "corpus", "model": "smollm2-135m"}


@pytest.fixture
def home(tmp_path):
    require_model_file()
    return tiny_home(tmp_path)


def children(pid: int) -> list[int]:
    """The server's worker processes: its children started by multiprocessing's spawn (not its
    resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def submit(client: httpx.Client, question: str) -> str:
    response = client.post("/api/runs", json={"question": question, **FIELDS})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_submit_poll_events_report_cancel_delete(home):
    server = Server(home).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            first = submit(client, QUESTIONS[0])
            second = submit(client, QUESTIONS[1])
            # Server-sent events: status updates until the end event.
            seen, events = [], []
            with client.stream("GET", f"/api/runs/{first}/events", timeout=300) as stream:
                for line in stream.iter_lines():
                    if line.startswith("event: "):
                        events.append(line[7:])
                    elif line.startswith("data: ") and events[-1] == "status":
                        seen.append(json.loads(line[6:]))
                    if events and events[-1] == "end":
                        break
            assert events[-1] == "end" and "status" in events
            assert {"queued", "running"} & {s["status"] for s in seen}
            job = client.get(f"/api/runs/{first}").json()
            assert job["status"] == "done", job
            assert job["nodes"] and job["stats"]["model_calls"] > 0 and job["phase"] == "finished"
            markdown = client.get(f"/api/runs/{first}/report")
            assert markdown.headers["content-type"].startswith("text/markdown")
            assert markdown.text.startswith("# ")
            report = client.get(f"/api/runs/{first}/report", params={"format": "json"}).json()
            assert report["question"] == QUESTIONS[0]
            # Cancel the second once it runs: it stops at its next model call, with a report.
            wait_status(client, second, {"running"}, 120)
            cancel = client.delete(f"/api/runs/{second}")
            assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
            job = wait_status(client, second, {"cancelled", "done", "failed"}, 120)
            assert job["status"] == "cancelled" and job["run_status"] == "cancelled", job
            report = client.get(f"/api/runs/{second}/report", params={"format": "json"}).json()
            assert report["status"] == "cancelled"
            # Finished runs are deleted with their reports.
            assert client.delete(f"/api/runs/{first}").json()["deleted"] is True
            assert client.get(f"/api/runs/{first}").status_code == 404
            assert not (home / "serve" / "reports" / f"{first}.md").exists()
    finally:
        server.stop()
    assert "Traceback" not in server.log_text()


def test_sigkill_with_one_running_and_two_queued(home):
    server = Server(home).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ids = [submit(client, q) for q in QUESTIONS]
        wait_status(client, ids[0], {"running"}, 60)
        # Let the running one finish some model calls (they are in the call cache), then kill.
        import time

        deadline = time.monotonic() + 120
        while cached_calls(home) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.get(f"/api/runs/{ids[0]}").json()["status"] == "running"
        assert [client.get(f"/api/runs/{i}").json()["status"] for i in ids[1:]] == ["queued", "queued"]
    workers = children(server.process.pid)
    assert workers, "runs go in a worker process of their own"
    server.kill()
    # No worker outlives the server: a restart must not find a run still going.
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
    cached_before = cached_calls(home)
    assert cached_before >= 3

    again = Server(home).start()
    try:
        assert f"re-entered 1 run(s) left running: {ids[0]}" in again.log_text()
        with httpx.Client(base_url=again.url, timeout=30) as client:
            jobs = [wait_status(client, i, {"done", "failed", "cancelled"}, 600) for i in ids]
    finally:
        again.stop()
    assert [j["status"] for j in jobs] == ["done", "done", "done"], jobs
    assert [j["attempts"] for j in jobs] == [2, 1, 1]
    # The re-entered run replayed what it had done: its cached calls came back as hits.
    assert jobs[0]["stats"]["cache_hits"] >= min(cached_before, 3)
    # One worker: each run started after the one before it finished (never two at once).
    assert jobs[0]["finished"] <= jobs[1]["started"] and jobs[1]["finished"] <= jobs[2]["started"]
    assert "Traceback" not in again.log_text()


def test_a_worker_process_that_dies_fails_its_job_and_is_replaced(home):
    """A run's process killed on its own (a crash in native code, the OOM killer): its job is
    failed with a one-line reason, the server goes on, and a new worker runs the next job."""
    server = Server(home).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            first, second = submit(client, QUESTIONS[0]), submit(client, QUESTIONS[1])
            wait_status(client, first, {"running"}, 60)
            [worker] = children(server.process.pid)
            os.kill(worker, signal.SIGKILL)
            failed = wait_status(client, first, {"done", "failed", "cancelled"}, 60)
            assert failed["status"] == "failed"
            assert failed["error"] == "the worker process died (signal 9)"
            done = wait_status(client, second, {"done", "failed", "cancelled"}, 600)
            assert done["status"] == "done", done
            assert [pid for pid in children(server.process.pid) if pid != worker]
    finally:
        server.stop()
    log = server.log_text()
    assert "worker 0: the worker process died (signal 9) running job " + first in log
    assert "Traceback" not in log
