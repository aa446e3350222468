"""Faults, rows 7 and 8: disk full, read-only folders, failed writes, and SIGKILL at many
points followed by a rerun. See tests/fault_helpers.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.contracts import Source
from appliance.errors import StateError, UsageError
from appliance.pipeline.state import Recorder, write_atomic
from appliance.sources.fetch import PageCache
from conftest import cached_calls, read_jsonl
from fault_helpers import (HONEYBEE, any_page_script, app_env, assert_one_line_error, cli, files_under,
                           subprocess_env)


# ============================================================================ row 7: disk full, read-only

def _can_mount() -> bool:
    """Whether this process may mount file systems (root, with mount(8) at hand)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def mounted(kind: str, folder: Path, size: str = "64M"):
    """A tmpfs of ``size`` at ``folder``, or ``folder`` bind-mounted read-only over itself.

    Root ignores permission bits, so a read-only folder has to be a read-only mount."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tmpfs":
        command = [["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]]
    else:
        command = [["mount", "--bind", str(folder), str(folder)],
                   ["mount", "-o", "remount,bind,ro", str(folder)]]
    for step in command:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
            pytest.skip(f"cannot mount here ({done.stderr.strip()}); "
                        "test_failed_writes_keep_the_old_file covers the write paths")
    try:
        yield folder
    finally:
        # Lazy: the test process may still hold files of the mount open (caches, LanceDB).
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill_disk(folder: Path) -> None:
    """Write a file until the file system is full (unbuffered: nothing left to flush later)."""
    with (folder / "filler").open("wb", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while fh.write(b"\0" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


def seed_state(home: Path, out: Path) -> dict:
    """Work that exists before the fault: cached calls and a finished report."""
    from appliance.llm.cache import CallCache

    (home / "cache").mkdir(parents=True, exist_ok=True)
    cache = CallCache(home / "cache" / "calls.sqlite")
    rows = {f"earlier-{i}": json.dumps({"answer": i}) for i in range(20)}
    for key, raw in rows.items():
        cache.put(key, raw, {"purpose": "earlier run"})
    out.mkdir(parents=True, exist_ok=True)
    (out / "earlier.md").write_text("# Deep Dive: an earlier question\n", encoding="utf-8")
    (out / "earlier.json").write_text('{"status": "complete"}', encoding="utf-8")
    return rows


def check_state_intact(home: Path, out: Path, rows: dict) -> None:
    """Nothing written before the fault is damaged: the cache passes SQLite's integrity check
    and holds its rows, the earlier report is whole, and no half-written report is left."""
    with sqlite3.connect(home / "cache" / "calls.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = dict(conn.execute("SELECT key, raw FROM calls WHERE key LIKE 'earlier-%'").fetchall())
    assert stored == rows
    assert (out / "earlier.md").read_text(encoding="utf-8") == "# Deep Dive: an earlier question\n"
    assert (out / "earlier.json").read_text(encoding="utf-8") == '{"status": "complete"}'
    assert sorted(p.name for p in out.iterdir()) == ["earlier.json", "earlier.md"]


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_disk_full_mid_run(corpus_home, tmp_path):
    """The disk fills up after the first model call: one line naming the state folder, exit 6,
    and everything written before is intact."""
    src_home, corpus = corpus_home
    with mounted("tmpfs", tmp_path / "disk") as disk:
        home, out = disk / "home", disk / "reports"
        shutil.copytree(src_home / "lancedb", home / "lancedb")
        rows = seed_state(home, out)

        def fill_after_first_call():
            deadline = time.monotonic() + 300
            while cached_calls(home) <= len(rows) and time.monotonic() < deadline:
                time.sleep(0.05)
            fill_disk(disk)

        filler = threading.Thread(target=fill_after_first_call, daemon=True)
        filler.start()
        result = cli(["research", "What is the debt load for the US carried by the country Dai Jitao is from?",
                      "--profile", "quick", "--backend", "corpus", "--corpus", corpus, "--out", str(out)],
                     app_env(home))
        filler.join(timeout=10)
        # Whichever write met the full disk (the call cache, a run log, the claim table), its
        # message says to free space.
        assert_one_line_error(result, 6, "space")
        (disk / "filler").unlink()
        check_state_intact(home, out, rows)
        assert cached_calls(home) > len(rows), "the call finished before the disk filled is kept"


@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_disk_full_at_start(tmp_path, searxng):
    """A state folder on a full disk: one line before any work, and nothing damaged."""
    with mounted("tmpfs", tmp_path / "disk", size="16M") as disk:
        home, out = disk / "home", disk / "reports"
        rows = seed_state(home, out)
        fill_disk(disk)
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, "APPLIANCE_HOME")
        (disk / "filler").unlink()
        check_state_intact(home, out, rows)


@pytest.mark.searxng
def test_read_only_state_folder(tmp_path, searxng):
    """A read-only state folder (a read-only mount: root ignores permission bits): one line,
    exit 6, caches and reports untouched."""
    if not _can_mount():
        pytest.skip("needs root for a read-only bind mount")
    home, out = tmp_path / "home", tmp_path / "reports"
    rows = seed_state(home, out)
    with mounted("read-only", home):
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, "APPLIANCE_HOME")
    check_state_intact(home, out, rows)


@pytest.mark.searxng
def test_read_only_report_folder(tmp_path, searxng, cli_with_script):
    """The report folder is read-only: the run's work stays in the state folder, the error is
    one line, and the earlier report is untouched."""
    if not _can_mount():
        pytest.skip("needs root for a read-only bind mount")
    cli_with_script(any_page_script())
    home, out = tmp_path / "home", tmp_path / "reports"
    rows = seed_state(home, out)
    with mounted("read-only", out):
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, str(out), "Read-only file system")
    check_state_intact(home, out, rows)
    assert list((home / "runs").iterdir()), "the run's own records were kept"


class _HalfWritten:
    """A file object whose write stores half the data, then finds the disk full."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        self._fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


