"""The job queue's control flow, fast: ordering, atomic claims, recovery after a crash, the
queue bound, and cancel stopping a run at its next model call with a `cancelled` report
(a scripted engine here; tests/test_serve_jobs.py does it all with the real model)."""

from __future__ import annotations

import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.contracts import RunStatus
from appliance.embed import get_embedder
from appliance.errors import RunCancelled
from appliance.jobs import JobQueue, JobRequest, QueueFull, guard_models, valid_job_id
from appliance.pipeline.parts import Models
from appliance.pipeline.run import research
from fakes import FakeBackend, FakeEngine, FakeFetcher
from test_pipeline_flow import HITS, PAGES, flow_settings, script  # noqa: F401 - the fixture is used


def test_order_claims_and_recovery(tmp_path):
    queue = JobQueue(tmp_path / "jobs.sqlite", max_queued=3)
    ids = [queue.submit(JobRequest(f"Question number {n}?").checked()).id for n in range(3)]
    assert all(valid_job_id(i) for i in ids)
    with pytest.raises(QueueFull):
        queue.submit(JobRequest("One too many?"))
    # Many threads claim at once: each job goes to exactly one of them.
    with ThreadPoolExecutor(8) as pool:
        claimed = [job.id for job in pool.map(lambda _: queue.claim_next(), range(8)) if job]
    assert sorted(claimed) == sorted(ids)
    # A crash leaves them running; recovery queues them again, the tried ones first.
    third = queue.submit(JobRequest("A later question?"))
    assert queue.recover() == ids
    assert [queue.claim_next().id for _ in range(4)] == [*ids, third.id]
    assert [queue.get(i).attempts for i in ids] == [2, 2, 2]


def test_reads_neither_wait_for_a_writer_nor_see_its_uncommitted_change(tmp_path):
    """A worker (another connection) in the middle of a write: a status read, the history,
    the counts and a cancel check answer at once, from the last committed state."""
    queue = JobQueue(tmp_path / "jobs.sqlite")
    job = queue.submit(JobRequest("Who named the lake?").checked())
    writer = sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE jobs SET phase = 'gather', cancel = 1 WHERE id = ?", (job.id,))
    try:
        start = time.monotonic()
        assert queue.get(job.id).phase == job.phase
        assert [j.id for j in queue.list_jobs()] == [job.id]
        assert queue.counts()["queued"] == 1
        assert queue.cancel_requested(job.id) is False
        assert time.monotonic() - start < 2  # a read behind the write lock waits up to 30 s
    finally:
        writer.execute("COMMIT")
        writer.close()
    assert queue.get(job.id).phase == "gather" and queue.cancel_requested(job.id) is True


def test_cancel_queued_and_running(tmp_path):
    queue = JobQueue(tmp_path / "jobs.sqlite")
    first, second = (queue.submit(JobRequest(q)) for q in ("First question?", "Second question?"))
    running = queue.claim_next()
    assert running.id == first.id
    assert queue.cancel(second.id).status == "cancelled"
    assert queue.cancel(first.id).status == "running" and queue.cancel_requested(first.id)
    assert queue.delete(first.id) is False       # a running job is never deleted
    assert queue.delete(second.id) is True
    assert queue.cancel("../../etc") is None and queue.get("j-../x") is None


@pytest.mark.parametrize("stop_after", [0, 3])
def test_a_cancelled_run_stops_at_its_next_model_call(flow_settings, tmp_path, stop_after):  # noqa: F811
    engine = FakeEngine(script())
    calls = []

    def check():
        calls.append(1)
        if len(calls) > stop_after:
            raise RunCancelled("cancelled on request")

    models = guard_models(Models(planner=engine, extractor=engine, verifier=engine, writer=engine), check)
    result = research("Where was the founder of Alpha Corp born?", flow_settings, models=models,
                      backend=FakeBackend(HITS), fetcher=FakeFetcher(PAGES),
                      embedder=get_embedder(flow_settings), out_dir=tmp_path / "reports")
    assert result.status == RunStatus.cancelled and result.exit_code == 0
    assert len(calls) == stop_after + 1          # no model call after the cancel
    report = json.loads(result.json_path.read_text(encoding="utf-8"))
    assert report["status"] == "cancelled" and report["error"] == "cancelled on request"
    assert "cancelled: stopped on request" in result.markdown_path.read_text(encoding="utf-8")
