"""Batch runs and resume by replay, with the real model: a finished batch costs no model call,
and processes sharing one state folder leave it consistent. (A SIGKILLed run resuming to the
very report an uninterrupted run writes: row 8 of the fault matrix, tests/test_faults_disk.py.)"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_MODEL_ENV, cached_calls

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Who was the first president of the association which published Journal of Psychotherapy Integration?",
    "What country was the author of Brand a citizen of?",
    "What county shares a border with the county in which Johnnycake, West Virginia is located?",
]


def appliance(args: list[str], home: Path, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_") or k == "APPLIANCE_TODAY"}
    env["APPLIANCE_HOME"] = str(home)
    env.update(TEST_MODEL_ENV)
    return subprocess.run([sys.executable, "-m", "appliance", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200, **kwargs)


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
