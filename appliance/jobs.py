"""One persistent job queue for every served face (HTTP API, MCP): SQLite in the state folder.

A job is one question with the options of `appliance research`. Workers run it through the
very code the CLI uses (``open_run_parts`` then ``pipeline.run.research``); the queue adds
only order, status and cancel. A server killed mid-run finds its running jobs on restart and
puts them back at the head of the queue: rerun on the same date, they replay every model call
the call cache holds, so nothing submitted is lost and nothing finished is redone.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import sys
import threading
import time
import uuid
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from . import questions
from .config import Settings, SettingsRecipe, state_dir
from .contracts import BACKENDS, PROFILES, RunStatus
from .errors import ApplianceError, RunCancelled, StateError, UsageError

log = logging.getLogger("appliance.jobs")

STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINISHED = frozenset({"done", "failed", "cancelled"})
# Queued jobs beyond this are refused (HTTP 429): a loop of submissions must not fill the
# disk or bury the real work. Overridable with `serve --max-queued`.
DEFAULT_MAX_QUEUED = 100
JOB_ID_CHARS = 12
_ROLES = ("planner", "extractor", "verifier", "writer")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id        TEXT PRIMARY KEY,
    seq       INTEGER NOT NULL,
    question  TEXT NOT NULL,
    profile   TEXT, backend TEXT, corpus TEXT, model TEXT,
    date      TEXT NOT NULL,
    status    TEXT NOT NULL,
    phase     TEXT NOT NULL DEFAULT '',
    nodes     TEXT NOT NULL DEFAULT '{}',
    run_status TEXT NOT NULL DEFAULT '',
    error     TEXT NOT NULL DEFAULT '',
    stats     TEXT NOT NULL DEFAULT '{}',
    report    TEXT NOT NULL DEFAULT '',
    attempts  INTEGER NOT NULL DEFAULT 0,
    cancel    INTEGER NOT NULL DEFAULT 0,
    created   REAL NOT NULL,
    started   REAL,
    finished  REAL
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
"""


class QueueFull(ApplianceError):
    """The queue holds its limit of queued jobs."""

    exit_code = 2


