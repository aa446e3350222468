"""Batches on Dask with the real model: a LocalCluster of worker processes answers the same
reports a one-process batch writes, each worker loading its model once; a worker SIGKILLed
mid-question costs only that question's work, and nothing is written twice; a question resumed
on a later day (after midnight) keeps its start date and replays, in one process and on a
cluster. Slurm and PBS job
scripts are rendered without a scheduler and compared with snapshots; bad cluster input is a
one-line error."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from appliance.batch import BatchItem, question_id, run_batch
from appliance.cluster import ClusterSpec, parse_spec
from appliance.config import SettingsRecipe
from appliance.errors import UsageError
from conftest import MODEL_MANIFEST, TEST_MODEL_SETTINGS
from fault_helpers import app_env, assert_one_line_error, cli

SNAPSHOTS = Path(__file__).parent / "data" / "job_scripts"
DEMO_QUESTIONS = Path(__file__).resolve().parent.parent / "data" / "demo" / "questions.jsonl"
# Per-run values that differ between two runs of the same questions (timings, counters of work).
RUN_SPECIFIC = ("stats",)
TIMING_KEYS = ("seconds", "mask_seconds", "decode_seconds")


def questions(count: int) -> list[BatchItem]:
    texts = [json.loads(line)["question"] for line in DEMO_QUESTIONS.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    texts.append("What is the Journal of Psychotherapy Integration about?")
    return [BatchItem(id=question_id(t), question=t, line=n) for n, t in enumerate(texts[:count], start=1)]


def recipe_for(home: Path, corpus: str) -> SettingsRecipe:
    empty = home / "empty-config.toml"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_text("", encoding="utf-8")
    overrides = {**TEST_MODEL_SETTINGS, "state.home": str(home), "models.manifest": str(MODEL_MANIFEST),
                 "llm.n_threads": 1, "embed.threads": 1, "search.backend": "corpus", "search.corpus": corpus}
    return SettingsRecipe(config_file=str(empty), profile="quick", overrides=tuple(sorted(overrides.items())))


def fresh_home(corpus_home, name: str, tmp_path: Path) -> Path:
    home, _ = corpus_home
    target = tmp_path / name
    shutil.copytree(home / "lancedb", target / "lancedb")
    return target


def cache_rows(home: Path) -> dict[str, str]:
    with sqlite3.connect(home / "cache" / "calls.sqlite") as conn:
        return dict(conn.execute("SELECT key, raw FROM calls").fetchall())


def report(out: Path, item_id: str) -> dict:
    data = json.loads((out / f"{item_id}.json").read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if k not in RUN_SPECIFIC}


def resume_next_day(items: list[BatchItem], recipe: SettingsRecipe, out: Path, home: Path, monkeypatch,
                    cluster: ClusterSpec | None = None) -> None:
    """Take the first question's report away (as a kill before it was written would), move the
    clock a day on, and rerun: the question keeps the day it was started, so its run id and
    prompts are the same and every call replays; the others stay skipped. (On a cluster the
    client's clock decides which calls are shipped to the worker.)"""
    import appliance.questions as questions_module

    first = json.loads((out / f"{items[0].id}.json").read_text(encoding="utf-8"))
    for suffix in (".md", ".json"):
        (out / f"{items[0].id}{suffix}").unlink()
    before = cache_rows(home)
    tomorrow = dt.date.fromisoformat(first["date"]) + dt.timedelta(days=1)
    monkeypatch.setattr(questions_module, "today", lambda: tomorrow)
    resumed = run_batch(items, recipe, out, cluster=cluster)
    assert [r.outcome for r in resumed] == ["done"] + ["skipped"] * (len(items) - 1)
    assert resumed[0].stats["model_calls"] == 0
    assert resumed[0].stats["cache_hits"] == resumed[0].stats["calls"] > 0
    again = json.loads((out / f"{items[0].id}.json").read_text(encoding="utf-8"))
    assert (again["date"], again["run_id"]) == (first["date"], first["run_id"])
    assert cache_rows(home) == before


def run_folder(home: Path, run_id: str) -> dict[str, object]:
    """A run folder's content without timings: JSON files as data, logs as their records."""
    folder = home / "runs" / run_id
    content: dict[str, object] = {}
    for path in sorted(folder.iterdir()):
        if path.name == "stats.json":
            continue
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            if path.name == "calls.jsonl":
                # Cache hits and token counts differ between a cold and a warm cache: the calls
                # themselves (key, purpose) do not.
                records = sorted((r["key"], r["purpose"]) for r in records)
            else:
                # Logs are written as things happen on the run's node threads (a node's record
                # when it finishes, a check's when it fires): their order follows thread timing,
                # their content does not.
                records = sorted(records, key=lambda r: json.dumps(r, sort_keys=True))
            content[path.name] = records
        else:
            content[path.name] = path.read_text(encoding="utf-8")
    return content


@pytest.mark.slow
def test_four_questions_on_two_workers_match_a_one_process_batch(corpus_home, tmp_path, monkeypatch):
    _, corpus = corpus_home
    # Four questions on two workers: both workers answer, and at least one answers several
    # with the model it loaded once.
    items = questions(4)
    one_home, dask_home = fresh_home(corpus_home, "one", tmp_path), fresh_home(corpus_home, "dask", tmp_path)
    one_out, dask_out = tmp_path / "one-out", tmp_path / "dask-out"

    reference = run_batch(items, recipe_for(one_home, corpus), one_out)
    assert [r.outcome for r in reference] == ["done"] * 4, [(r.id, r.reason) for r in reference]

    delivered: list[str] = []
    results = run_batch(items, recipe_for(dask_home, corpus), dask_out, cluster=ClusterSpec("local", workers=2),
                        on_result=lambda r: delivered.append(r.id))
    assert [r.outcome for r in results] == ["done"] * 4, [(r.id, r.reason) for r in results]
    # Every report written once, into the client's output folder.
    assert sorted(delivered) == sorted(i.id for i in items)
    assert sorted(p.name for p in dask_out.iterdir()) == sorted(p.name for p in one_out.iterdir())
    assert all(Path(r.report).parent == dask_out for r in results)
    # Two worker processes, each loaded its models once for all the questions it answered.
    pids = Counter(r.worker["pid"] for r in results)
    assert len(pids) == 2, pids
    assert all(r.worker["model_loads"] == 1 for r in results), [r.worker for r in results]

    for item in items:
        assert report(dask_out, item.id) == report(one_out, item.id), item.question
        run_id = report(one_out, item.id)["run_id"]
        assert run_folder(dask_home, run_id) == run_folder(one_home, run_id), item.question
    assert cache_rows(dask_home) == cache_rows(one_home)
    # Workers wrote nothing of their own in the state folder's cache or runs.
    assert sorted(p.name for p in (dask_home / "runs").iterdir()) == sorted(p.name for p in (one_home / "runs").iterdir())

    resume_next_day(items, recipe_for(one_home, corpus), one_out, one_home, monkeypatch)


@pytest.mark.slow
def test_worker_killed_mid_question_loses_only_that_question(corpus_home, tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    import appliance.cluster as cluster_module

    _, corpus = corpus_home
    items = questions(3)
    home, out = fresh_home(corpus_home, "work-home", tmp_path), tmp_path / "out"
    recipe = recipe_for(home, corpus)
    written: Counter[str] = Counter()
    real_write = cluster_module.write_answer

    def counting_write(answer, *args, **kwargs):
        written[answer.item_id] += 1
        return real_write(answer, *args, **kwargs)

    monkeypatch.setattr(cluster_module, "write_answer", counting_write)
    killed: list[int] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as watcher:
        pids = watcher.run(os.getpid)

        def kill_a_busy_worker(result) -> None:
            if killed:
                return
            busy = [addr for addr, keys in watcher.processing().items() if keys]
            assert busy, "no question was still running when the first one finished"
            killed.append(pids[busy[0]])
            os.kill(pids[busy[0]], signal.SIGKILL)

        results = run_batch(items, recipe, out, cluster=ClusterSpec("tcp", address=cluster.scheduler_address),
                            on_result=kill_a_busy_worker)
    assert killed
    assert [r.outcome for r in results] == ["done"] * 3, [(r.id, r.reason) for r in results]
    assert written == Counter({item.id: 1 for item in items})
    assert sorted(p.name for p in out.glob("*.md")) == sorted(f"{i.id}.md" for i in items)

    # A rerun replays: finished reports are skipped; forced, every call comes from the cache.
    again = run_batch(items, recipe, out, cluster=ClusterSpec("local", workers=1))
    assert [r.outcome for r in again] == ["skipped"] * 3
    before = cache_rows(home)
    forced = run_batch(items, recipe, out, force=True, cluster=ClusterSpec("local", workers=1))
    assert [r.outcome for r in forced] == ["done"] * 3
    assert sum(r.stats["model_calls"] for r in forced) == 0
    assert sum(r.stats["cache_hits"] for r in forced) == sum(r.stats["calls"] for r in forced) > 0
    assert cache_rows(home) == before

    resume_next_day(items, recipe, out, home, monkeypatch, cluster=ClusterSpec("local", workers=1))


# --------------------------------------------------------------------------- job scripts

JOB_CONFIG = """
[cluster]
workers = 3
cores = 8
memory = "16GB"
walltime = "02:00:00"
lifetime = "115m"
lifetime_stagger = "4m"
queue = "research"
account = "lab42"
extra_directives = ["--constraint=avx2"]
python = "python3"
"""


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_job_script_matches_its_snapshot(kind, tmp_path):
    config = tmp_path / "appliance.toml"
    directive = "--constraint=avx2" if kind == "slurm" else "-l place=scatter"
    config.write_text(JOB_CONFIG.replace("--constraint=avx2", directive), encoding="utf-8")
    env = app_env(tmp_path / "home", APPLIANCE_CONFIG=str(config))
    result = cli(["batch", "unused.txt", "--cluster", kind, "--print-job-script"], env)
    assert result.exit_code == 0, result.output
    snapshot = SNAPSHOTS / f"{kind}.sh"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(result.output, encoding="utf-8")
    assert result.output == snapshot.read_text(encoding="utf-8")
    # What the issue asks to see in it: threads, memory, walltime and the lifetime.
    for words in ("--nthreads 8", "--mem=15G" if kind == "slurm" else "mem=15GB", "02:00:00",
                  "--lifetime 115m", "--lifetime-stagger 4m", "MEMORY__TERMINATE=False",
                  "--resources appliance-model=1", directive):
        assert words in result.output, words


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("spec, words", [("yarn", "unknown cluster 'yarn'"), ("local:x", "local:2"),
                                          ("tcp://nohost", "tcp://HOST:PORT")])
def test_bad_cluster_spec_is_one_line(spec, words, tmp_path):
    questions_file = tmp_path / "q.txt"
    questions_file.write_text("How do basalt columns form?\n", encoding="utf-8")
    result = cli(["batch", str(questions_file), "--out", str(tmp_path / "out"), "--cluster", spec],
                 app_env(tmp_path / "home"))
    assert_one_line_error(result, UsageError.exit_code, words)


def test_parse_spec_kinds():
    assert parse_spec("local") == ClusterSpec("local")
    assert parse_spec("LOCAL:3") == ClusterSpec("local", workers=3)
    assert parse_spec("tcp://10.1.2.3:8786") == ClusterSpec("tcp", address="tcp://10.1.2.3:8786")
    assert parse_spec("pbs").kind == "pbs"


def test_print_job_script_for_a_local_cluster_is_refused(tmp_path):
    result = cli(["batch", "unused.txt", "--cluster", "local", "--print-job-script"], app_env(tmp_path / "home"))
    assert_one_line_error(result, UsageError.exit_code, "slurm or pbs")


def test_unreachable_scheduler_is_one_line(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it once closed
    questions_file = tmp_path / "q.txt"
    questions_file.write_text("How do basalt columns form?\n", encoding="utf-8")
    result = cli(["batch", str(questions_file), "--out", str(tmp_path / "out"), "--cluster",
                  f"tcp://127.0.0.1:{port}"], app_env(tmp_path / "home"))
    assert_one_line_error(result, UsageError.exit_code, f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}",
                          "dask scheduler")