def _disk_full(monkeypatch, fault: str) -> None:
    """Make the one atomic write fail: half-way through the data, or when it is flushed to disk."""
    from appliance import atomic

    if fault == "write":
        monkeypatch.setattr(atomic, "open", lambda *a, **k: _HalfWritten(open(*a, **k)), raising=False)
    else:
        def no_space(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "fsync", no_space)


@pytest.mark.parametrize("fault", ["write", "fsync"])
@pytest.mark.parametrize("what", ["write_atomic", "page cache", "manifest", "hash cache"])
def test_failed_writes_keep_the_old_file(what, fault, tmp_path, monkeypatch):
    """Every user of the one atomic write (state and reports, page cache, model manifest, hash
    cache) meets a full disk: the old file is intact, no temporary file is left, and each says
    so its own way (StateError / UsageError with the cause; the caches only lose their copy)."""
    from appliance.llm.manifest import HashCache, Manifest, ModelEntry, load_manifest, save_manifest

    folder = tmp_path / "files"
    entry = ModelEntry(name="m", file="m.gguf", sha256="0" * 64, n_ctx_train=2048, roles=("planner",))
    if what == "write_atomic":
        target = folder / "report.md"
        write_atomic(target, "the old report\n")
        _disk_full(monkeypatch, fault)
        with pytest.raises(StateError, match="No space left on device"):
            write_atomic(target, "a new report that does not fit\n")
        monkeypatch.undo()
        assert target.read_text(encoding="utf-8") == "the old report\n"
    elif what == "page cache":
        cache = PageCache(folder)
        cache.put("example.org/a", Source(url="http://example.org/a", text="old text"))
        _disk_full(monkeypatch, fault)
        cache.put("example.org/a", Source(url="http://example.org/a", text="new text"))
        monkeypatch.undo()
        assert cache.get("example.org/a").text == "old text"
    elif what == "manifest":
        path = folder / "models.toml"
        save_manifest(Manifest(path=path, models=[entry]))
        _disk_full(monkeypatch, fault)
        with pytest.raises(UsageError, match="No space left on device"):
            save_manifest(Manifest(path=path, models=[]))
        monkeypatch.undo()
        assert [m.name for m in load_manifest(path).models] == ["m"]
    else:
        model = tmp_path / "m.gguf"
        model.write_bytes(b"weights")
        cache = HashCache(folder / "model_hashes.json")
        cache.put(model, "a" * 64)
        _disk_full(monkeypatch, fault)
        other = tmp_path / "n.gguf"
        other.write_bytes(b"other weights")
        cache.put(other, "b" * 64)  # not recorded, and no error: the cache only saves time
        monkeypatch.undo()
        assert cache.get(model) == "a" * 64 and cache.get(other) is None
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left"


