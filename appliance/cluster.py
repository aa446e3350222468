"""Batches on Dask: a local cluster, a running scheduler, or Slurm/PBS jobs (dask-jobqueue).

Each question is one Dask task. A worker process loads its models once (the first question
it gets builds them from the settings recipe: paths travel, models never do) and answers
question after question. Workers write nothing the client owns: a question's calls go to an
in-memory cache seeded with the calls the client already holds for it, its run folder to the
worker's scratch folder; the report, the run folder's files and the calls made come back with
the task's result, and the client alone writes the output folder, the run folders and the
call cache. So a batch resumes exactly as an in-process one does, and a worker lost
mid-question loses only that question's unsaved work: Dask runs the task again elsewhere and
its one result is written once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .config import Settings, SettingsRecipe, state_dir
from .errors import ApplianceError, UsageError
from .llm.cache import CachedCall, CallCache

if TYPE_CHECKING:
    from .batch import BatchItem, ItemResult

SPEC_HINT = "use local, local:N (N workers), tcp://HOST:PORT (a running Dask scheduler), slurm or pbs"
JOB_KINDS = ("slurm", "pbs")
# Every task asks for one unit: a jobqueue worker has as many threads as its job has cores
# (llama.cpp uses them) but answers one question at a time (one model, one context).
MODEL_RESOURCE = "appliance-model"
_PLACEHOLDER_SCHEDULER = "tcp://SCHEDULER-ADDRESS:8786"


@dataclass(frozen=True)
class ClusterSpec:
    """Where the questions go: kind local, tcp, slurm or pbs."""

    kind: str
    workers: int = 0            # local: 0 means the [cluster] workers setting
    address: str = ""           # tcp: the scheduler

    def label(self) -> str:
        if self.kind == "tcp":
            return self.address
        return f"{self.kind}:{self.workers}" if self.workers else self.kind


def parse_spec(text: str) -> ClusterSpec:
    """``local``, ``local:N``, ``tcp://HOST:PORT``, ``slurm`` or ``pbs``; UsageError otherwise."""
    spec = text.strip()
    low = spec.lower()
    if low == "local":
        return ClusterSpec("local")
    if low.startswith("local:"):
        count = low.split(":", 1)[1]
        if not count.isdigit() or not 1 <= int(count) <= 64:
            raise UsageError(f"cluster {spec!r}: the worker count must be a number from 1 to 64",
                             hint="write local:2 for two worker processes")
        return ClusterSpec("local", workers=int(count))
    if low.startswith("tcp://"):
        host, _, port = spec[len("tcp://"):].rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"cluster {spec!r} is not tcp://HOST:PORT",
                             hint="give the address the Dask scheduler prints, e.g. tcp://10.0.0.5:8786")
        return ClusterSpec("tcp", address=spec)
    if low in JOB_KINDS:
        return ClusterSpec(low)
    raise UsageError(f"unknown cluster {spec!r}", hint=SPEC_HINT)


