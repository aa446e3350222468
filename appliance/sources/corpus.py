"""The local corpus: documents chunked, embedded and kept in LanceDB with a full-text index.

It is the search backend when no SearXNG is configured. Search is hybrid: BM25 full-text
results and vector (cosine) results are fused by reciprocal rank fusion, which needs no score
calibration between the two. Every passage has a URL-like id, ``corpus://NAME/ID``, so the
rest of the pipeline treats it as a web page; "fetching" it reads the stored text.
"""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from ..config import Settings, state_dir
from ..contracts import Hit, Source
from ..errors import CorpusError, SearchError
from .ingest import Document, ReadLog, chunk_text, iter_documents
from .urls import CORPUS_SCHEME

TABLE_PREFIX = "corpus_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_FTS_COLUMN = "search_text"
_TEXT_COLUMNS = ("id", "doc_id", "chunk", "title", "text", _FTS_COLUMN, "source", "url", "doc_hash",
                 "path", "file_hash", "location")
# Columns a corpus made before documents kept their file and place gets on its next add.
_FILE_COLUMNS = ("path", "file_hash", "location")
_WORDS = re.compile(r"\w+", re.UNICODE)
# Appended to the stored hash of a file whose scanned pages were skipped for want of OCR.
OCR_PENDING = "+ocr-pending"
# Chunks embedded and written per batch: bounds memory on big folders (about 30 MB of text and
# vectors), and keeps LanceDB's fragments few and large (each write is one fragment).
_BATCH_CHUNKS = 16384
# The batch is embedded in slices of this many chunks of similar length (sorted by length, so
# a slice pads little); progress is reported after each.
_EMBED_SLICE = 1024
_SNIPPET_CHARS = 300
# Rows per IVF partition of the vector index.
ANN_ROWS_PER_PARTITION = 25_000
# ANN candidates re-ranked on the full vectors: pool * this many.
ANN_REFINE = 2

Progress = Callable[[str], None]
# Full-text searches of every corpus in the process, beside their vector searches (ranked()).
_SEARCH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="corpus-fts")


@dataclass
class AddReport:
    """What ``Corpus.add`` did, with everything it did not use and why."""

    corpus: str
    files: int = 0
    documents: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    chunks_added: int = 0
    # Files: new, changed (their passages replaced), unchanged by content hash (not read at
    # all), and gone from a folder added with prune (their passages removed).
    files_added: int = 0
    files_updated: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _StoredFile:
    """A file the corpus holds: its content hash and the documents read from it."""

    digest: str
    doc_ids: list[str] = field(default_factory=list)


@dataclass
class CorpusRecord:
    """A stored passage (or a whole document, its chunks joined)."""

    id: str
    doc_id: str
    title: str
    text: str
    source: str = ""
    url: str = ""


@dataclass
class CorpusStats:
    name: str
    documents: int
    chunks: int
    path: str
    embed_model: str
    dim: int
    fts_indexed: bool
    unindexed_rows: int

    def as_dict(self) -> dict:
        return asdict(self)


def check_name(name: str) -> str:
    """A corpus name: letters, digits, '_' and '-' (it becomes part of table names and URLs)."""
    if not _NAME.match(name or ""):
        raise CorpusError(f"invalid corpus name {name!r}",
                          hint="use letters, digits, '_' and '-', starting with a letter or digit")
    return name


def corpus_url(name: str, passage_id: str) -> str:
    """The URL-like id of a passage: ``corpus://NAME/ID``."""
    return f"{CORPUS_SCHEME}{name}/{passage_id}"


def parse_corpus_url(url: str) -> tuple[str, str]:
    """Split ``corpus://NAME/ID`` into (NAME, ID)."""
    rest = url.strip()[len(CORPUS_SCHEME):] if url.strip().lower().startswith(CORPUS_SCHEME) else ""
    name, _, passage = rest.partition("/")
    if not name or not passage:
        raise CorpusError(f"not a corpus URL: {url!r}", hint="corpus URLs look like corpus://NAME/ID")
    return check_name(name), passage


def _connect(settings: Settings):
    import lancedb  # heavy import: only when a corpus is actually used

    path = state_dir(settings, "lancedb")
    try:
        return lancedb.connect(str(path))
    except Exception as exc:  # noqa: BLE001 - lancedb raises OSError, ValueError, its own types
        raise CorpusError(f"cannot open the corpus database at {path}: {exc}",
                          hint="check APPLIANCE_HOME is a writable folder") from None


