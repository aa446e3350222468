"""Run a question set in each mode and score it.

Modes: ``pipeline`` (the full research pipeline; the direct answer it draws from its confirmed
claims with the same short-answer prompt as the baselines, and its cited sources), and the
baselines of ``baselines.py``: ``rag`` (one retrieval, one call), ``iterative`` (up to three
retrieve-and-read rounds, then the answer) and ``closed-book`` (the model alone). Every mode's
answer passes the same answer checks. Results are appended per question as JSON lines, so an
interrupted eval resumes where it stopped; model calls replay from the call cache.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config import Settings
from ..contracts import EVAL_MODES
from ..errors import ModelOutputError, UsageError
from ..pipeline.anchor import normalise
from ..pipeline.checks import Switches
from ..pipeline.state import Recorder
from ..sources.serve import passage_id_from_url
from . import baselines, scoring
from .baselines import BaselineAnswer

MODES = EVAL_MODES
PIPELINE_STATS = ("nodes", "plan_draws", "sources_fetched", "sources_off_topic", "claims_extracted", "quotes_rejected", "claims_from_quote",
                  "claims_tangential", "claims_off_subject", "claims_merged", "claims_after_dedup", "verified",
                  "confirmed", "confirmed_verbatim", "claims_restated", "killed", "votes_skipped", "llm_busy_share", "wall_seconds")


@dataclass
class Dataset:
    name: str
    corpus_path: Path
    questions: list[dict]


def load_dataset(folder: str | Path, limit: int | None = None, skip: int = 0) -> Dataset:
    """Read ``questions.jsonl`` (and locate ``corpus.jsonl``) in a dataset folder: the
    questions after the first ``skip``, at most ``limit`` of them. Skipping every question
    is a UsageError, never an empty table."""
    folder = Path(folder)
    corpus, questions = folder / "corpus.jsonl", folder / "questions.jsonl"
    for path in (corpus, questions):
        if not path.is_file():
            raise UsageError(f"{path} is missing",
                             hint="a dataset folder holds corpus.jsonl and questions.jsonl")
    rows: list[dict] = []
    for number, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row["question"] = str(row["question"])
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{questions}:{number} is not a question record",
                             hint='each line must be JSON with at least {"question": ...}') from None
        row.setdefault("id", hashlib.sha256(row["question"].encode()).hexdigest()[:12])
        rows.append(row)
    if skip:
        if skip >= len(rows):
            raise UsageError(f"--skip {skip} leaves no question: {questions} holds {len(rows)}",
                             hint=f"skip fewer than {len(rows)}")
        rows = rows[skip:]
    if limit is not None:
        rows = rows[:limit]
    return Dataset(name=folder.resolve().name, corpus_path=corpus, questions=rows)


def corpus_name_for(dataset: Dataset) -> str:
    """The dataset's own local corpus, named by its content so a changed corpus is re-indexed."""
    digest = hashlib.sha256(dataset.corpus_path.read_bytes()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() else "-" for c in dataset.name.lower()).strip("-") or "dataset"
    return f"eval-{safe}-{digest}"


def passage_id(url: str) -> str:
    """``corpus://NAME/ID`` (or ``ID#chunk``) -> ``ID``, and so for the page of a passage served
    by `appliance corpus serve` (``http://HOST/corpus/NAME/ID``, as SearXNG returns it); other
    URLs are returned unchanged."""
    if url.startswith("corpus://"):
        tail = url.split("/", 3)[-1]
        return tail.split("#", 1)[0]
    served = passage_id_from_url(url)
    if served is not None:
        return served[1].split("#", 1)[0]
    return url


def quote_faithfulness(report: dict, fetch_text: Callable[[str], str]) -> tuple[int, int]:
    """(quotes found verbatim after normalisation in their cited source, quotes in all)."""
    found = total = 0
    for source in report.get("sources", []):
        text = normalise(fetch_text(source["url"]))[0]
        for quote in source.get("quotes", []):
            total += 1
            found += int(bool(quote.strip()) and normalise(quote)[0] in text)
    return found, total


