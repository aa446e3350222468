"""Batch runs: many questions, one report each, resumable by replay.

A question whose report exists is skipped; an unfinished one is simply run again, and every
model call and fetch it had finished replays from the caches. Reports are written under a
temporary name and renamed, so a half-written report is never taken for a finished one.
"""

from __future__ import annotations

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
from typing import Callable

from .config import Settings, SettingsRecipe
from .errors import ApplianceError, UsageError
from .pipeline.run import clean_question
from .pipeline.state import write_atomic

FAILED_STATUSES = ("plan_failed", "error")
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class BatchItem:
    id: str
    question: str
    profile: str | None = None
    line: int = 0
    error: str = ""


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


def safe_id(raw: str) -> str:
    """A given id made into a safe file stem (never a path, never hidden, never empty)."""
    cleaned = _SAFE_ID.sub("-", raw).strip("-.")[:80]
    return cleaned or hashlib.sha256(raw.encode()).hexdigest()[:12]


def question_id(question: str) -> str:
    return "q-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:12]


def read_questions(path: str | Path) -> list[BatchItem]:
    """Text (one question a line; blank lines and # comments skipped) or JSONL records."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"questions file {path} does not exist", hint="give a text or .jsonl file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read questions file {path}: {exc}", hint="it must be UTF-8 text") from None
    jsonl = path.suffix.lower() == ".jsonl"
    items: list[BatchItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (not jsonl and line.lstrip().startswith("#")):
            continue
        items.append(_jsonl_item(line, number) if jsonl else _text_item(line, number))
    if not items:
        raise UsageError(f"questions file {path} holds no questions",
                         hint="one question a line, or JSONL records with a question field")
    seen: dict[str, int] = {}
    for item in items:
        if item.id in seen:
            item.error = item.error or f"id {item.id!r} repeats line {seen[item.id]}"
        seen.setdefault(item.id, item.line)
    return items


def _text_item(line: str, number: int) -> BatchItem:
    try:
        question = clean_question(line)
    except UsageError as exc:
        return BatchItem(id=f"line-{number}", question=line[:200], line=number, error=exc.one_line())
    return BatchItem(id=question_id(question), question=question, line=number)


def _jsonl_item(line: str, number: int) -> BatchItem:
    try:
        record = json.loads(line)
        raw_question = record["question"]
        if not isinstance(raw_question, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return BatchItem(id=f"line-{number}", question=line[:200], line=number,
                         error='not a JSON record with a "question" string')
    profile = record.get("profile")
    if profile is not None and profile not in ("quick", "standard", "deep"):
        return BatchItem(id=f"line-{number}", question=raw_question[:200], line=number,
                         error=f"unknown profile {profile!r}")
    try:
        question = clean_question(raw_question)
    except UsageError as exc:
        return BatchItem(id=f"line-{number}", question=raw_question[:200], line=number, error=exc.one_line())
    given = record.get("id")
    item_id = safe_id(str(given)) if given not in (None, "") else question_id(question)
    return BatchItem(id=item_id, question=question, profile=profile, line=number)


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

    def __init__(self, recipe: SettingsRecipe, n_threads: int | None = None):
        from .pipeline.run import open_run_parts

        self.recipe = recipe
        self.n_threads = n_threads
        self.settings = self._settings(None)
        self.models, self.backend, self.fetcher, self.embedder = open_run_parts(self.settings)

    def _settings(self, profile: str | None) -> Settings:
        settings = self.recipe.build(profile)
        if self.n_threads:
            settings = settings.with_overrides({"llm.n_threads": self.n_threads})
        return settings

    def run(self, item: BatchItem, out_dir: Path) -> ItemResult:
        from .pipeline.run import research

        settings = self._settings(item.profile) if item.profile else self.settings
        start = time.monotonic()
        try:
            result = research(item.question, settings, models=self.models, backend=self.backend,
                              fetcher=self.fetcher, embedder=self.embedder, out_dir=out_dir,
                              report_name=item.id)
        except ApplianceError as exc:
            return ItemResult(item.id, item.question, "failed", reason=exc.one_line(),
                              seconds=round(time.monotonic() - start, 3))
        failed = result.status in FAILED_STATUSES
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
              force: bool = False, on_result: Callable[[ItemResult], None] = lambda r: None) -> list[ItemResult]:
    """Answer every item; finished reports are skipped unless ``force``. Never stops at a failure.

    Models are loaded only when some question is left to answer, so a rerun of a finished batch
    makes no model call at all.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, ItemResult] = {}
    todo: list[BatchItem] = []
    for item in items:
        if item.error:
            results[item.id] = ItemResult(item.id, item.question, "failed", reason=item.error)
        elif not force and is_complete(out_dir, item):
            results[item.id] = _skipped(out_dir, item)
        else:
            todo.append(item)
        if item.id in results:
            on_result(results[item.id])
    if todo and jobs <= 1:
        worker = Worker(recipe)
        with worker.fetcher:
            for item in todo:
                results[item.id] = worker.run(item, out_dir)
                on_result(results[item.id])
    elif todo:
        # Check everything a worker will load here, so a bad model or corpus is one line, not a
        # dead process pool.
        from .pipeline.run import check_run_parts

        check_run_parts(recipe.build())
        threads = max(1, (os.cpu_count() or 2) // jobs)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                 initializer=_init_worker, initargs=(recipe, threads)) as pool:
            futures = {pool.submit(_run_in_worker, item, out_dir): item for item in todo}
            for future in as_completed(futures):
                item = futures[future]
                try:
                    results[item.id] = future.result()
                except ApplianceError as exc:
                    results[item.id] = ItemResult(item.id, item.question, "failed", reason=exc.one_line())
                except BrokenProcessPool:
                    raise ApplianceError("a batch worker process died (out of memory or killed)",
                                         hint="run the same command again: finished reports are kept "
                                              "and unfinished ones resume from the caches") from None
                on_result(results[item.id])
    seen: set[str] = set()
    ordered: list[ItemResult] = []
    for item in items:
        if item.id not in seen:
            seen.add(item.id)
            ordered.append(results[item.id])
    return ordered


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
