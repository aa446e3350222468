"""scripts/bench_peers.py: the peer's answers scored by the appliance's scorer (by hand), and
the --dry-run that checks every set-up step without installing anything or running a model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import bench_peers  # noqa: E402

PASSAGES = {"p1": "G. Stanley Hall was the first president of the American Psychological Association.",
            "p2": "The Journal of Psychotherapy Integration is published by the APA."}


def test_peer_answer_scored_by_the_appliance_scorer():
    row = {"id": "q1", "start": 10.0, "end": 20.0, "seconds": 10.0, "status": "ok",
           "answer": "The first president was G. Stanley Hall [2].",
           "sources": [{"url": "http://127.0.0.1:1/corpus/c/p2", "snippet": "The Journal of Psychotherapy Integration is"},
                       {"url": "http://127.0.0.1:1/corpus/c/p1", "snippet": "G. Stanley Hall was the first president ..."},
                       {"url": "http://127.0.0.1:1/corpus/c/p9", "snippet": "words found nowhere"}]}
    gold = {"answer": "G. Stanley Hall", "aliases": ["Stanley Hall"], "supporting_ids": ["p1", "p2"]}
    calls = [{"start": 9.0, "prompt_tokens": 5, "completion_tokens": 5},   # before the question
             {"start": 11.0, "prompt_tokens": 100, "completion_tokens": 20},
             {"start": 19.5, "prompt_tokens": 50, "completion_tokens": 10}]
    scored = bench_peers.score_peer(row, gold, calls, lambda pid: PASSAGES.get(pid, ""))
    assert scored["cited"] == ["p1"]                     # only [2] is cited in the answer
    assert scored["sp_recall"] == 0.5
    assert scored["contains"] == 1.0 and scored["em"] == 0.0
    assert scored["faithfulness"] == 1.0                 # the cited snippet is in its passage
    assert (scored["model_calls"], scored["tokens_prompt"], scored["tokens_generated"]) == (2, 150, 30)

    uncited = dict(row, answer="No idea.")
    scored = bench_peers.score_peer(uncited, gold, calls, lambda pid: PASSAGES.get(pid, ""))
    assert scored["cited"] == ["p2", "p1", "p9"]         # no [n]: every source counts as cited
    assert scored["sp_recall"] == 1.0 and scored["faithfulness"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_dry_run_checks_every_step_and_runs_no_model(tmp_path):
    from conftest import BENCH_DIR as bench
    if not bench.is_dir():
        pytest.skip(f"the team bench folder {bench} is not beside the checkout (set TEST_BENCH_DIR); this test is about bench_peers on it")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_peers.py"), "--dataset", str(bench),
                           "--n", "1", "--dry-run", "--out", str(tmp_path / "out"),
                           "--work", str(REPO / ".build" / "peers")],
                          capture_output=True, text=True, timeout=900, cwd=str(REPO))
    err = done.stderr
    assert done.returncode in (0, 1), err
    for step in ("Python 3.12", "LDR installed in its own env", "no torch or CUDA in the peer env",
                 "llama-cpp-python server in the peer env", "the appliance's default model", "dataset",
                 "SearXNG", "loopback ports", "loopback guard (this process and children)"):
        assert f"] {step}: " in err, step
    assert "no model was run" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "peers.md").exists()