class EvalRun:
    """Answers a dataset's questions in the requested modes and keeps per-question results."""

    def __init__(self, settings: Settings, dataset: Dataset, out_dir: Path, *, models, fetcher,
                 embedder, backend, force: bool = False, log: Callable[[str], None] = lambda s: None):
        self.settings = settings
        self.dataset = dataset
        self.out_dir = out_dir
        self.models = models
        self.fetcher = fetcher
        self.embedder = embedder
        self.backend = backend
        self.log = log
        self.results_path = out_dir / "results.jsonl"
        self.done = {} if force else self._load_done()
        if force and self.results_path.exists():
            self.results_path.unlink()

    @property
    def reports_dir(self) -> Path:
        """Where the pipeline's reports go: ``reports/``, or ``reports/without-<checks>/`` with
        checks switched off, so runs of one --out with and without a check keep both reports."""
        disabled = sorted(self.settings.checks.disabled)
        return self.out_dir / "reports" / ("without-" + "+".join(disabled) if disabled else "")

    def _key(self, qid: str, mode: str, row: dict | None = None) -> str:
        """What an answer is resumed by: question, mode, profile, model and the checks switched
        off (a row's own, when ``row`` is given)."""
        profile = row.get("profile", "") if row else self.settings.pipeline.profile
        model = row.get("model", "") if row else self.models.label()
        without = "+".join(sorted(row.get("without") or [] if row else self.settings.checks.disabled))
        return f"{qid}\0{mode}\0{profile}\0{model}\0{without}"

    def _load_done(self) -> dict[str, dict]:
        done: dict[str, dict] = {}
        if self.results_path.exists():
            for line in self.results_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    done[self._key(row["id"], row["mode"], row)] = row
                except (ValueError, KeyError):
                    continue  # a line cut by a kill is simply redone
        return done

    def run(self, modes: list[str]) -> list[dict]:
        rows: list[dict] = []
        for number, item in enumerate(self.dataset.questions, start=1):
            for mode in modes:
                key = self._key(item["id"], mode)
                if key in self.done:
                    rows.append(self.done[key])
                    continue
                self.log(f"[{number}/{len(self.dataset.questions)}] {mode}: {item['question'][:70]}")
                row = self._one(item, mode)
                with self.results_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                self.done[key] = row
                rows.append(row)
        return rows

    def _one(self, item: dict, mode: str) -> dict:
        before = self.models.totals()
        start = time.monotonic()
        answer, faithful, status = "", (0, 0), "ok"
        raw: str | None = None
        read: str | None = None
        searches: list[str] = []
        cited: list[str] = []
        run_stats: dict[str, Any] = {}
        fired: list[str] = []
        try:
            if mode == "pipeline":
                answer, raw, read, cited, faithful, status, run_stats, fired = self._pipeline(item)
            else:
                base = self._baseline(item, mode)
                answer, raw, cited = base.answer, base.raw, [passage_id(u) for u in base.cited_urls]
                searches, fired, read = base.searches, base.fired, base.read
        except ModelOutputError as exc:
            status = f"failed: {exc.message}"
        seconds = time.monotonic() - start
        after = self.models.totals()
        golds = [item.get("answer", "")] + list(item.get("aliases") or [])
        supporting = list(item.get("supporting_ids") or [])
        f1 = scoring.token_f1(answer, golds)
        gold_read = scoring.answer_read(read, golds)
        return {
            "id": item["id"], "mode": mode, "profile": self.settings.pipeline.profile,
            "model": self.models.label(), "without": sorted(self.settings.checks.disabled),
            "question": item["question"], "gold": item.get("answer", ""),
            "prediction": answer, "raw_answer": raw, "searches": searches, "status": status,
            "em": scoring.exact_match(answer, golds), "f1": f1,
            "contains": scoring.contains_answer(answer, golds),
            "cited": cited,
            "sp_recall": scoring.passage_recall(cited, supporting) if mode != "closed-book" else None,
            "sp_precision": scoring.passage_precision(cited, supporting) if mode != "closed-book" else None,
            "quotes_found": faithful[0], "quotes_total": faithful[1],
            "faithfulness": (faithful[0] / faithful[1]) if faithful[1] else None,
            # Whether the gold answer was in what the answer call read, and the F1 where it was:
            # a wrong answer with the gold read is the reading's loss, without it the search's.
            "gold_read": gold_read, "f1_read": f1 if gold_read else None,
            "seconds": round(seconds, 3),
            **{k: int(after[k] - before[k]) for k in
               ("model_calls", "cache_hits", "tokens_submitted", "tokens_evaluated", "tokens_generated")},
            "llm_seconds": round(after["llm_seconds"] - before["llm_seconds"], 3),
            "run_stats": {k: run_stats.get(k) for k in PIPELINE_STATS if k in run_stats},
            # The checks that changed something in this answer (an ablation skips a check that
            # fired on no answer: switched off, it would give the same answers).
            "checks_fired": sorted(set(fired)),
        }

    def _pipeline(self, item: dict) -> tuple[str, str | None, str | None, list[str], tuple[int, int], str, dict,
                                             list[str]]:
        """The run's direct answer, the model's raw answer before the answer checks and the
        evidence its answer call read (both None when the run made no answer call), the cited
        passages, the quotes found in their sources, the status, the run's statistics and the
        checks that fired."""
        from ..pipeline.run import research

        result = research(item["question"], self.settings, models=self.models, backend=self.backend,
                          fetcher=self.fetcher, embedder=self.embedder, out_dir=self.reports_dir)
        report = result.report
        cited = [passage_id(s["url"]) for s in report.get("sources", [])]
        faithful = quote_faithfulness(report, lambda url: self.fetcher.fetch(url).text)
        # The report's direct answer: drawn from its confirmed claims and their quotes by the same
        # short-answer prompt rag and closed-book use (one call of the run, counted in its stats).
        fired = [check for check, count in (report.get("checks") or {}).get("counts", {}).items() if count]
        raw, read = _answer_record(result.run_dir)
        return (report.get("short_answer", ""), raw, read, cited, faithful, result.status,
                report.get("stats", {}), fired)

    def _baseline(self, item: dict, mode: str) -> BaselineAnswer:
        writer, temperature = self.models.writer, self.settings.llm.answer_temperature
        switches = Switches.of(self.settings)
        if mode == "rag":
            return baselines.rag(item["question"], writer=writer, backend=self.backend, fetcher=self.fetcher,
                                 temperature=temperature, switches=switches)
        if mode == "iterative":
            return baselines.iterative(item["question"], writer=writer, backend=self.backend,
                                       fetcher=self.fetcher, temperature=temperature, switches=switches)
        return baselines.closed_book(item["question"], writer=writer, temperature=temperature, switches=switches)