def worker_threads(settings: Settings, spec: ClusterSpec) -> int:
    """llama.cpp threads per worker, given explicitly: a nanny sets OMP_NUM_THREADS=1."""
    if settings.cluster.cores:
        return settings.cluster.cores
    if spec.kind in JOB_KINDS:
        return 4
    if settings.llm.n_threads:
        return settings.llm.n_threads
    return max(1, (os.cpu_count() or 2) // local_workers(settings, spec))


def local_workers(settings: Settings, spec: ClusterSpec) -> int:
    return spec.workers or settings.cluster.workers


# --------------------------------------------------------------------------- job scripts

def _job_kwargs(settings: Settings, spec: ClusterSpec) -> dict[str, Any]:
    conf = settings.cluster
    threads = worker_threads(settings, spec)
    extra = ["--resources", f"{MODEL_RESOURCE}=1"]
    if conf.lifetime:
        extra += ["--lifetime", conf.lifetime]
        if conf.lifetime_stagger:
            extra += ["--lifetime-stagger", conf.lifetime_stagger]
    kwargs: dict[str, Any] = {
        "cores": threads, "processes": 1, "memory": conf.memory, "walltime": conf.walltime,
        "job_name": "appliance", "worker_extra_args": extra,
        "job_extra_directives": list(conf.extra_directives),
        # The worker's memory limit counts the memory-mapped GGUF: the nanny must not act on it.
        "job_script_prologue": [
            "export DASK_DISTRIBUTED__WORKER__MEMORY__TARGET=False",
            "export DASK_DISTRIBUTED__WORKER__MEMORY__SPILL=False",
            "export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False",
            "export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False",
        ],
    }
    if conf.queue:
        kwargs["queue"] = conf.queue
    if conf.account:
        kwargs["account"] = conf.account
    if conf.local_directory:
        kwargs["local_directory"] = conf.local_directory
    if conf.python:
        kwargs["python"] = conf.python
    return kwargs


def _job_classes(kind: str):
    if kind == "slurm":
        from dask_jobqueue.slurm import SLURMCluster, SLURMJob

        return SLURMJob, SLURMCluster
    from dask_jobqueue.pbs import PBSCluster, PBSJob

    return PBSJob, PBSCluster


def job_script(settings: Settings, spec: ClusterSpec) -> str:
    """The Slurm or PBS script one worker job would run, rendered without a scheduler."""
    if spec.kind not in JOB_KINDS:
        raise UsageError(f"--print-job-script needs --cluster slurm or pbs, not {spec.label()!r}",
                         hint="local clusters and running schedulers submit no job script")
    job_cls, _ = _job_classes(spec.kind)
    try:
        return str(job_cls(scheduler=_PLACEHOLDER_SCHEDULER, name="appliance-worker",
                           **_job_kwargs(settings, spec)).job_script())
    except ValueError as exc:
        raise UsageError(f"cannot render the {spec.kind} job script: {exc}",
                         hint="check the [cluster] settings (memory like \"8GB\", walltime HH:MM:SS)") from None


# --------------------------------------------------------------------------- the client

@contextmanager
def open_client(settings: Settings, spec: ClusterSpec) -> Iterator[Any]:
    """A Dask client on the cluster ``spec`` names, closed (and a cluster it started shut down) on exit."""
    import dask
    from distributed import Client, LocalCluster

    threads = worker_threads(settings, spec)
    cluster: Any = None
    quiet = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
             "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False,
             "distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS": threads,
             "distributed.scheduler.allowed-failures": 3}
    with dask.config.set(quiet):
        try:
            if spec.kind == "local":
                # memory_limit=0: no limit, so a memory-mapped model never gets a worker killed.
                cluster = LocalCluster(n_workers=local_workers(settings, spec), threads_per_worker=1,
                                       processes=True, memory_limit=0, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=logging.ERROR,
                                       local_directory=settings.cluster.local_directory or None,
                                       resources={MODEL_RESOURCE: 1})
                client = Client(cluster)
            elif spec.kind == "tcp":
                client = Client(spec.address, timeout="5s")
            else:
                _, cluster_cls = _job_classes(spec.kind)
                cluster = cluster_cls(**_job_kwargs(settings, spec))
                cluster.scale(jobs=settings.cluster.workers)
                client = Client(cluster)
        except (OSError, TimeoutError) as exc:
            if cluster is not None:
                cluster.close()
            raise UsageError(f"cannot reach the Dask scheduler at {spec.label()}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                             hint="start it (`dask scheduler`) and workers (`dask worker ADDRESS "
                                  f"--nthreads 1 --resources {MODEL_RESOURCE}=1`), or use --cluster local") from None
        try:
            yield client
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def _shipped_calls(cache: CallCache | None, settings: Settings, item: BatchItem) -> list[tuple[str, str, dict]]:
    """The cached calls an earlier attempt at this question made (its run folder's calls.jsonl
    names their keys), so that the worker replays them instead of calling its model."""
    from .questions import run_id_for, today

    if cache is None:
        return []
    run_id = run_id_for(item.question, item.date or today().isoformat(), item.profile or settings.pipeline.profile)
    log = state_dir(settings, "runs") / run_id / "calls.jsonl"
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    rows, seen = [], set()
    for line in lines:
        try:
            key = json.loads(line).get("key")
        except (ValueError, AttributeError):
            continue  # a line cut by a kill
        if not isinstance(key, str) or key in seen:
            continue
        seen.add(key)
        hit = cache.get(key)
        if hit is not None:
            rows.append((key, hit.raw, hit.meta))
    return rows


def run_on_cluster(items: list[BatchItem], todo: list[int], recipe: SettingsRecipe, out_dir: Path,
                   spec: ClusterSpec, deliver: Callable[[int, ItemResult], None]) -> None:
    """Answer ``items[i]`` for each i in ``todo`` on the cluster; ``deliver(i, result)`` once
    each, after the client has written the question's report, run folder and calls."""
    from distributed import as_completed

    from .batch import ItemResult
    from .pipeline.parts import check_run_parts

    settings = recipe.build()
    # What a worker will load is checked here, so a bad model or corpus is one line, and
    # before jobs are submitted or workers started (a running scheduler is asked first: that
    # it answers is the cheaper check).
    if spec.kind != "tcp":
        check_run_parts(settings)
    cache = CallCache.for_settings(settings) if settings.llm.cache else None
    threads = worker_threads(settings, spec)
    with open_client(settings, spec) as client:
        if spec.kind == "tcp":
            check_run_parts(settings)
        futures = {}
        for index in todo:
            item = items[index]
            # pure=False: a rerun of the same question is new work, never a cached Dask result.
            future = client.submit(answer_on_worker, item, recipe, threads,
                                   _shipped_calls(cache, settings, item), settings.cluster.local_directory,
                                   pure=False, key=f"appliance-{item.id}-{os.urandom(4).hex()}",
                                   resources={MODEL_RESOURCE: 1} if spec.kind != "tcp" else None)
            futures[future] = index
        for future in as_completed(list(futures)):
            index = futures.pop(future)
            item = items[index]
            try:
                answer: WorkerAnswer = future.result()
            except Exception as exc:  # noqa: BLE001 - a lost task is this question's failure, not the batch's
                if isinstance(exc, ApplianceError):
                    reason = exc.one_line()
                else:
                    text = str(exc).splitlines()[0] if str(exc) else ""
                    reason = f"{type(exc).__name__} on the cluster: {text}".rstrip(": ")
                deliver(index, ItemResult(item.id, item.question, "failed", reason=reason))
                continue
            deliver(index, write_answer(answer, settings, cache, out_dir))


def write_answer(answer: WorkerAnswer, settings: Settings, cache: CallCache | None, out_dir: Path) -> ItemResult:
    """Write what a worker sent back, in the order resume relies on: the calls, the run
    folder, then the report (JSON first: a complete .md marks a finished report)."""
    from .pipeline.state import write_atomic

    if cache is not None:
        for key, raw, meta in answer.calls:
            cache.put(key, raw, meta)
    run_dir = state_dir(settings, "runs") / answer.run_id
    for name, text in answer.run_files.items():
        write_atomic(run_dir / name, text)
    result = answer.result
    if answer.report_json and answer.report_md:
        write_atomic(out_dir / f"{answer.item_id}.json", answer.report_json)
        md = out_dir / f"{answer.item_id}.md"
        write_atomic(md, answer.report_md)
        result.report = str(md)
    result.worker = answer.worker
    return result


# --------------------------------------------------------------------------- the worker

class ShippedCache(CallCache):
    """The call cache of one question on a worker: in memory, seeded with the calls the client
    shipped, keeping what the question adds. Workers never open the shared SQLite file (WAL
    does not work on network file systems, and only the client writes it)."""

    def __init__(self) -> None:  # noqa: D107 - no file behind it
        self.path = Path("<shipped calls>")
        self.timeout = 0.0
        self._rows: dict[str, CachedCall] = {}
        self.made: list[tuple[str, str, dict]] = []

    def load(self, rows: list[tuple[str, str, dict]]) -> None:
        """Start a question: these calls are known, none made yet."""
        self._rows = {key: CachedCall(raw=raw, meta=dict(meta)) for key, raw, meta in rows}
        self.made = []

    def get(self, key: str) -> CachedCall | None:
        return self._rows.get(key)

    def put(self, key: str, raw: str, meta: dict[str, Any]) -> None:
        self._rows[key] = CachedCall(raw=raw, meta=dict(meta))
        self.made.append((key, raw, dict(meta)))

    def delete(self, key: str) -> None:
        self._rows.pop(key, None)

    def count(self) -> int:
        return len(self._rows)


@dataclass
class WorkerAnswer:
    """One question's work, shipped from the worker to the client."""

    item_id: str
    run_id: str
    result: ItemResult
    report_md: str = ""
    report_json: str = ""
    run_files: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, dict]] = field(default_factory=list)
    worker: dict[str, Any] = field(default_factory=dict)   # pid, host, model loads of that process