def test_recorder_on_a_full_disk_keeps_what_it_logged(tmp_path, monkeypatch):
    """The run logs are appended, not replaced: a full disk is a StateError, earlier lines stay."""
    real_open = Path.open

    def full_disk_open(self, mode="r", *args, **kwargs):
        fh = real_open(self, mode, *args, **kwargs)
        if "a" in mode:
            def write(data):
                raise OSError(errno.ENOSPC, "No space left on device")
            fh.write = write
        return fh

    recorder = Recorder(tmp_path / "run")
    recorder.append("votes", {"vote": 1})
    monkeypatch.setattr(Path, "open", full_disk_open)
    with pytest.raises(StateError, match="free some space"):
        recorder.append("votes", {"vote": 2})
    monkeypatch.undo()
    assert read_jsonl(tmp_path / "run" / "votes.jsonl") == [{"vote": 1}]


# ============================================================================ row 8: SIGKILL

SIGKILL_QUESTION = "What is the debt load for the US carried by the country Dai Jitao is from?"
RUN_SPECIFIC = ("stats", "run_id")


def comparable(report: dict) -> dict:
    """A report without what differs between two runs of the same question by design."""
    return {k: v for k, v in report.items() if k not in RUN_SPECIFIC}


def check_after_kill(home: Path, out: Path) -> None:
    """What a kill may not leave behind: a damaged call cache, a torn row, a half report."""
    path = home / "cache" / "calls.sqlite"
    if path.exists():
        with sqlite3.connect(path, timeout=10) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            for raw, digest in conn.execute("SELECT raw, digest FROM calls"):
                assert hashlib.sha256(raw.encode("utf-8")).hexdigest() == digest
    for md in out.glob("*.md") if out.exists() else []:
        json.loads(md.with_suffix(".json").read_text(encoding="utf-8"))  # a report is whole or absent


def last_purpose(home: Path) -> str:
    """The purpose of the last model call the killed attempt recorded (where it was)."""
    for calls in (home / "runs").glob("*/calls.jsonl") if (home / "runs").exists() else []:
        lines = [line for line in calls.read_text(encoding="utf-8").splitlines() if line.strip()]
        for line in reversed(lines):
            try:
                return json.loads(line)["purpose"]
            except ValueError:
                continue  # a line cut by the kill
    return "startup"


def kill_schedule(total: int, gathered: int | None) -> list[tuple]:
    """Where to kill, as (point, seconds after it): during start-up, during the model load and
    the first call, then after every call (alternately at once and a second and a half into
    the next one), and once the claim table is being written (dedup)."""
    schedule: list[tuple] = [("time", 0.5), ("time", 3.0), ("model load", 0.0), ("model load", 1.0)]
    for n in range(1, total):
        schedule.append((n, 0.0 if n % 2 else 1.5))
        if n == gathered:
            schedule.append(("claim table", 0.0))
    return schedule


def kill_point_reached(point, home: Path, calls_before: int, claim_files: set[Path]):
    """A test for the moment ``point`` has come in a restarted run. A call point asks for at
    least one new call in this attempt, so that no two kills land in the same place."""
    if point == "time":
        return lambda: True
    if point == "model load":
        return lambda: (home / "cache" / "model_hashes.json").exists()
    if point == "claim table":
        return lambda: bool(files_under(home / "lancedb") - files_under(home / "lancedb" / "default.lance")
                            - claim_files)
    return lambda: cached_calls(home) >= max(point, calls_before + 1)


