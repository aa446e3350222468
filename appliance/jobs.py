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
import sqlite3
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
        jobs = self._tx(lambda c: self._select(c, "SELECT * FROM jobs WHERE id = ?", (job_id,)))
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
        return self._tx(lambda c: self._select(c, sql, (*args, limit)))

    def counts(self) -> dict[str, int]:
        rows = self._tx(lambda c: c.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
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
        row = self._tx(lambda c: c.execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone())
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
    """Worker threads that take jobs from the queue and run them like `appliance research`."""

    def __init__(self, queue: JobQueue, config_file: str | None = None, *, workers: int = 1,
                 poll_seconds: float = 0.3):
        self.queue = queue
        self.config_file = config_file
        self.workers = max(0, workers)   # 0: queue only, nothing runs (maintenance, tests)
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock_file: Any = None

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
        for number in range(self.workers):
            thread = threading.Thread(target=self._loop, name=f"job-worker-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return recovered

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        if self._lock_file:
            self._lock_file.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self.queue.claim_next()
            if job is None:
                self._stop.wait(self.poll_seconds)
                continue
            self.run_job(job)

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
