"""Reading files into documents and documents into chunks, for the local corpus.

Supported: .html/.htm (main text by trafilatura), .md, .txt, .jsonl records
``{id?, title, text, url?}``, PDF (one document per page) and the document types of
documents.py (Word, PowerPoint, Excel, CSV, EPUB, e-mail, ODT, RTF), each place in them a
document of its own with its location. Anything else under a folder is skipped and counted.

Files are read one at a time and their documents yielded as they are read, so a caller that
writes in bounded batches never holds a whole folder, or a whole long PDF, in memory. Each
file's content hash is computed first: a caller that already holds that file unchanged says so
through ``check`` and the file is not read at all.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from ..errors import UsageError
from .documents import READERS, Part, reason
from .extract import decode_text, extract_html
from .sentences import split_sentences

TEXT_SUFFIXES = (".html", ".htm", ".md", ".markdown", ".txt", ".jsonl")
SUFFIXES = TEXT_SUFFIXES + tuple(READERS)
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._~/-]+")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


@dataclass
class Document:
    """One document to index; ``id`` becomes its ``corpus://NAME/ID`` URL."""

    id: str
    title: str
    text: str
    source: str
    url: str = ""
    # The file it was read from (absolute), that file's sha256, and the place in it
    # ("p. 17", "slide 3", "sheet Sales", "message 4"; "" for the whole file).
    path: str = ""
    file_hash: str = ""
    location: str = ""

    @property
    def content_hash(self) -> str:
        """What makes re-adding unchanged content a no-op, whatever path it came from."""
        return hashlib.sha256(f"{self.title}\x00{self.text}".encode("utf-8")).hexdigest()


@dataclass
class ReadLog:
    """What reading the paths found, including what it could not use."""

    files: int = 0
    skipped: list[str] = field(default_factory=list)
    # Absolute paths of the files found and hashed (whether read or unchanged).
    seen: set[str] = field(default_factory=set)
    # Absolute paths of files with pages skipped only for want of OCR (scans read without it).
    ocr_pending: set[str] = field(default_factory=set)
    unchanged_files: int = 0


# check(path, sha256) -> "unchanged" (not read), or anything else (read it).
Check = Callable[[str, str], str]