# One loaded worker per process and settings recipe; loads counts how often this process
# loaded its models (once, unless a question names another profile's models).
_WORKERS: dict[tuple[SettingsRecipe, int], tuple[Any, ShippedCache]] = {}
_LOADS = 0
_MODEL_LOCK = threading.Lock()   # one question at a time per process: one model, one context


def _cluster_worker(recipe: SettingsRecipe, threads: int):
    """This process's loaded worker for ``recipe`` (its models loaded on first use)."""
    global _LOADS
    from .batch import Worker

    key = (recipe, threads)
    if key not in _WORKERS:
        cache = ShippedCache()
        worker = Worker(recipe, threads, open_parts=lambda settings: _open_parts(settings, cache, threads))
        _WORKERS[key] = (worker, cache)
        _LOADS += 1
    return _WORKERS[key]


def _open_parts(settings: Settings, cache: ShippedCache, threads: int):
    """``open_run_parts`` with the shipped call cache in place of the shared one."""
    from .embed import get_embedder
    from .llm.engine import ModelPool
    from .pipeline.parts import Models, check_context
    from .sources.base import make_backend
    from .sources.fetch import Fetcher
    from .sources.preflight import check_backend

    if not settings.embed.threads:
        settings = settings.with_overrides({"embed.threads": threads})
    backend = make_backend(settings)
    check_backend(settings, backend)
    models = Models.from_pool(ModelPool(settings, cache=cache if settings.llm.cache else None))
    check_context(models)
    return models, backend, Fetcher(settings), get_embedder(settings)