@dataclass
class JobRequest:
    """What a face submits: a question and the options of `appliance research`."""

    question: str
    profile: str | None = None
    backend: str | None = None
    corpus: str | None = None
    model: str | None = None

    def checked(self) -> "JobRequest":
        """The request with its question cleaned; UsageError naming the bad field otherwise."""
        from .questions import clean_question

        if self.profile is not None and self.profile not in PROFILES:
            raise UsageError(f"unknown profile {self.profile!r}", hint=f"one of {', '.join(PROFILES)}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}", hint=f"one of {', '.join(BACKENDS)}")
        for name in ("corpus", "model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise UsageError(f"{name} must be a non-empty name")
        return JobRequest(clean_question(self.question), self.profile, self.backend, self.corpus, self.model)

    def recipe(self, config_file: str | None) -> SettingsRecipe:
        """The settings recipe `appliance research` builds from the same options."""
        overrides: dict[str, Any] = {"search.backend": self.backend, "search.corpus": self.corpus}
        if self.model:
            overrides.update({f"models.{role}": self.model for role in _ROLES})
        return SettingsRecipe(config_file, self.profile,
                              tuple((k, v) for k, v in overrides.items() if v is not None))


@dataclass
class Job:
    """One row of the queue, as the faces show it."""

    id: str
    question: str
    profile: str | None
    backend: str | None
    corpus: str | None
    model: str | None
    date: str
    status: str
    phase: str = ""
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    run_status: str = ""
    error: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    report: str = ""
    attempts: int = 0
    cancel: bool = False
    created: float = 0.0
    started: float | None = None
    finished: float | None = None

    @property
    def request(self) -> JobRequest:
        return JobRequest(self.question, self.profile, self.backend, self.corpus, self.model)

    def as_dict(self) -> dict[str, Any]:
        """The job as JSON-ready data (the report path stays server-side)."""
        data = asdict(self)
        data.pop("report")
        data["has_report"] = bool(self.report)
        end = self.finished or (time.time() if self.started else None)
        data["elapsed"] = round(end - self.started, 3) if end and self.started else None
        return data


def valid_job_id(text: str) -> bool:
    """A job id as the queue makes them: 'j-' and hex digits, never a path."""
    return (len(text) == 2 + JOB_ID_CHARS and text.startswith("j-")
            and all(c in "0123456789abcdef" for c in text[2:]))


class JobQueue:
    """The SQLite queue at ``<state>/serve/jobs.sqlite``; each call is one short transaction."""

    def __init__(self, path: Path, *, max_queued: int = DEFAULT_MAX_QUEUED):
        self.path = Path(path)
        self.max_queued = max_queued
        self._lock = threading.Lock()
        self._local = threading.local()  # each thread's reading connection
        with self._conn() as conn:
            conn.executescript(_SCHEMA)

    @classmethod
    def for_settings(cls, settings: Settings, **kwargs: Any) -> "JobQueue":
        return cls(state_dir(settings, "serve") / "jobs.sqlite", **kwargs)

    def _conn(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise StateError(f"job queue {self.path} cannot be used: {exc}",
                             hint="set APPLIANCE_HOME to a writable folder") from None
        return conn

    def _read(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """``work`` in one read transaction on this thread's own connection, kept open. Reads
        take no lock: in WAL mode they never wait for the worker's writes nor hold them up, so
        a server answering many status requests does not slow the run it reports on."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._conn()
            conn.row_factory = sqlite3.Row
        try:
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._local.conn = None
            conn.close()
            raise StateError(f"job queue {self.path} cannot be used: {exc}",
                             hint="set APPLIANCE_HOME to a writable folder with free space") from None

    def _tx(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._lock, closing(self._conn()) as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                result = work(conn)
                conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise StateError(f"job queue {self.path} cannot be used: {exc}",
                                 hint="set APPLIANCE_HOME to a writable folder with free space") from None

    @staticmethod
    def _job(row: sqlite3.Row) -> Job:
        data = dict(row)
        data.pop("seq")
        data["nodes"] = json.loads(data["nodes"])
        data["stats"] = json.loads(data["stats"])
        data["cancel"] = bool(data["cancel"])
        return Job(**data)

    def _select(self, conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[Job]:
        conn.row_factory = sqlite3.Row
        return [self._job(r) for r in conn.execute(sql, args).fetchall()]

    # -- submitting and reading

    def submit(self, request: JobRequest, *, today: dt.date | None = None) -> Job:
        """Queue a checked request; QueueFull when ``max_queued`` jobs already wait."""
        job_id = "j-" + uuid.uuid4().hex[:JOB_ID_CHARS]
        date = (today or questions.today()).isoformat()

        def insert(conn: sqlite3.Connection) -> Job:
            waiting = conn.execute("SELECT count(*) FROM jobs WHERE status = 'queued'").fetchone()[0]
            if waiting >= self.max_queued:
                raise QueueFull(f"the queue already holds {waiting} queued runs (limit {self.max_queued})",
                                hint="wait for some to finish, or cancel some")
            seq = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM jobs").fetchone()[0]
            conn.execute("INSERT INTO jobs (id, seq, question, profile, backend, corpus, model, date, status,"
                         " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
                         (job_id, seq, request.question, request.profile, request.backend, request.corpus,
                          request.model, date, time.time()))
            return self._select(conn, "SELECT * FROM jobs WHERE id = ?", (job_id,))[0]

        return self._tx(insert)

    def get(self, job_id: str) -> Job | None:
        if not valid_job_id(job_id):
            return None
        jobs = self._read(lambda c: self._select(c, "SELECT * FROM jobs WHERE id = ?", (job_id,)))
        return jobs[0] if jobs else None

    def list_jobs(self, *, status: str | None = None, text: str | None = None, limit: int = 100) -> list[Job]:
        """Newest first; ``status`` filters, ``text`` matches questions (case-insensitive)."""
        where, args = [], []
        if status:
            where.append("status = ?")
            args.append(status)
        if text:
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("question LIKE ? ESCAPE '\\'")
            args.append(f"%{escaped}%")
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq DESC LIMIT ?"
        return self._read(lambda c: self._select(c, sql, (*args, limit)))

    def counts(self) -> dict[str, int]:
        rows = self._read(lambda c: c.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
        return {status: dict(rows).get(status, 0) for status in STATUSES}

    # -- the worker's side

    def recover(self) -> list[str]:
        """Jobs left running by a dead server go back to the head of the queue (by their order)."""
        def requeue(conn: sqlite3.Connection) -> list[str]:
            ids = [r[0] for r in conn.execute("SELECT id FROM jobs WHERE status = 'running' ORDER BY seq")]
            conn.execute("UPDATE jobs SET status = 'queued' WHERE status = 'running'")
            return ids

        return self._tx(requeue)

    def claim_next(self) -> Job | None:
        """Take the oldest queued job and mark it running, atomically: no job runs twice at once.
        Jobs re-entered by ``recover`` have been tried before and go first."""
        def claim(conn: sqlite3.Connection) -> Job | None:
            jobs = self._select(conn, "SELECT * FROM jobs WHERE status = 'queued' "
                                      "ORDER BY attempts > 0 DESC, seq LIMIT 1")
            if not jobs:
                return None
            conn.execute("UPDATE jobs SET status = 'running', attempts = attempts + 1, started = ?, "
                         "phase = 'starting' WHERE id = ?", (time.time(), jobs[0].id))
            return self._select(conn, "SELECT * FROM jobs WHERE id = ?", (jobs[0].id,))[0]

        return self._tx(claim)

    def set_phase(self, job_id: str, phase: str) -> None:
        self._tx(lambda c: c.execute("UPDATE jobs SET phase = ? WHERE id = ?", (phase, job_id)))

    def set_node(self, job_id: str, node_id: str, question: str, status: str) -> None:
        def update(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT nodes FROM jobs WHERE id = ?", (job_id,)).fetchone()
            nodes = json.loads(row[0]) if row else {}
            nodes[node_id] = {"question": question, "status": status}
            conn.execute("UPDATE jobs SET nodes = ? WHERE id = ?", (json.dumps(nodes), job_id))

        self._tx(update)

    def finish(self, job_id: str, status: str, *, run_status: str = "", error: str = "",
               stats: dict | None = None, report: str = "") -> None:
        self._tx(lambda c: c.execute(
            "UPDATE jobs SET status = ?, run_status = ?, error = ?, stats = ?, report = ?, finished = ?, "
            "phase = 'finished' WHERE id = ?",
            (status, run_status, error, json.dumps(stats or {}, default=str), report, time.time(), job_id)))

    def cancel_requested(self, job_id: str) -> bool:
        row = self._read(lambda c: c.execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone())
        return bool(row and row[0])

    # -- cancel and delete

    def cancel(self, job_id: str) -> Job | None:
        """A queued job is cancelled at once; a running one is flagged and stops at its next
        model call. Returns the job as it now is (None when there is no such job)."""
        def mark(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE jobs SET status = 'cancelled', finished = ?, phase = 'finished' "
                         "WHERE id = ? AND status = 'queued'", (time.time(), job_id))
            conn.execute("UPDATE jobs SET cancel = 1 WHERE id = ? AND status = 'running'", (job_id,))

        if not valid_job_id(job_id):
            return None
        self._tx(mark)
        return self.get(job_id)

    def delete(self, job_id: str) -> bool:
        """Forget a finished job and remove its report files (they live in the queue's folder)."""
        job = self.get(job_id)
        if job is None or job.status not in FINISHED:
            return False
        self._tx(lambda c: c.execute("DELETE FROM jobs WHERE id = ?", (job_id,)))
        if job.report:
            md = Path(job.report)
            for path in (md, md.with_suffix(".json")):
                if path.parent == self.reports_dir:
                    path.unlink(missing_ok=True)
        return True

    @property
    def reports_dir(self) -> Path:
        return self.path.parent / "reports"


class _CancelGuard:
    """An engine that asks the queue before every call whether its job was cancelled."""

    def __init__(self, engine: Any, check: Callable[[], None]):
        self._engine = engine
        self._check = check

    def structured(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._engine.structured(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def guard_models(models: Any, check: Callable[[], None]) -> Any:
    """The run's Models with every engine behind one cancel guard (one guard per engine, so
    engines shared by roles stay shared)."""
    from .pipeline.parts import Models

    guards: dict[int, _CancelGuard] = {}
    for engine in models.engines():
        guards[id(engine)] = _CancelGuard(engine, check)
    return Models(**{role: guards[id(getattr(models, role))] for role in _ROLES})


class Runner:
    """Workers that take jobs from the queue and run them like `appliance research`.

    Each worker is a process of its own (``isolated``, the default): a run's Python never
    waits on the interpreter lock of the process answering requests, and a worker that dies
    (a crash in native code, the OOM killer) fails its one job with a reason and is replaced,
    while the server goes on. A worker dies with the process that started it, so a killed
    server never leaves a run going behind the one its restart re-enters. ``isolated=False``
    runs the workers as threads of this process (a host that cannot start processes)."""

    def __init__(self, queue: JobQueue, config_file: str | None = None, *, workers: int = 1,
                 poll_seconds: float = 0.3, isolated: bool = True):
        self.queue = queue
        self.config_file = config_file
        self.workers = max(0, workers)   # 0: queue only, nothing runs (maintenance, tests)
        self.poll_seconds = poll_seconds
        self.isolated = isolated
        self._stop: Any = threading.Event()
        self._threads: list[threading.Thread] = []
        self._processes: list[Any] = []
        self._current: list[Any] = []    # per worker process: the id of the job it runs, or b""
        self._lock_file: Any = None
        self.replaced = 0                # worker processes that died and were started again

    def start(self) -> list[str]:
        """Take the state folder's serve lock, re-enter jobs a dead server left running and
        start the workers; returns the re-entered ids."""
        self._lock_file = open(self.queue.path.parent / "serve.lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            raise StateError(f"another server runs on the queue in {self.queue.path.parent}",
                             hint="stop it, or set APPLIANCE_HOME to another state folder") from None
        recovered = self.queue.recover()
        for ids in recovered:
            log.info("re-entering job %s (the server stopped while it ran)", ids)
        if self.isolated and self.workers:
            context = multiprocessing.get_context("spawn")   # nothing of this process's threads
            self._stop = context.Event()
            self._context = context
            self._current = [context.Array("c", 2 + JOB_ID_CHARS) for _ in range(self.workers)]
            self._processes = [self._spawn(number) for number in range(self.workers)]
            watch = threading.Thread(target=self._supervise, name="job-supervisor", daemon=True)
            watch.start()
            self._threads.append(watch)
        elif self.workers:
            for number in range(self.workers):
                thread = threading.Thread(target=self._loop, name=f"job-worker-{number}", daemon=True)
                thread.start()
                self._threads.append(thread)
        return recovered

    def _spawn(self, number: int) -> Any:
        process = self._context.Process(
            target=_worker_main, name=f"job-worker-{number}", daemon=True,
            args=(str(self.queue.path), self.config_file, self.poll_seconds, self._stop,
                  self._current[number], os.getpid(), logging.getLogger().getEffectiveLevel()))
        process.start()
        return process

    def _supervise(self) -> None:
        """Replace a worker process that died while the server runs; its job fails in one line."""
        while not self._stop.wait(0.5):
            for number, process in enumerate(self._processes):
                if process.is_alive() or self._stop.is_set():
                    continue
                job_id = self._current[number].value.decode()
                reason = (f"the worker process died (signal {-process.exitcode})" if (process.exitcode or 0) < 0
                          else f"the worker process exited with status {process.exitcode}")
                log.error("worker %d: %s%s; starting another", number, reason, f" running job {job_id}" if job_id else "")
                if job_id:
                    job = self.queue.get(job_id)
                    if job is not None and job.status == "running":
                        self.queue.finish(job_id, "failed", error=reason)
                    self._current[number].value = b""
                self._processes[number] = self._spawn(number)
                self.replaced += 1

    def stop(self, timeout: float = 5.0) -> None:
        """Ask every worker to stop at its next model call (its job is queued again), and
        end what has not stopped after ``timeout`` seconds: a job left running is re-entered
        by the next start."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
        if self._lock_file:
            self._lock_file.close()

    def _loop(self, current: Any = None) -> None:
        while not self._stop.is_set():
            job = self.queue.claim_next()
            if job is None:
                self._stop.wait(self.poll_seconds)
                continue
            if current is not None:
                current.value = job.id.encode()
            self.run_job(job)
            if current is not None:
                current.value = b""

    def run_job(self, job: Job) -> None:
        """Run one claimed job to its end; every outcome is a status and a one-line reason."""
        try:
            self._research(job)
        except ApplianceError as exc:
            log.warning("job %s failed: %s", job.id, exc.one_line())
            self.queue.finish(job.id, "failed", error=exc.one_line())
        except Exception as exc:  # noqa: BLE001 - a worker must outlive any one job
            log.error("job %s failed: %s: %s", job.id, type(exc).__name__, str(exc).replace("\n", " "))
            self.queue.finish(job.id, "failed", error=f"{type(exc).__name__}: {exc}")

    def _research(self, job: Job) -> None:
        from .pipeline.parts import open_run_parts
        from .pipeline.run import research
        from .pipeline.state import Progress

        settings = job.request.recipe(self.config_file).build()

        def check() -> None:
            if self._stop.is_set():
                raise RunCancelled("the server is stopping")
            if self.queue.cancel_requested(job.id):
                raise RunCancelled("cancelled on request")

        models, backend, fetcher, embedder = open_run_parts(settings)
        progress = Progress(on_node=lambda nid, q, s: self.queue.set_node(job.id, nid, q, s),
                            on_phase=lambda phase: self.queue.set_phase(job.id, phase))
        self.queue.reports_dir.mkdir(parents=True, exist_ok=True)
        with fetcher:
            result = research(job.question, settings, models=guard_models(models, check), backend=backend,
                              fetcher=fetcher, embedder=embedder, out_dir=self.queue.reports_dir,
                              progress=progress, today=dt.date.fromisoformat(job.date), report_name=job.id)
        status = RunStatus(result.status)
        if status == RunStatus.cancelled and self._stop.is_set() and not self.queue.cancel_requested(job.id):
            # Stopped by the server's own shutdown, not by a user: queued again for the next start.
            self.queue._tx(lambda c: c.execute("UPDATE jobs SET status = 'queued' WHERE id = ?", (job.id,)))
            return
        outcome = "cancelled" if status == RunStatus.cancelled else ("failed" if status.failed else "done")
        self.queue.finish(job.id, outcome, run_status=status.value,
                          error=str(result.report.get("error") or ""), stats=result.report.get("stats", {}),
                          report=str(result.markdown_path))


def _die_with_parent(parent: int) -> None:
    """End this process when ``parent`` ends: at once on Linux (the kernel's parent-death
    signal), and by a watch on the parent's pid everywhere."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:   # it ended before the signal was set
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(queue_path: str, config_file: str | None, poll_seconds: float, stop: Any, current: Any,
                 parent: int, log_level: int) -> None:
    """A worker process: the thread worker's loop over the same queue, stopped by ``stop``.
    Ctrl-C reaches the whole process group; the server alone decides when workers stop."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Standard output may be a protocol stream (the MCP server's STDIO): never write to it.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdout = open(os.devnull, "w")
    logging.basicConfig(level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    runner = Runner(JobQueue(Path(queue_path)), config_file, workers=0, poll_seconds=poll_seconds,
                    isolated=False)
    runner._stop = stop
    runner._loop(current)


def wait_for(queue: JobQueue, job_id: str, timeout: float, poll: float = 0.5) -> Iterator[Job]:
    """Yield the job each time it changes until it finishes or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: tuple | None = None
    while time.monotonic() < deadline:
        job = queue.get(job_id)
        if job is None:
            return
        key = (job.status, job.phase, json.dumps(job.nodes, sort_keys=True))
        if key != last:
            last = key
            yield job
        if job.status in FINISHED:
            return
        time.sleep(poll)