@pytest.mark.slow
def test_sigkill_at_many_points_then_rerun(corpus_home, tmp_path):
    """One run killed again and again (at start-up, during the model load, after and in the
    middle of model calls, in every phase it reaches) and restarted each time; each restart
    replays the cache and goes on. Then an uninterrupted rerun writes the very report an
    uninterrupted run writes."""
    home, corpus = corpus_home
    args = [sys.executable, "-m", "appliance", "research", SIGKILL_QUESTION, "--profile", "quick",
            "--corpus", corpus, "--backend", "corpus", "--json"]

    ref_home = tmp_path / "ref-home"
    shutil.copytree(home / "lancedb", ref_home / "lancedb")
    # Claims worded by the extractor (not the quick profile's picked sentences), so the run
    # reaches the votes and the claim table before its last calls: kill points in every phase.
    restating = {"APPLIANCE_PIPELINE_RESTATE_CLAIMS": "true"}
    ref = subprocess.run(args + ["--out", str(tmp_path / "ref")], env={**subprocess_env(app_env(ref_home)), **restating},
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    reference = json.loads(ref.stdout)
    total = reference["stats"]["calls"]
    purposes = [c["purpose"] for c in read_jsonl(ref_home / "runs" / reference["run_id"] / "calls.jsonl")]
    gathered = purposes.index("vote") if "vote" in purposes else None  # calls before the barrier
    # The question must make enough calls for the ten kills asserted below.
    assert len(kill_schedule(total, gathered)) >= 10, f"too few calls to kill between ({total})"

    out = tmp_path / "killed"
    env = {**subprocess_env(app_env(home)), **restating}
    kills: list[dict] = []
    for point, delay in kill_schedule(total, gathered):
        if cached_calls(home) >= total - 1:
            break  # a kill that lets two calls through (1.5 s) may leave the last for the final run alone
        if point == "model load":
            # Only a cache of verified hashes: without it the process hashes the file again and
            # writes it just before handing the file to llama.cpp, which marks the moment.
            (home / "cache" / "model_hashes.json").unlink(missing_ok=True)
        before = cached_calls(home)
        claim_files = files_under(home / "lancedb") - files_under(home / "lancedb" / "default.lance")
        proc = subprocess.Popen(args + ["--out", str(out)], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        reached = kill_point_reached(point, home, before, claim_files)
        while proc.poll() is None and time.monotonic() < started + 600 and not reached():
            time.sleep(0.02)
        time.sleep(delay)
        if proc.poll() is not None:  # the run finished before this point
            break
        proc.kill()
        proc.wait()
        kills.append({"point": point, "delay": delay, "after_seconds": round(time.monotonic() - started, 1),
                      "cached_calls": cached_calls(home), "last_call": last_purpose(home)})
        check_after_kill(home, out)
    (tmp_path / "kills.json").write_text(json.dumps(kills, indent=1))
    print(f"\nSIGKILL points: {len(kills)}")
    for kill in kills:
        print(f"  {kill}")
    assert len(kills) >= 10, kills

    done_before = cached_calls(home)
    assert 0 < done_before < total
    final = subprocess.run(args + ["--out", str(out)], env=env, capture_output=True, text=True,
                           timeout=900, cwd=tmp_path)
    assert final.returncode == 0, final.stderr[-3000:]
    resumed = json.loads(final.stdout)
    check_after_kill(home, out)
    # Nothing done before the kills is done again: every call they left replays.
    assert resumed["stats"]["cache_hits"] >= done_before
    assert resumed["stats"]["calls"] - resumed["stats"]["cache_hits"] <= total - done_before
    assert resumed["stats"]["cache_hits"] >= cached_calls(home) - 1 > 0
    assert comparable(resumed) == comparable(reference)