def answer_on_worker(item: BatchItem, recipe: SettingsRecipe, threads: int,
                     calls: list[tuple[str, str, dict]], scratch_root: str = "") -> WorkerAnswer:
    """The Dask task: answer one question in scratch folders and return everything it wrote."""
    from .questions import run_id_for, today

    with _MODEL_LOCK:
        worker, cache = _cluster_worker(recipe, threads)
        cache.load(calls)
        scratch = Path(tempfile.mkdtemp(prefix="appliance-task-", dir=scratch_root or None))
        try:
            run_dir, out = scratch / "run", scratch / "out"
            result = worker.run(item, out, run_dir=run_dir)
            md, js = out / f"{item.id}.md", out / f"{item.id}.json"
            report_json = js.read_text(encoding="utf-8") if js.is_file() else ""
            run_id = ""
            if report_json:
                run_id = str(json.loads(report_json).get("run_id") or "")
            files = {p.relative_to(run_dir).as_posix(): p.read_text(encoding="utf-8")
                     for p in sorted(run_dir.rglob("*")) if p.is_file()} if run_dir.is_dir() else {}
            return WorkerAnswer(
                item_id=item.id, run_id=run_id or run_id_for(item.question, item.date or today().isoformat(),
                                                        item.profile or worker.settings.pipeline.profile),
                result=result, report_md=md.read_text(encoding="utf-8") if md.is_file() else "",
                report_json=report_json, run_files=files, calls=list(cache.made),
                worker={"pid": os.getpid(), "host": socket.gethostname(), "model_loads": _LOADS})
        finally:
            cache.load([])
            shutil.rmtree(scratch, ignore_errors=True)