def _table_names(db) -> list[str]:
    names: list[str] = []
    token = None
    while True:  # list_tables is paginated
        page = db.list_tables(page_token=token)
        names.extend(page.tables)
        token = page.page_token
        if not token:
            return names


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class Corpus:
    """One named corpus in ``<state home>/lancedb``. Safe to share between threads."""

    def __init__(self, settings: Settings, name: str):
        self.settings = settings
        self.name = check_name(name)
        self.table_name = TABLE_PREFIX + self.name
        self._db = _connect(settings)
        self._table = None
        self._ann: Optional[bool] = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ tables

    def exists(self) -> bool:
        """Whether the corpus has been created (by a first ``add``)."""
        return self.table_name in _table_names(self._db)

    def _open(self):
        with self._lock:
            if self._table is None:
                if not self.exists():
                    raise CorpusError(f"corpus {self.name!r} does not exist",
                                      hint=f"add documents with `appliance corpus add PATH --name {self.name}` "
                                           "(or `make demo-corpus`), or configure SearXNG with searxng.url")
                self._table = self._db.open_table(self.table_name)
            return self._table

    def _create(self, dim: int, model: str):
        import pyarrow as pa

        schema = pa.schema([
            pa.field("id", pa.string()), pa.field("doc_id", pa.string()), pa.field("chunk", pa.int32()),
            pa.field("title", pa.string()), pa.field("text", pa.string()),
            pa.field(_FTS_COLUMN, pa.string()), pa.field("source", pa.string()),
            pa.field("url", pa.string()), pa.field("doc_hash", pa.string()),
            pa.field("path", pa.string()), pa.field("file_hash", pa.string()), pa.field("location", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ], metadata={"embed_model": model, "embed_dim": str(dim)})
        with self._lock:
            if self.table_name in _table_names(self._db):
                # Opened as it is: an older corpus's schema lacks columns added since
                # (_add_file_columns gives them), which create_table would refuse.
                self._table = self._db.open_table(self.table_name)
            else:
                self._table = self._db.create_table(self.table_name, schema=schema, exist_ok=True)
            return self._table

    def _drop(self) -> None:
        with self._lock:
            self._table = None
            self._db.drop_table(self.table_name)

    def _check_dim(self, table, dim: int) -> None:
        have = table.schema.field("vector").type.list_size
        if have != dim:
            raise CorpusError(f"corpus {self.name!r} was embedded with {have}-dimensional vectors, "
                              f"the embedding model gives {dim}",
                              hint=f"rebuild it: appliance corpus remove {self.name}, then add its files again")

    # ------------------------------------------------------------------ add

    def add(self, paths: Iterable[str | Path], progress: Optional[Progress] = None,
            prune: bool = False) -> AddReport:
        """Ingest files and folders. A file whose content hash is the one stored is not read
        again; a changed file's passages are replaced (pages it no longer has go too); with
        ``prune``, the passages of files gone from the given folders are removed. Documents
        are read, embedded and written in bounded batches. Returns counts of what happened."""
        from ..embed import get_embedder

        started = time.monotonic()
        report = AddReport(corpus=self.name)
        embedder = get_embedder(self.settings)
        created = not self.exists()
        table = self._create(embedder.dim, embedder.name)
        self._check_dim(table, embedder.dim)
        self._add_file_columns(table)
        paths = list(paths)
        known, files = self._known(table)
        new_files: set[str] = set()

        def check(path: str, digest: str) -> str:
            from . import ocr

            stored = files.get(path)
            if stored is None:
                new_files.add(path)
                return "new"
            # A file whose scans were left for want of OCR is read again once OCR is on.
            if stored.digest == digest or (stored.digest == digest + OCR_PENDING and ocr.program() is None):
                report.unchanged += len(stored.doc_ids)
                return "unchanged"
            # Changed: its old passages go now (a page it no longer has must not stay), and
            # its documents count as updated when they are written again.
            self._delete_where(table, "path", [path])
            known.update(dict.fromkeys(stored.doc_ids, ""))
            report.files_updated += 1
            return "changed"

        log = ReadLog()
        batch: list[Document] = []
        batch_chunks = 0
        seen: dict[str, str] = {}
        produced: set[str] = set()
        digests: dict[str, str] = {}
        for doc in self._documents(paths, log, check):
            report.documents += 1
            if doc.path:
                digests[doc.path] = doc.file_hash
            state = self._classify(doc, known, seen, report)
            if state is None:
                continue
            if doc.path in new_files:
                produced.add(doc.path)
            batch.append(doc)
            batch_chunks += max(1, len(doc.text) // max(1, int(self.settings.corpus.chunk_chars)))
            if batch_chunks >= _BATCH_CHUNKS:
                self._write(table, batch, known, embedder, report, progress)
                batch, batch_chunks = [], 0
        if batch:
            self._write(table, batch, known, embedder, report, progress)
        self._mark_ocr_pending(table, {p: digests[p] for p in log.ocr_pending if p in digests})
        report.files_added = len(produced)
        report.files_unchanged = log.unchanged_files
        if prune:
            report.files_removed = self._prune(table, paths, files, log.seen)
        # Also when nothing was added: an add killed before this point left rows unindexed.
        if report.chunks_added or report.updated or report.files_removed or report.files_updated \
                or self._index_stale(table):
            if progress:
                progress("updating the indexes")
            self._index(table)
        report.files = log.files
        report.skipped.extend(log.skipped)
        if created and table.count_rows() == 0:
            # Nothing could be read: leave no empty corpus behind, or a run would search it.
            self._drop()
        report.seconds = round(time.monotonic() - started, 3)
        return report

    @staticmethod
    def _mark_ocr_pending(table, digests: dict[str, str]) -> None:
        """Mark the files just read whose scanned pages were left for want of OCR: their
        stored hash carries OCR_PENDING, so an add once OCR is on reads them again."""
        for path, digest in digests.items():
            table.update(where=f"path = {_quote(path)}", values={"file_hash": digest + OCR_PENDING})

    def _documents(self, paths: list[str | Path], log: ReadLog, check) -> Iterator[Document]:
        """The documents of ``paths``, scanned PDF pages read in the configured OCR languages."""
        from . import ocr

        with ocr.languages(self.settings.corpus.ocr_languages, self.settings.corpus.ocr):
            yield from iter_documents(paths, log, check)

    def _classify(self, doc: Document, known: dict[str, str], seen: dict[str, str],
                  report: AddReport) -> Optional[str]:
        """"new", "changed", or None (unchanged, or a repeated id within this add)."""
        digest = doc.content_hash
        if doc.id in seen:
            if seen[doc.id] == digest:
                report.unchanged += 1
            else:
                report.skipped.append(f"{doc.source}: id {doc.id!r} repeats an earlier document in this add (kept the first)")
            return None
        seen[doc.id] = digest
        old = known.get(doc.id)
        if old == digest:
            report.unchanged += 1
            return None
        return "new" if old is None else "changed"

    def _known(self, table) -> tuple[dict[str, str], dict[str, "_StoredFile"]]:
        """The stored documents' content hashes by id, and the stored files by path."""
        hashes: dict[str, str] = {}
        files: dict[str, _StoredFile] = {}
        if table.count_rows() == 0:
            return hashes, files
        rows = table.search().select(["doc_id", "doc_hash", "path", "file_hash"]).limit(None).to_arrow()
        for doc_id, doc_hash, path, file_hash in zip(*(rows.column(c).to_pylist() for c in
                                                       ("doc_id", "doc_hash", "path", "file_hash"))):
            hashes[doc_id] = doc_hash
            if path:  # "" in a corpus made before files were recorded
                stored = files.setdefault(path, _StoredFile(file_hash or ""))
                if doc_id not in stored.doc_ids:
                    stored.doc_ids.append(doc_id)
        return hashes, files

    def _add_file_columns(self, table) -> None:
        """Give a corpus made before documents kept their file and place those columns
        (empty), so that it is added to as it is, never rebuilt."""
        missing = [c for c in _FILE_COLUMNS if c not in table.schema.names]
        if missing:
            try:
                table.add_columns({c: "CAST('' AS STRING)" for c in missing})
            except Exception as exc:  # noqa: BLE001
                raise CorpusError(f"cannot add the file columns to corpus {self.name!r}: {exc}",
                                  hint=f"rebuild it: appliance corpus remove {self.name}, then add its files again") from None

    @staticmethod
    def _delete_where(table, column: str, values: list[str]) -> None:
        for start in range(0, len(values), 500):
            table.delete(f"{column} IN ({', '.join(_quote(v) for v in values[start:start + 500])})")

    def _prune(self, table, paths: list, files: dict[str, "_StoredFile"], seen: set[str]) -> int:
        """Remove the passages of stored files under the given folders that were not found
        in them now; returns how many files."""
        roots = [str(Path(p).expanduser().resolve()) for p in paths if Path(p).expanduser().is_dir()]
        gone = [path for path in files if path not in seen
                and any(path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)]
        self._delete_where(table, "path", gone)
        return len(gone)

    def _write(self, table, docs: list[Document], known: dict[str, str], embedder,
               report: AddReport, progress: Optional[Progress]) -> None:
        self._delete_where(table, "doc_id", [d.id for d in docs if d.id in known])
        rows = self._rows(docs)
        vectors = self._embed(rows[_FTS_COLUMN], embedder, report.chunks_added, progress)
        table.add(_arrow_rows(rows, vectors, table.schema))
        for doc in docs:
            if doc.id in known:
                report.updated += 1
            else:
                report.added += 1
            known[doc.id] = doc.content_hash
        report.chunks_added += len(vectors)

    @staticmethod
    def _embed(texts: list[str], embedder, done: int, progress: Optional[Progress]):
        """Vectors of ``texts`` in their order, embedded in slices of similar length: a batch
        of the model pads every text to its longest, so mixing lengths wastes most of it."""
        import numpy as np

        if progress:
            progress(f"embedding {len(texts)} chunks")
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), embedder.dim), dtype=np.float32)
        for start in range(0, len(order), _EMBED_SLICE):
            part = order[start:start + _EMBED_SLICE]
            vectors[part] = embedder.encode([texts[i] for i in part])
            if progress:
                progress(f"embedded {done + start + len(part)} chunks")
        return vectors

    def _rows(self, docs: list[Document]) -> dict[str, list]:
        """The chunks of ``docs`` as columns (without vectors)."""
        conf = self.settings.corpus
        columns: dict[str, list] = {name: [] for name in _TEXT_COLUMNS}
        for doc in docs:
            chunks = chunk_text(doc.text, conf.chunk_chars, conf.paragraph_max_chars)
            for number, text in enumerate(chunks, start=1):
                # A one-chunk document keeps the bare id (p0006); chunks of a longer one are
                # fragments of it (notes.md#2), so the document id stays recoverable.
                values = {"id": doc.id if len(chunks) == 1 else f"{doc.id}#{number}", "doc_id": doc.id,
                          "chunk": number, "title": doc.title, "text": text,
                          _FTS_COLUMN: f"{doc.title}\n\n{text}" if doc.title else text,
                          "source": doc.source, "url": doc.url, "doc_hash": doc.content_hash,
                          "path": doc.path, "file_hash": doc.file_hash, "location": doc.location}
                for name in _TEXT_COLUMNS:
                    columns[name].append(values[name])
        return columns

    def _index_stale(self, table) -> bool:
        if table.count_rows() == 0:
            return False
        for idx in table.list_indices():
            if _FTS_COLUMN in idx.columns:
                return table.index_stats(idx.name).num_unindexed_rows > 0
        return True

    def _index(self, table) -> None:
        """Bring the indexes up to date once per add: the full-text index always; the vector
        index (ANN) once the corpus reaches corpus.ann_min_rows, below which an exact scan
        is fast enough and exact. New rows join existing indexes without retraining."""
        from lancedb.index import FTS

        have = {column for idx in table.list_indices() for column in idx.columns}
        rows = table.count_rows()
        try:
            if _FTS_COLUMN in have:
                table.optimize()  # indexes the new rows (every index) and compacts small fragments
            else:
                table.create_index(_FTS_COLUMN, config=FTS(), replace=True)
            if "vector" not in have and rows >= int(self.settings.corpus.ann_min_rows) > 0:
                table.create_index("vector", config=_ann_config(rows), replace=True)
        except Exception as exc:  # noqa: BLE001
            raise CorpusError(f"cannot build the indexes of corpus {self.name!r}: {exc}") from None
        self._ann = None

    # ------------------------------------------------------------------ search

    def search(self, query: str, limit: int) -> list[Hit]:
        """Hybrid search: full-text and vector candidates fused by reciprocal rank fusion."""
        return [Hit(url=corpus_url(self.name, record.id), title=record.title or record.id,
                    snippet=_snippet(record.text), engine="corpus", rank=rank, query=query)
                for rank, record in enumerate(self.ranked(query, limit), start=1)]

    def ranked(self, query: str, limit: int) -> list[CorpusRecord]:
        """The ``limit`` best passages for ``query``, best first, with their whole text."""
        from ..embed import get_embedder

        table = self._open()
        conf = self.settings.corpus
        pool = max(int(limit), int(conf.candidates))
        embedder = get_embedder(self.settings)
        self._check_dim(table, embedder.dim)
        # The full-text search runs beside the query's embedding and the vector search: both
        # wait in native code, so on two cores a query costs the longer of the two, not the sum.
        full_text = _SEARCH_POOL.submit(self._fts, table, query, pool)
        try:
            nearest = self._nearest(table, embedder.encode([query])[0], pool)
        finally:
            text_rows = full_text.result()
        fused = _rrf([text_rows, nearest], int(conf.rrf_k))
        # A chunk id is its document id plus "#n"; ids never hold "#" otherwise (safe_id).
        return [CorpusRecord(id=row["id"], doc_id=row["id"].split("#", 1)[0], title=row["title"], text=row["text"])
                for row in fused[: int(limit)]]

    def _nearest(self, table, vector, pool: int) -> list[dict]:
        """The ``pool`` passages nearest to ``vector`` (cosine): through the ANN index when the
        corpus has one (its candidates re-ranked on the full vectors), else an exact scan."""
        query = table.search(vector, vector_column_name="vector").distance_type("cosine").limit(pool)
        if self._has_ann(table):
            query = query.refine_factor(ANN_REFINE)
        return query.select(["id", "title", "text", "_distance"]).to_list()

    def _has_ann(self, table) -> bool:
        # Cached: an index appears only through an add (which resets this), and asking LanceDB
        # on every query costs a listing of the table's indexes.
        if self._ann is None:
            self._ann = any("vector" in idx.columns for idx in table.list_indices())
        return self._ann

    def _fts(self, table, query: str, pool: int) -> list[dict]:
        """Full-text candidates; a query the parser rejects is retried as plain words, and a
        corpus without its index (an interrupted add) falls back to vectors alone."""
        words = " ".join(_WORDS.findall(query))
        for text in dict.fromkeys([query, words]):
            if not text.strip():
                continue
            try:
                return (table.search(text, query_type="fts", fts_columns=_FTS_COLUMN)
                        .limit(pool).select(["id", "title", "text", "_score"]).to_list())
            except Exception:  # noqa: BLE001 - lance raises ValueError/RuntimeError for both
                continue
        return []

    # ------------------------------------------------------------------ get

    def get(self, passage_id: str) -> CorpusRecord:
        """The stored passage with this id, or the whole document (chunks joined) for a
        document id. Raises CorpusError when there is neither."""
        table = self._open()
        columns = ["id", "doc_id", "chunk", "title", "text", "source", "url"]
        rows = table.search().where(f"id = {_quote(passage_id)}").select(columns).limit(1).to_list()
        if not rows:
            rows = table.search().where(f"doc_id = {_quote(passage_id)}").select(columns).limit(None).to_list()
            rows.sort(key=lambda r: r["chunk"])
        if not rows:
            raise CorpusError(f"no passage {passage_id!r} in corpus {self.name!r}")
        first = rows[0]
        text = "\n\n".join(r["text"] for r in rows)
        return CorpusRecord(id=first["id"] if len(rows) == 1 else first["doc_id"], doc_id=first["doc_id"],
                            title=first["title"], text=text, source=first["source"], url=first["url"])

    def stats(self) -> CorpusStats:
        """Counts and index state of this corpus."""
        table = self._open()
        chunks = table.count_rows()
        docs = 0
        if chunks:
            docs = len(set(table.search().select(["doc_id"]).limit(None).to_arrow().column("doc_id").to_pylist()))
        meta = table.schema.metadata or {}
        unindexed, indexed = chunks, False
        for idx in table.list_indices():
            if _FTS_COLUMN in idx.columns:
                indexed = True
                unindexed = table.index_stats(idx.name).num_unindexed_rows
        return CorpusStats(name=self.name, documents=docs, chunks=chunks,
                           path=str(state_dir(self.settings, "lancedb", create=False) / f"{self.table_name}.lance"),
                           embed_model=meta.get(b"embed_model", b"").decode(),
                           dim=table.schema.field("vector").type.list_size,
                           fts_indexed=indexed, unindexed_rows=unindexed)