def iter_documents(paths: list[str | Path], log: ReadLog, check: Optional[Check] = None) -> Iterator[Document]:
    """Documents from files and folders (recursively; hidden entries are skipped)."""
    for raw in paths:
        root = Path(raw).expanduser()
        if not root.exists():
            raise UsageError(f"{raw} does not exist", hint="give files or folders to add")
        if root.is_file():
            yield from _read_file(root, root.name, log, check)
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part.startswith(".") for part in rel.parts) or path.is_dir():
                continue
            if not path.is_file():  # gone since the folder was listed, a broken link, a device
                there = path.exists() or path.is_symlink()
                log.skipped.append(f"{path}: {'not a regular file' if there else 'cannot read (No such file or directory)'}")
                continue
            if path.suffix.lower() not in SUFFIXES:
                log.skipped.append(f"{path}: unsupported file type")
                continue
            yield from _read_file(path, f"{root.resolve().name}/{rel.as_posix()}", log, check)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in blocks (a large file is never held whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_file(path: Path, doc_id: str, log: ReadLog, check: Optional[Check]) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        log.skipped.append(f"{path}: unsupported file type (use {', '.join(SUFFIXES)})")
        return
    try:
        digest = file_sha256(path)
        empty = path.stat().st_size == 0
    except OSError as exc:  # gone since the folder was listed, or unreadable
        log.skipped.append(f"{path}: cannot read ({exc.strerror or type(exc).__name__})")
        return
    where = str(path.resolve())
    if where in log.seen:  # named twice (a folder and a file in it): its passages are in once
        log.skipped.append(f"{path}: given more than once (read once)")
        return
    log.files += 1
    log.seen.add(where)
    if check is not None and check(where, digest) == "unchanged":
        log.unchanged_files += 1
        return
    doc_id = safe_id(doc_id)
    if suffix not in TEXT_SUFFIXES:
        if empty:
            log.skipped.append(f"{path}: empty file")
            return
        for doc in _read_parts(path, doc_id, log):
            doc.path, doc.file_hash = where, digest
            yield doc
        return
    try:
        body = path.read_bytes()
    except OSError as exc:
        log.skipped.append(f"{path}: cannot read ({exc.strerror or type(exc).__name__})")
        return
    if suffix == ".jsonl":
        for doc in _read_jsonl(path, body, doc_id, log):
            doc.path, doc.file_hash = where, digest
            yield doc
        return
    if suffix in (".html", ".htm"):
        page = extract_html(body)
        doc = Document(doc_id, page.title or path.stem, page.text, str(path))
    else:
        text = decode_text(body).strip()
        title = _markdown_title(text) if suffix in (".md", ".markdown") else ""
        doc = Document(doc_id, title or path.stem.replace("_", " "), text, str(path))
    if not doc.text.strip():
        log.skipped.append(f"{path}: no text")
        return
    # A citation of a local page or note opens the file itself, as a document's does.
    doc.url = path.resolve().as_uri()
    doc.path, doc.file_hash = where, digest
    yield doc


def _read_parts(path: Path, doc_id: str, log: ReadLog) -> Iterator[Document]:
    """The places of a document as documents, streamed: each titled ``name, LOCATION`` (a PDF
    page by its printed label, ``p. 17``, its URL the file at that page), so that a citation
    names the place and a quote is checked against the text of that place alone."""
    uri = path.resolve().as_uri()
    count, reported = 0, False
    try:
        for part in _parts(path):
            if part.skipped:
                log.skipped.append(f"{path}: {part.skipped}")
                if part.needs_ocr:
                    log.ocr_pending.add(str(path.resolve()))
                reported = True
                continue
            if not part.text.strip():
                continue
            count += 1
            title = part.title or (f"{path.name}, {part.location}" if part.location else path.name)
            key = safe_id(part.key) if part.key else ""
            yield Document(f"{doc_id}/{key}" if key else doc_id, title, part.text.strip(), str(path),
                           url=f"{uri}#page={part.page}" if part.page else uri, location=part.location)
    except Exception as exc:  # noqa: BLE001 - any reader failure is one named skip, never a traceback
        read = f" after {count} parts were read" if count else ""
        log.skipped.append(f"{path}: {reason(exc)}{read}")
        return
    if count == 0 and not reported:
        log.skipped.append(f"{path}: no text")


def _parts(path: Path) -> Iterator[Part]:
    yield from READERS[path.suffix.lower()](path, path.name)


_JSON_TYPES = {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object",
               type(None): "null"}


def _read_jsonl(path: Path, body: bytes, file_id: str, log: ReadLog) -> Iterator[Document]:
    for number, line in enumerate(decode_text(body).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log.skipped.append(f"{path}:{number}: not valid JSON")
            continue
        problem = _record_problem(record)
        if problem:
            log.skipped.append(f"{path}:{number}: {problem}")
            continue
        # A record's own id is kept as given so that citations can be compared with
        # a benchmark's passage ids (corpus://default/p0006 for passage p0006).
        rid = record.get("id")
        doc_id = safe_id(str(rid)) if rid not in (None, "") else f"{file_id}:{number}"
        yield Document(doc_id, str(record.get("title") or "").strip(), record["text"].strip(),
                       f"{path}:{number}", str(record.get("url") or ""))


def _record_problem(record: object) -> str:
    """Why a JSON-lines record cannot be a document ("" when it can)."""
    if isinstance(record, list):
        return 'a JSON array: write one record per line, {"text": ..., "title"?, "id"?, "url"?}'
    if not isinstance(record, dict):
        return f'not a JSON object but {_JSON_TYPES.get(type(record), "a value")}'
    if "text" not in record:
        return 'no "text" field' + (f" (it has {', '.join(sorted(map(str, record))[:5])})" if record else "")
    text = record["text"]
    if not isinstance(text, str):
        return f'"text" is {_JSON_TYPES.get(type(text), type(text).__name__)}, not a string'
    if not text.strip():
        return '"text" is empty'
    return ""


def _markdown_title(text: str) -> str:
    for line in text.splitlines()[:40]:
        match = _MD_HEADING.match(line)
        if match:
            return match.group(1).strip()
    return ""


def safe_id(text: str) -> str:
    """An id that reads well inside a URL path: unsafe runs become '_', no '#'."""
    cleaned = _ID_UNSAFE.sub("_", text.strip()).strip("/")
    return cleaned or "_"


def chunk_text(text: str, chunk_chars: int, paragraph_max_chars: Optional[int] = None) -> list[str]:
    """Split on paragraph boundaries into chunks of about ``chunk_chars``.

    Paragraphs are packed together while they fit. A single paragraph longer than
    ``chunk_chars`` stays whole up to ``paragraph_max_chars`` (cutting a passage mid-thought
    costs more than an oversized chunk); beyond that it is cut at sentence ends, and a
    sentence longer than that at spaces.
    """
    chunk_chars = max(100, int(chunk_chars))
    hard = max(chunk_chars, int(paragraph_max_chars or chunk_chars))
    pieces: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        pieces.extend([para] if len(para) <= hard else _split_long(para, chunk_chars))
    return _pack(pieces, chunk_chars, "\n\n")


def _split_long(para: str, size: int) -> list[str]:
    return _pack([part for sentence in split_sentences(para) for part in split_at_words(sentence, size)],
                 size, " ")


def _pack(pieces: list[str], size: int, sep: str) -> list[str]:
    """Pieces joined by ``sep`` into as few runs of at most ``size`` characters as their order allows."""
    out: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + len(sep) + len(piece) > size:
            out.append(current)
            current = piece
        else:
            current = f"{current}{sep}{piece}" if current else piece
    if current:
        out.append(current)
    return out


def split_at_words(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, cut between words; a "word" longer
    than ``size`` (base64, a long URL) is cut inside."""
    if len(text) <= size:
        return [text]
    words: list[str] = []
    for word in text.split():
        words += [word[i: i + size] for i in range(0, len(word), size)]
    return _pack(words, size, " ")
