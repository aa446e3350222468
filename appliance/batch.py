"""Batch runs: many questions, one report each, resumable by replay.

A question whose report exists is skipped; an unfinished one is simply run again, and every
model call and fetch it had finished replays from the caches. Reports are written under a
temporary name and renamed, so a half-written report is never taken for a finished one.

A question keeps the date it was first started in its output folder (``.started/<id>``), so
that one resumed on a later day still replays: the run id and every prompt carry the date.
``--force`` starts it again as of today.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .contracts import PROFILES, RunStatus
from .config import Settings, SettingsRecipe
from .errors import ApplianceError, UsageError
from . import questions
from .questions import clean_question
from .pipeline.state import write_atomic

if TYPE_CHECKING:
    from .cluster import ClusterSpec

_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")
# Read as one JSON record per line; anything else is one question per line.
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
# Report names that would overwrite the batch's own files (<id>.json next to batch.json).
_RESERVED_IDS = frozenset({"batch"})
_JSON_TYPES = {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object",
               type(None): "null"}


@dataclass
class BatchItem:
    id: str
    question: str
    profile: str | None = None
    line: int = 0
    error: str = ""
    given_id: str = ""      # the id as written in the file, before cleaning
    date: str = ""          # ISO date its answer is for: the day it was first started (start_dates)

    def failure(self) -> str:
        """The reason this line cannot be answered, naming its line ("" when it can)."""
        return f"line {self.line}: {self.error}" if self.error else ""


@dataclass
class ItemResult:
    id: str
    question: str
    outcome: str            # done, skipped, failed
    status: str = ""        # the report's status
    reason: str = ""
    report: str = ""
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    line: int = 0           # the line of the questions file
    worker: dict = field(default_factory=dict)   # on a cluster: the pid, host and model loads of its worker
    exports: dict = field(default_factory=dict)  # format -> the file written by --export this run


def safe_id(raw: str) -> str:
    """A given id made into a safe file stem (never a path, never hidden, never empty)."""
    cleaned = _SAFE_ID.sub("-", raw).strip("-.")[:80]
    return cleaned or hashlib.sha256(raw.encode()).hexdigest()[:12]


def question_id(question: str) -> str:
    return "q-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:12]


def read_questions(path: str | Path) -> list[BatchItem]:
    """Text (one question a line; blank lines and # comments skipped) or JSON lines
    (.jsonl, .ndjson, .json). Every line with content gives an item: a line that cannot be
    answered (no string question, a bad profile, an id whose report another line already
    names) carries its ``error``; nothing is dropped."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"questions file {path} does not exist", hint="give a text or .jsonl file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read questions file {path}: {exc}", hint="it must be UTF-8 text") from None
    jsonl = path.suffix.lower() in JSON_SUFFIXES
    if jsonl and text.lstrip().startswith("["):
        raise UsageError(f"questions file {path} is one JSON array",
                         hint='write one JSON record per line (JSONL): {"id": ..., "question": ...}')
    items: list[BatchItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (not jsonl and line.lstrip().startswith("#")):
            continue
        items.append(_jsonl_item(line, number) if jsonl else _text_item(line, number))
    if not items:
        raise UsageError(f"questions file {path} holds no questions",
                         hint="one question a line, or JSONL records with a question field")
    _mark_clashes(items)
    return items


def _mark_clashes(items: list[BatchItem]) -> None:
    """A later line whose report file an earlier line already names fails, naming both lines.

    File names are compared without case: ids that differ only in case collide on macOS and
    Windows file systems, and a questions file must mean the same everywhere.
    """
    seen: dict[str, BatchItem] = {}
    for item in items:
        if item.error:
            continue
        key = item.id.lower()
        if key in _RESERVED_IDS:
            item.error = (f"id {item.given_id or item.id!r} would name its report {item.id}.json, "
                          f"as the batch summary batch.json is named: choose another id")
            continue
        first = seen.setdefault(key, item)
        if first is item:
            continue
        if first.id == item.id and first.given_id == item.given_id:
            item.error = f"id {item.id!r} repeats line {first.line}"
            continue
        case = (" (file names that differ only in case are one file on macOS and Windows)"
                if first.id != item.id else "")
        item.error = (f"id {item.given_id!r} gives the report name {item.id}.md, as line {first.line}'s id "
                      f"{first.given_id!r} does{case}: give each question its own id")


def _text_item(line: str, number: int) -> BatchItem:
    try:
        question = clean_question(line)
    except UsageError as exc:
        return BatchItem(id=f"line-{number}", question=line[:200], line=number, error=exc.one_line())
    return BatchItem(id=question_id(question), question=question, line=number)


def _jsonl_item(line: str, number: int) -> BatchItem:
    def bad(error: str, question: str = line) -> BatchItem:
        return BatchItem(id=f"line-{number}", question=question[:200], line=number, error=error)

    try:
        record = json.loads(line)
    except ValueError:
        return bad('not valid JSON (one record a line: {"id": ..., "question": ...})')
    if not isinstance(record, dict):
        return bad(f"not a JSON object but {_JSON_TYPES.get(type(record), 'a value')}: "
                   'write {"question": ...}')
    if "question" not in record:
        return bad('no "question" field')
    raw_question = record["question"]
    if not isinstance(raw_question, str):
        return bad(f'"question" is {_JSON_TYPES.get(type(raw_question), type(raw_question).__name__)}, '
                   "not a string")
    profile = record.get("profile")
    if profile is not None and profile not in PROFILES:
        return bad(f"unknown profile {profile!r}", raw_question)
    try:
        question = clean_question(raw_question)
    except UsageError as exc:
        return bad(exc.one_line(), raw_question)
    given = record.get("id")
    given_text = str(given) if given not in (None, "") else ""
    item_id = safe_id(given_text) if given_text else question_id(question)
    return BatchItem(id=item_id, question=question, profile=profile, line=number, given_id=given_text)


STARTED_DIR = ".started"


def start_dates(out_dir: Path, items: list[BatchItem], *, force: bool = False) -> None:
    """Give each item the date its answer is for, recorded before anything is answered.

    A question first started on an earlier day keeps that day (a run resumed after midnight
    replays its calls instead of answering anew); a new one, one whose id now names another
    question, or any with ``force``, gets today, and the record (the date and the question's
    hash) is written before its run begins. One small file per question, so that concurrent
    batches on one folder (``make -j`` over ``--emit-make`` targets) never clash.
    """
    folder = out_dir / STARTED_DIR
    today = questions.today().isoformat()
    for item in items:
        record = folder / item.id
        asked = question_id(item.question)
        recorded = ""
        if not force:
            try:
                date, for_question = record.read_text(encoding="utf-8").split()
                dt.date.fromisoformat(date)
                recorded = date if for_question == asked else ""
            except (OSError, UnicodeDecodeError, ValueError):
                recorded = ""   # none yet, or unreadable: this run starts it
        if recorded:
            item.date = recorded
            continue
        item.date = today
        try:
            write_atomic(record, f"{today} {asked}\n")
        except OSError as exc:
            raise ApplianceError(f"cannot write {record}: {exc}",
                                 hint="the output folder must be writable") from None


def item_today(item: BatchItem) -> dt.date | None:
    """The date to answer ``item`` for (None: today)."""
    return dt.date.fromisoformat(item.date) if item.date else None


def report_path(out_dir: Path, item: BatchItem) -> Path:
    return out_dir / f"{item.id}.md"


def is_complete(out_dir: Path, item: BatchItem) -> bool:
    """A report counts as finished when both files exist and its JSON parses."""
    md, js = report_path(out_dir, item), out_dir / f"{item.id}.json"
    if not (md.is_file() and js.is_file()):
        return False
    try:
        return json.loads(js.read_text(encoding="utf-8")).get("question") == item.question
    except (OSError, ValueError):
        return False


class Worker:
    """Loads the run's parts once and answers questions one by one (in a process of its own)."""

    def __init__(self, recipe: SettingsRecipe, n_threads: int | None = None,
                 open_parts: Callable[[Settings], tuple] | None = None):
        from .pipeline.parts import open_run_parts

        self.recipe = recipe
        self.n_threads = n_threads
        self.settings = self._settings(None)
        self.models, self.backend, self.fetcher, self.embedder = (open_parts or open_run_parts)(self.settings)

    def _settings(self, profile: str | None) -> Settings:
        settings = self.recipe.build(profile)
        if self.n_threads:
            settings = settings.with_overrides({"llm.n_threads": self.n_threads})
        return settings

    def run(self, item: BatchItem, out_dir: Path, run_dir: Path | None = None) -> ItemResult:
        from .pipeline.run import research

        settings = self._settings(item.profile) if item.profile else self.settings
        start = time.monotonic()
        try:
            result = research(item.question, settings, models=self.models, backend=self.backend,
                              fetcher=self.fetcher, embedder=self.embedder, out_dir=out_dir,
                              report_name=item.id, run_dir=run_dir, today=item_today(item))
        except ApplianceError as exc:
            return ItemResult(item.id, item.question, "failed", reason=exc.one_line(),
                              seconds=round(time.monotonic() - start, 3))
        failed = RunStatus(result.status).failed
        return ItemResult(item.id, item.question, "failed" if failed else "done", status=result.status,
                          reason=(result.report.get("error") or "") if failed else "",
                          report=str(result.markdown_path), seconds=round(time.monotonic() - start, 3),
                          stats=result.report.get("stats", {}))


_WORKER: Worker | None = None


def _init_worker(recipe: SettingsRecipe, n_threads: int) -> None:
    global _WORKER
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER = Worker(recipe, n_threads)


def _run_in_worker(item: BatchItem, out_dir: Path) -> ItemResult:
    assert _WORKER is not None
    return _WORKER.run(item, out_dir)


def run_batch(items: list[BatchItem], recipe: SettingsRecipe, out_dir: Path, *, jobs: int = 1,
              force: bool = False, on_result: Callable[[ItemResult], None] = lambda r: None,
              cluster: ClusterSpec | None = None) -> list[ItemResult]:
    """Answer every item; finished reports are skipped unless ``force``. Never stops at a failure.

    Models are loaded only when some question is left to answer, so a rerun of a finished batch
    makes no model call at all. With ``cluster`` the questions are Dask tasks (appliance.cluster)
    and only this process writes the output folder, the run folders and the call cache.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    # One result per line of the file, by position: two lines may share an id (a repeat
    # that fails), and neither may hide the other.
    results: list[ItemResult | None] = [None] * len(items)
    todo: list[int] = []
    for index, item in enumerate(items):
        if item.error:
            results[index] = ItemResult(item.id, item.question, "failed", reason=item.failure())
        elif not force and is_complete(out_dir, item):
            results[index] = _skipped(out_dir, item)
        else:
            todo.append(index)
            continue
        on_result(_with_line(_done(results[index]), item))
    start_dates(out_dir, [items[index] for index in todo], force=force)
    if todo and cluster is not None:
        from .cluster import run_on_cluster

        def deliver(index: int, result: ItemResult) -> None:
            results[index] = result
            on_result(_with_line(result, items[index]))

        run_on_cluster(items, todo, recipe, out_dir, cluster, deliver)
    elif todo and jobs <= 1:
        worker = Worker(recipe)
        with worker.fetcher:
            for index in todo:
                results[index] = worker.run(items[index], out_dir)
                on_result(_with_line(_done(results[index]), items[index]))
    elif todo:
        # Check everything a worker will load here, so a bad model or corpus is one line, not a
        # dead process pool.
        from .pipeline.parts import check_run_parts

        check_run_parts(recipe.build())
        threads = max(1, (os.cpu_count() or 2) // jobs)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                 initializer=_init_worker, initargs=(recipe, threads)) as pool:
            futures = {pool.submit(_run_in_worker, items[index], out_dir): index for index in todo}
            for future in as_completed(futures):
                index = futures[future]
                item = items[index]
                try:
                    results[index] = future.result()
                except ApplianceError as exc:
                    results[index] = ItemResult(item.id, item.question, "failed", reason=exc.one_line())
                except BrokenProcessPool:
                    raise ApplianceError("a batch worker process died (out of memory or killed)",
                                         hint="run the same command again: finished reports are kept "
                                              "and unfinished ones resume from the caches") from None
                on_result(_with_line(_done(results[index]), item))
    return [_with_line(result, item) for result, item in zip(results, items) if result is not None]


def _done(result: ItemResult | None) -> ItemResult:
    """A result just set (the list holds None only for questions not yet answered)."""
    assert result is not None
    return result


def _with_line(result: ItemResult, item: BatchItem) -> ItemResult:
    result.line = item.line
    return result


def _skipped(out_dir: Path, item: BatchItem) -> ItemResult:
    data = json.loads((out_dir / f"{item.id}.json").read_text(encoding="utf-8"))
    return ItemResult(item.id, item.question, "skipped", status=data.get("status", ""),
                      report=str(report_path(out_dir, item)), stats=data.get("stats", {}))


TOTAL_KEYS = ("calls", "model_calls", "cache_hits", "tokens_submitted", "tokens_evaluated", "tokens_generated",
              "llm_seconds", "wall_seconds", "sources_fetched", "confirmed", "killed")


def write_summary(results: list[ItemResult], out_dir: Path, wall_seconds: float,
                  interrupted: bool = False) -> Path:
    """batch.json: per-question outcome and stats, and totals (this invocation's work only)."""
    worked = [r for r in results if r.outcome != "skipped"]
    totals = {key: round(sum(float(r.stats.get(key, 0) or 0) for r in worked), 3) for key in TOTAL_KEYS}
    summary = {
        "done": sum(r.outcome == "done" for r in results),
        "skipped": sum(r.outcome == "skipped" for r in results),
        "failed": sum(r.outcome == "failed" for r in results),
        "interrupted": interrupted, "wall_seconds": round(wall_seconds, 3),
        "totals_this_run": totals,
        "questions": [asdict(r) for r in results],
    }
    path = out_dir / "batch.json"
    write_atomic(path, json.dumps(summary, ensure_ascii=False, indent=2))
    return path


def make_fragment(items: list[BatchItem], questions_file: str, out_dir: str, flags: str) -> str:
    """A makefile with one real target per report, so make -j and interrupted makes behave."""
    targets = [f"{out_dir}/{item.id}.md" for item in items if not item.error]
    lines = ["# Generated by `appliance batch --emit-make`: one target per question.",
             f"BATCH_REPORTS := {' '.join(targets)}", "", ".PHONY: all", "all: $(BATCH_REPORTS)",
             f"\t$(APPLIANCE) batch {questions_file} --out {out_dir} {flags}".rstrip(), ""]
    for item, target in zip([i for i in items if not i.error], targets):
        # No prerequisites: a finished report is never rebuilt, even when the file grows.
        lines.append(f"{target}:")
        lines.append(f"\t$(APPLIANCE) batch {questions_file} --out {out_dir} --only {item.id} {flags}".rstrip())
    return "\n".join(lines) + "\n"