def _answer_record(run_dir: Path) -> tuple[str | None, str | None]:
    """The final answer call's raw answer and the evidence it read, from the run folder's
    answer record (None for what it does not hold: a run that made no answer call)."""
    try:
        record = json.loads((run_dir / Recorder.ANSWER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(record, dict):
        return None, None
    raw, read = record.get("raw"), record.get("evidence")
    return (raw if isinstance(raw, str) else None), (read if isinstance(read, str) else None)


METRICS = [("em", "exact match"), ("f1", "token F1"), ("contains", "answer contained"),
           ("sp_recall", "supporting-passage recall"), ("sp_precision", "supporting-passage precision"),
           ("faithfulness", "citation faithfulness"),
           ("gold_read", "answer in what the answer call read"), ("f1_read", "token F1 where it was read"),
           ("seconds", "seconds per question"),
           ("model_calls", "model calls per question"), ("tokens_submitted", "prompt tokens submitted"),
           ("tokens_evaluated", "prompt tokens evaluated"), ("tokens_generated", "tokens generated")]


def aggregate(rows: list[dict], modes: list[str]) -> dict[str, dict[str, Any]]:
    """Per mode and metric: mean, 95% bootstrap interval and count."""
    table: dict[str, dict[str, Any]] = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        table[mode] = {key: scoring.summarize([r.get(key) for r in mine]) for key, _ in METRICS}
        table[mode]["questions"] = len(mine)
    return table
