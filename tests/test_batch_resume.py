"""Batch runs and resume by replay, with the real model: a finished batch costs no model call,
a SIGKILLed run resumes from the call cache to the very report an uninterrupted run writes,
and processes sharing one state folder leave it consistent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_MODEL_ENV, cached_calls

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Who was the first president of the association which published Journal of Psychotherapy Integration?",
    "What country was the author of Brand a citizen of?",
    "What county shares a border with the county in which Johnnycake, West Virginia is located?",
]
RUN_SPECIFIC = ("stats", "run_id")


def appliance(args: list[str], home: Path, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_") or k == "APPLIANCE_TODAY"}
    env["APPLIANCE_HOME"] = str(home)
    env.update(TEST_MODEL_ENV)
    return subprocess.run([sys.executable, "-m", "appliance", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200, **kwargs)


def comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in RUN_SPECIFIC}


def test_batch_of_three_then_rerun_makes_no_model_call(corpus_home, tmp_path):
    home, corpus = corpus_home
    questions = tmp_path / "questions.txt"
    questions.write_text("# three musique questions\n\n" + "\n".join(QUESTIONS) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    # Two worker processes share one state folder (cache, LanceDB, run folders).
    first = appliance(["batch", str(questions), "--out", str(out), "--profile", "quick", "--corpus", corpus,
                       "--backend", "corpus", "--jobs", "2"], home, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((out / "batch.json").read_text())
    assert summary["done"] == 3 and summary["failed"] == 0
    assert summary["totals_this_run"]["calls"] > 0
    for entry in summary["questions"]:
        md = Path(entry["report"])
        assert md.is_file() and md.parent == out and md.with_suffix(".json").is_file()
        assert md.name.startswith("q-")
    with sqlite3.connect(home / "cache" / "calls.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    before = cached_calls(home)
    # Rerun with an export asked for: the finished reports are exported, nothing is answered.
    second = appliance(["batch", str(questions), "--out", str(out), "--profile", "quick", "--corpus", corpus,
                        "--backend", "corpus", "--export", "html", "--export", "csl-json"], home, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((out / "batch.json").read_text())
    assert summary["skipped"] == 3 and summary["done"] == 0
    for entry in summary["questions"]:
        page = Path(entry["exports"]["html"])
        assert page == Path(entry["report"]).with_suffix(".html") and "<html" in page.read_text()
        assert isinstance(json.loads(Path(entry["exports"]["csl-json"]).read_text()), list)
    assert summary["totals_this_run"]["calls"] == 0 and summary["totals_this_run"]["model_calls"] == 0
    assert cached_calls(home) == before
    assert "3 skipped" in second.stdout

    # The corpus table is still whole after two processes used it at once.
    search = appliance(["search", "Journal of Psychotherapy Integration", "--backend", "corpus",
                        "--corpus", corpus, "--json"], home, tmp_path)
    assert search.returncode == 0 and "p0006" in search.stdout


def test_sigkill_then_rerun_replays_to_the_same_report(corpus_home, tmp_path):
    home, corpus = corpus_home
    args = ["research", QUESTIONS[1], "--profile", "quick", "--corpus", corpus, "--backend", "corpus", "--json"]

    # The reference: an uninterrupted run in its own state folder.
    ref_home = tmp_path / "ref-home"
    shutil.copytree(home / "lancedb", ref_home / "lancedb")
    ref = appliance(args + ["--out", str(tmp_path / "ref")], ref_home, tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    reference = json.loads(ref.stdout)
    total = reference["stats"]["calls"]
    assert total >= 4

    # Kill a second run part-way, once some of its calls are in the cache.
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_") or k == "APPLIANCE_TODAY"}
    env["APPLIANCE_HOME"] = str(home)
    env.update(TEST_MODEL_ENV)
    proc = subprocess.Popen([sys.executable, "-m", "appliance", *args, "--out", str(tmp_path / "killed")],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 900
    while cached_calls(home) < total // 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before_kill = cached_calls(home)
    assert 0 < done_before_kill < total
    assert not list((tmp_path / "killed").glob("*.md")) if (tmp_path / "killed").exists() else True

    rerun = appliance(args + ["--out", str(tmp_path / "killed")], home, tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = json.loads(rerun.stdout)
    stats = resumed["stats"]
    assert stats["cache_hits"] >= done_before_kill
    assert stats["calls"] - stats["cache_hits"] <= total - done_before_kill
    assert comparable(resumed) == comparable(reference)