def _arrow_rows(columns: dict[str, list], vectors, schema):
    """One Arrow table for one write: columns as they are, vectors as a fixed-size list."""
    import pyarrow as pa

    flat = pa.array(vectors.reshape(-1), type=pa.float32())
    arrays = {name: columns[name] for name in _TEXT_COLUMNS}
    arrays["vector"] = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    return pa.table(arrays, schema=schema)


def _ann_config(rows: int):
    """The vector index: IVF partitions of HNSW graphs over 8-bit scalar-quantised vectors
    (see corpus.ann_min_rows in defaults.toml for the measurement behind it)."""
    from lancedb.index import IvfHnswSq

    return IvfHnswSq(distance_type="cosine", num_partitions=max(1, rows // ANN_ROWS_PER_PARTITION))


def _rrf(rankings: list[list[dict]], k: int) -> list[dict]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank of d)."""
    scores: dict[str, float] = {}
    rows: dict[str, dict] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row["id"]] = scores.get(row["id"], 0.0) + 1.0 / (k + rank)
            rows.setdefault(row["id"], row)
    order = sorted(scores, key=lambda i: (-scores[i], i))
    return [rows[i] for i in order]


def _snippet(text: str) -> str:
    flat = " ".join((text or "").split())
    if len(flat) <= _SNIPPET_CHARS:
        return flat
    return flat[:_SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."


# ---------------------------------------------------------------------- module functions

def list_corpora(settings: Settings) -> list[str]:
    """Names of the corpora in this state folder, sorted."""
    db = _connect(settings)
    return sorted(n[len(TABLE_PREFIX):] for n in _table_names(db) if n.startswith(TABLE_PREFIX))


def corpus_stats(settings: Settings, name: str) -> CorpusStats:
    """Documents, chunks, model and index state of one corpus."""
    return Corpus(settings, name).stats()


def remove_corpus(settings: Settings, name: str) -> None:
    """Delete a corpus and its index. Raises CorpusError when it does not exist."""
    corpus = Corpus(settings, name)
    if not corpus.exists():
        raise CorpusError(f"corpus {name!r} does not exist", hint="`appliance corpus list` shows the corpora")
    corpus._db.drop_table(corpus.table_name)


# ---------------------------------------------------------------------- adapters

class CorpusBackend:
    """The corpus as a SearchBackend (its failures become SearchError)."""

    name = "corpus"

    def __init__(self, settings: Settings, corpus: str):
        self.settings = settings
        self.corpus_name = check_name(corpus)
        self.unresponsive_engines: dict[str, str] = {}
        self._corpus: Optional[Corpus] = None
        self._lock = threading.Lock()

    def search(self, query: str, limit: int) -> list[Hit]:
        """Hybrid search of the corpus; raises SearchError when it is missing or unreadable."""
        try:
            with self._lock:
                if self._corpus is None:
                    self._corpus = Corpus(self.settings, self.corpus_name)
            return self._corpus.search(query, limit)
        except CorpusError as exc:
            raise SearchError(exc.message, hint=exc.hint) from None


class CorpusResolver:
    """Answers ``corpus://NAME/ID`` URLs for the fetcher from the stored text (no network)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._corpora: dict[str, Corpus] = {}
        self._lock = threading.Lock()

    def __call__(self, url: str) -> Source:
        name, passage = parse_corpus_url(url)
        with self._lock:
            corpus = self._corpora.get(name)
            if corpus is None:
                corpus = self._corpora[name] = Corpus(self.settings, name)
        record = corpus.get(passage)
        return Source(url=url, norm_url=url.strip(), title=record.title, text=record.text,
                      content_type="text/plain", ok=True, link=record.url)
