"""What one run shares across its phases: settings, models, sources, the run folder, stats."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..config import Settings
    from ..contracts import Source
    from ..sources.base import SearchBackend
    from ..sources.fetch import Fetcher
    from ..sources.urls import UrlLedger
    from .parts import Models

from .. import atomic
from ..errors import ModelOutputError, StateError
from . import prompts
from .checks import Firings, Switches

M = TypeVar("M", bound=BaseModel)


@dataclass
class RunStats:
    """Rule 7: every run returns these, whatever its outcome. What is dropped is counted."""

    nodes: int = 0
    gap_nodes: int = 0
    nodes_failed: int = 0
    plan_repairs: int = 0
    plan_draws: int = 0
    searches: int = 0
    search_errors: int = 0
    hits: int = 0
    url_duplicates: int = 0
    budget_drops: int = 0
    node_cap_drops: int = 0
    sources_fetched: int = 0
    sources_failed: int = 0
    sources_off_topic: int = 0
    claims_extracted: int = 0
    quotes_rejected: int = 0
    claims_from_quote: int = 0
    extraction_failures: int = 0
    claims_merged: int = 0
    claims_after_dedup: int = 0
    claims_tangential: int = 0
    claims_off_subject: int = 0
    verified: int = 0
    confirmed: int = 0
    confirmed_verbatim: int = 0
    claims_restated: int = 0
    killed: int = 0
    votes_valid: int = 0
    votes_invalid: int = 0
    votes_skipped: int = 0
    citations_dropped: int = 0
    statements_dropped: int = 0
    texts_dropped: int = 0
    calls: int = 0
    model_calls: int = 0
    cache_hits: int = 0
    model_failures: int = 0
    tokens_submitted: int = 0
    tokens_evaluated: int = 0
    tokens_generated: int = 0
    tokens_sampled: int = 0
    tokens_forced: int = 0
    repetition_stops: int = 0
    mask_seconds: float = 0.0
    decode_seconds: float = 0.0
    llm_seconds: float = 0.0
    wall_seconds: float = 0.0
    llm_busy_share: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # Times each check fired, by id (appliance.pipeline.checks).
    checks: dict[str, int] = field(default_factory=dict)
    search_error_messages: list[str] = field(default_factory=list)
    unresponsive_engines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def note_search_error(self, message: str) -> None:
        with self._lock:
            self.search_errors += 1
            if message not in self.search_error_messages:
                self.search_error_messages.append(message)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_lock", None)
        return data


class Recorder:
    """The run folder: records appended as JSON lines as they happen, so a crash leaves them."""

    LOGS = ("sources", "claims", "votes", "nodes", "calls", "checks")
    # What the final answer call read and said (``synthesize.record_answer``), written when the
    # run reaches its answer; an earlier attempt's is removed so it never outlives its run.
    ANSWER = "answer.json"

    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # This attempt's logs start empty; everything before them is replayed from the caches.
            for name in self.LOGS:
                (folder / f"{name}.jsonl").write_text("", encoding="utf-8")
            (folder / self.ANSWER).unlink(missing_ok=True)
        except OSError as exc:
            raise StateError(f"cannot write the run folder {folder}: {exc.strerror}",
                             hint="set APPLIANCE_HOME to a writable folder with free space") from None

    def append(self, log: str, record: BaseModel | dict) -> None:
        data = record.model_dump(mode="json") if isinstance(record, BaseModel) else record
        line = json.dumps(data, ensure_ascii=False, default=str)
        with self._lock:
            try:
                with (self.folder / f"{log}.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                raise StateError(f"cannot append to {self.folder / log}.jsonl: {exc.strerror}",
                                 hint="free some space or make the state folder writable") from None

    def write_json(self, name: str, data: Any) -> Path:
        path = self.folder / name
        write_atomic(path, json.dumps(data, ensure_ascii=False, indent=2, default=str))
        return path


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (see appliance.atomic); StateError if it
    cannot be written, the old file then left as it was."""
    try:
        atomic.write_atomic(path, text)
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror}",
                         hint="free some space or choose a writable folder") from None


class SearchLog:
    """Search results of this run, replayed on a rerun so that a resumed run sees the same hits."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._seen: dict[str, list[dict]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._seen[entry["key"]] = entry["hits"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a kill: searched again

    def get(self, key: str) -> list[dict] | None:
        with self._lock:
            return self._seen.get(key)

    def put(self, key: str, hits: list[dict]) -> None:
        with self._lock:
            self._seen[key] = hits
            try:
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"key": key, "hits": hits}, ensure_ascii=False) + "\n")
            except OSError as exc:
                raise StateError(f"cannot write {self.path}: {exc.strerror}") from None


@dataclass
class Progress:
    """Receives node and phase updates; the CLI plugs in a live table, tests and batch nothing."""

    on_node: Callable[[str, str, str], None] = lambda node_id, question, status: None
    on_phase: Callable[[str], None] = lambda phase: None


def ask(run: "RunContext", engine, messages: list[dict], schema: type[M], *, max_tokens: int, purpose: str,
        temperature: float | None = None, **extra_counts: int) -> M | None:
    """One model call that a phase can do without: on invalid output (after the engine's own
    retries) count a model failure, plus ``extra_counts``, and return None so the phase goes on."""
    try:
        return engine.structured(messages, schema, max_tokens=max_tokens, purpose=purpose,
                                 **({} if temperature is None else {"temperature": temperature}))
    except ModelOutputError:
        run.stats.add(model_failures=1, **extra_counts)
        return None


@dataclass
class RunContext:
    """What one run shares across its phases."""

    settings: Settings
    models: Models
    backend: SearchBackend
    fetcher: Fetcher
    ledger: UrlLedger
    recorder: Recorder
    searches: SearchLog
    stats: RunStats
    ctx: prompts.Context
    progress: Progress = field(default_factory=Progress)
    # The sentence embedder (claim relevance during gather; dedup has its own reference).
    embedder: Any = None
    # The plan's sub-questions: what a claim may bear on.
    questions: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    # Every source read in the run, by URL (the report's source list is drawn from it).
    sources: dict[str, Source] = field(default_factory=dict)
    sources_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.checks = Firings(Switches.of(self.settings), lambda entry: self.recorder.append("checks", entry))
