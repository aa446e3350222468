"""Office documents, e-books, spreadsheets and e-mail as parts with a location each.

A reader turns one file (a path, or the bytes of an e-mail attachment) into ``Part``s: the text
of one place in it that a citation can name, "slide 3", "sheet Sales", "chapter 2", "message 4",
or the whole document when it has no finer place. Readers stream: a part is yielded as soon as
it is read, so a large workbook or mailbox is never held whole as text.

Libraries (all permissive): pypdf (BSD-3, see pdf.py), python-docx, python-pptx and openpyxl (MIT) for the OOXML formats,
striprtf (BSD-3) for RTF; EPUB, ODT, CSV and e-mail are read with the standard library. Every
ZIP-based format is checked before it is opened: its declared uncompressed size is capped
(a ZIP bomb is a named skip, not an exhausted machine).
"""

from __future__ import annotations

import csv
import email
import email.policy
import io
import mailbox
import posixpath
import zipfile
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Optional
from xml.etree import ElementTree

# The most a ZIP-based document may unpack to, all members together. Real documents are far
# below it (a 300-page DOCX with images is tens of MB); a ZIP bomb is far above.
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024
# Spreadsheet rows per part: a sheet of 100,000 rows becomes parts of this many, each cited by
# its row range, so that a part is a readable passage and memory stays bounded.
ROWS_PER_PART = 100
_MAX_CELL_CHARS = 2000

Src = Path | bytes


@dataclass
class Part:
    """One citable place in a document: its text, where it is, and (when it is not the
    default ``name, location``) the title a citation shows."""

    text: str
    location: str = ""
    key: str = ""
    title: str = ""
    page: int = 0
    # A part that could not be read (an attachment): the reason; ``text`` is then empty.
    skipped: str = ""
    # Skipped only for want of OCR (tesseract missing or switched off): read once OCR is on.
    needs_ocr: bool = False


class Unreadable(Exception):
    """The file cannot be read as its type; the message is the reason, one line."""


def _stream(src: Src) -> BinaryIO:
    return io.BytesIO(src) if isinstance(src, bytes) else src.open("rb")


def _checked_zip(src: Src, kind: str) -> zipfile.ZipFile:
    """The ZIP container of a document, refused when it is not one or unpacks too large."""
    try:
        archive = zipfile.ZipFile(_stream(src))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError):
        raise Unreadable(f"not a {kind} (a {kind} is a ZIP container; this file is not one)") from None
    total = sum(info.file_size for info in archive.infolist())
    if total > MAX_UNZIPPED_BYTES:
        archive.close()
        raise Unreadable(f"unpacks to {total // 2**20} MB, over the {MAX_UNZIPPED_BYTES // 2**20} MB limit "
                         f"(a ZIP bomb, or a {kind} too large to read)")
    return archive


def _openable(src: Src, kind: str):
    """What a python-docx/pptx/openpyxl loader accepts, after the ZIP checks."""
    _checked_zip(src, kind).close()
    return io.BytesIO(src) if isinstance(src, bytes) else str(src)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if hasattr(value, "isoformat"):
        value = value.isoformat()  # type: ignore[union-attr]
    return " ".join(str(value).split())[:_MAX_CELL_CHARS]


def labelled_rows(rows: Iterable[list[str]]) -> Iterator[str]:
    """Table rows as readable lines: the first non-empty row is the header and every later
    row reads ``header: value; header: value`` (empty cells left out)."""
    header: Optional[list[str]] = None
    for cells in rows:
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        pairs: list[str] = []
        for i, value in enumerate(cells):
            if not value:
                continue
            label = header[i] if i < len(header) and header[i] else f"column {i + 1}"
            pair = f"{label}: {value}"
            if not pairs or pairs[-1] != pair:  # merged cells repeat their value
                pairs.append(pair)
        if pairs:
            yield "; ".join(pairs)


def _table_text(rows: list[list[str]]) -> str:
    """A table as header-labelled rows, one paragraph each; a one-row table as its cells."""
    filled = [r for r in rows if any(r)]
    if len(filled) == 1:
        return "; ".join(c for c in filled[0] if c)
    return "\n\n".join(labelled_rows(filled))


def _row_blocks(rows: Iterator[tuple[int, list[str]]], where: str, key: str) -> Iterator[Part]:
    """Numbered rows in parts of ROWS_PER_PART, the header row repeated as labels in each.
    A table that fits in one part is cited by ``where`` alone, a longer one by row range."""
    header: Optional[list[str]] = None
    pending: Optional[Part] = None
    block: list[str] = []
    first = last = 0
    emitted = 0

    def part() -> Part:
        loc = ", ".join(x for x in (where, f"rows {first}-{last}") if x)
        return Part(text="\n\n".join(block), location=loc, key=f"{key}rows{first}-{last}".strip("/"))

    for number, cells in rows:
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        line = next(labelled_rows([header, cells]), "")
        if not line:
            continue
        if not block:
            first = number
        block.append(line)
        last = number
        if len(block) >= ROWS_PER_PART:
            if pending is not None:
                yield pending
                emitted += 1
            pending, block = part(), []
    if pending is not None:
        if not block and emitted == 0:  # exactly one full part: the whole table
            pending.location, pending.key = where, key.strip("/")
        yield pending
        emitted += 1
    if block:
        if emitted == 0:  # the whole table in one part: cited by ``where`` alone
            yield Part(text="\n\n".join(block), location=where, key=key.strip("/"))
        else:
            yield part()
    elif emitted == 0 and header is not None:
        yield Part(text="; ".join(c for c in header if c), location=where, key=key.strip("/"))


# ---------------------------------------------------------------------- PDF

def read_pdf(src: Src, name: str) -> Iterator[Part]:
    """One part per page with text, cited by its printed page label (``p. xvii``, ``p. 17``;
    ``p. 3 (OCR)`` for a scan read by OCR) and opened at its page index (``#page=19``). Scanned
    pages that could not be read are one skip for the file, naming them and why."""
    from . import ocr
    from .pdf import read_pdf_pages

    unread: dict[str, list[str]] = {}
    pages = 0
    for page in read_pdf_pages(src):
        pages += 1
        if page.skipped:
            unread.setdefault(page.skipped, []).append(f"p. {page.label}")
            continue
        where = f"p. {page.label}" + (" (OCR)" if page.ocr else "")
        yield Part(text=page.text, location=where, key=f"p{page.index}", page=page.index)
    for why, labels in unread.items():
        shown = ", ".join(labels[:5]) + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")
        if why == "no text layer":
            scope = "a scanned PDF" if len(labels) == pages else f"{len(labels)} scanned page{'s' if len(labels) > 1 else ''}: {shown}"
            yield Part(text="", skipped=f"no text layer ({scope}; {ocr.missing_hint()})", needs_ocr=True)
        else:
            yield Part(text="", skipped=f"{len(labels)} scanned page{'s' if len(labels) > 1 else ''} not read ({shown}: {why})")


# ---------------------------------------------------------------------- word processing

def read_docx(src: Src, name: str) -> Iterator[Part]:
    """Paragraphs (headings included) and tables in document order, as one document."""
    import docx
    from docx.table import Table

    document = docx.Document(_openable(src, "DOCX"))
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            text = _table_text([[_cell(c.text) for c in row.cells] for row in item.rows])
        else:
            text = item.text.strip()
        if text:
            blocks.append(text)
    if blocks:
        yield Part(text="\n\n".join(blocks))


_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_ODF_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"


def _odf_text(element: ElementTree.Element) -> str:
    """The text of an ODF paragraph, its <text:s/>, tabs and line breaks as whitespace."""
    out = [element.text or ""]
    for child in element:
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "s":
            out.append(" " * int(child.get(f"{{{_ODF_TEXT}}}c", "1") or 1))
        elif tag == "tab":
            out.append("\t")
        elif tag == "line-break":
            out.append("\n")
        elif tag not in ("note", "annotation"):
            out.append(_odf_text(child))
        out.append(child.tail or "")
    return "".join(out)


def _odf_blocks(element: ElementTree.Element) -> Iterator[str]:
    for child in element:
        tag = child.tag
        if tag in (f"{{{_ODF_TEXT}}}p", f"{{{_ODF_TEXT}}}h"):
            text = " ".join(_odf_text(child).split())
            if text:
                yield text
        elif tag == f"{{{_ODF_TABLE}}}table":
            rows = [[" ".join(" ".join(_odf_text(p).split()) for p in cell.iter(f"{{{_ODF_TEXT}}}p"))
                     for cell in row if cell.tag == f"{{{_ODF_TABLE}}}table-cell"]
                    for row in child.iter(f"{{{_ODF_TABLE}}}table-row")]
            text = _table_text(rows)
            if text:
                yield text
        else:
            yield from _odf_blocks(child)


def read_odt(src: Src, name: str) -> Iterator[Part]:
    """An OpenDocument text: paragraphs, headings, lists and tables, as one document."""
    with _checked_zip(src, "ODT") as archive:
        try:
            body = archive.read("content.xml")
        except KeyError:
            raise Unreadable("not an ODT (no content.xml)") from None
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise Unreadable(f"damaged ODT (content.xml: {exc})") from None
    blocks = list(_odf_blocks(root))
    if blocks:
        yield Part(text="\n\n".join(blocks))


def read_rtf(src: Src, name: str) -> Iterator[Part]:
    """RTF through striprtf: its text, paragraphs kept."""
    from striprtf.striprtf import rtf_to_text

    body = src if isinstance(src, bytes) else src.read_bytes()
    if not body.lstrip().startswith(b"{\\rtf"):
        raise Unreadable("not an RTF file (no {\\rtf header)")
    text = rtf_to_text(body.decode("latin-1"), errors="replace")
    paragraphs = [" ".join(p.split()) for p in text.splitlines()]
    text = "\n\n".join(p for p in paragraphs if p)
    if text:
        yield Part(text=text)


# ---------------------------------------------------------------------- slides and sheets

def read_pptx(src: Src, name: str) -> Iterator[Part]:
    """One part per slide with text: its text frames, tables and speaker notes."""
    from pptx import Presentation

    deck = Presentation(_openable(src, "PPTX"))
    for number, slide in enumerate(deck.slides, start=1):
        blocks = [b for shape in slide.shapes for b in _shape_text(shape)]
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                blocks.append(notes.text.strip())
        if blocks:
            yield Part(text="\n\n".join(blocks), location=f"slide {number}", key=f"slide{number}")


def _shape_text(shape) -> Iterator[str]:
    if getattr(shape, "shapes", None) is not None:  # a group
        for inner in shape.shapes:
            yield from _shape_text(inner)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        text = _table_text([[_cell(c.text) for c in row.cells] for row in shape.table.rows])
        if text:
            yield text
    elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        for paragraph in shape.text_frame.paragraphs:
            text = " ".join("".join(run.text for run in paragraph.runs).split())
            if text:
                yield text


def read_xlsx(src: Src, name: str) -> Iterator[Part]:
    """Each sheet as header-labelled rows, streamed (read-only mode), in parts of
    ROWS_PER_PART rows; a part is cited ``sheet NAME`` or ``sheet NAME, rows 2-101``."""
    import openpyxl

    book = openpyxl.load_workbook(_openable(src, "XLSX"), read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            rows = ((number, [_cell(v) for v in values])
                    for number, values in enumerate(sheet.iter_rows(values_only=True), start=1))
            yield from _row_blocks(rows, f"sheet {sheet.title}", f"sheet-{sheet.title}/")
    finally:
        book.close()


def read_csv(src: Src, name: str) -> Iterator[Part]:
    """A CSV (or TSV) file as header-labelled rows in parts of ROWS_PER_PART, streamed."""
    raw = _stream(src)
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="")
    try:
        sample = text.read(8192)
        text.seek(0)
        try:
            dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
        reader = csv.reader(text, dialect)
        rows = ((number, [_cell(v) for v in cells]) for number, cells in enumerate(reader, start=1))
        try:
            yield from _row_blocks(rows, "", "")
        except csv.Error as exc:
            raise Unreadable(f"damaged CSV ({exc})") from None
    finally:
        text.close()


# ---------------------------------------------------------------------- e-books

def read_epub(src: Src, name: str) -> Iterator[Part]:
    """One part per chapter with text, in reading order (the package's spine)."""
    from .extract import extract_html

    with _checked_zip(src, "EPUB") as archive:
        try:
            container = ElementTree.fromstring(archive.read("META-INF/container.xml"))
            rootfile = next(e for e in container.iter() if e.tag.endswith("rootfile")).get("full-path", "")
            package = ElementTree.fromstring(archive.read(rootfile))
        except (KeyError, StopIteration, ElementTree.ParseError):
            raise Unreadable("not an EPUB (no readable META-INF/container.xml or package file)") from None
        base = posixpath.dirname(rootfile)
        manifest = {e.get("id"): e.get("href", "") for e in package.iter() if e.tag.endswith("}item")}
        spine = [e.get("idref") for e in package.iter() if e.tag.endswith("}itemref")]
        chapter = 0
        for idref in spine:
            href = manifest.get(idref)
            if not href:
                continue
            try:
                body = archive.read(posixpath.normpath(posixpath.join(base, href)))
            except KeyError:
                continue
            text = extract_html(body).text.strip()
            if text:
                chapter += 1
                yield Part(text=text, location=f"chapter {chapter}", key=f"ch{chapter}")


# ---------------------------------------------------------------------- e-mail

def _message_parts(message: EmailMessage, name: str, where: str, key: str) -> Iterator[Part]:
    """A message as a part titled by its subject (headers and body), then each attachment of
    a supported type as parts of its own."""
    from .extract import extract_html

    subject = " ".join(str(message.get("subject", "") or "").split()) or "(no subject)"
    headers = [f"{label}: {' '.join(str(message.get(label, '')).split())}"
               for label in ("From", "To", "Date", "Subject") if message.get(label)]
    body_part = message.get_body(preferencelist=("plain", "html"))
    body = ""
    if body_part is not None:
        content = body_part.get_content()
        if body_part.get_content_subtype() == "html":
            content = extract_html(content).text
        body = str(content).strip()
    title = f"{subject} ({name}, {where})" if where else subject
    yield Part(text="\n".join(headers) + ("\n\n" + body if body else ""), location=where,
               key=key, title=title)
    for attachment in message.iter_attachments():
        filename = attachment.get_filename() or ""
        spot = ", ".join(x for x in (where, f"attachment {filename or '(no name)'}") if x)
        reader = reader_for(filename)
        if reader is None or reader is read_mbox:
            # Counted, not read: pictures, signatures, archives, forwarded messages.
            yield Part(text="", skipped=f"{spot}: not a document type that is read")
            continue
        data = attachment.get_content()
        data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            for sub in reader(data, filename):
                loc = ", ".join(x for x in (spot, sub.location) if x)
                shown = ", ".join(x for x in (filename, sub.location) if x)
                yield Part(text=sub.text, location=loc, key=f"{key}/{filename}/{sub.key}".strip("/"),
                           title=sub.title or f"{shown} (attached to {subject})", skipped=sub.skipped,
                           needs_ocr=sub.needs_ocr)
        except Exception as exc:  # noqa: BLE001 - one bad attachment must not lose the message
            yield Part(text="", skipped=f"{spot}: {reason(exc)}")


def read_eml(src: Src, name: str) -> Iterator[Part]:
    """One message: subject as title, sender, date and body; document attachments as parts."""
    with _stream(src) as handle:
        message = email.message_from_binary_file(handle, policy=email.policy.default)
    if not message.keys():
        raise Unreadable("not an e-mail message (no headers)")
    yield from _message_parts(message, name, "", "")  # type: ignore[arg-type]


def read_mbox(src: Src, name: str) -> Iterator[Part]:
    """Each message of an mbox mailbox (read one at a time), cited as ``message N``."""
    if isinstance(src, bytes):
        raise Unreadable("an mbox inside another document is not read")
    with src.open("rb") as handle:
        if not handle.read(5) == b"From ":
            raise Unreadable("not an mbox mailbox (it does not start with a 'From ' line)")
    box = mailbox.mbox(str(src), create=False)
    try:
        for number, key in enumerate(box.iterkeys(), start=1):
            message = email.message_from_bytes(box.get_bytes(key), policy=email.policy.default)
            yield from _message_parts(message, name, f"message {number}", f"m{number}")  # type: ignore[arg-type]
    finally:
        box.close()


# ---------------------------------------------------------------------- dispatch

Reader = Callable[[Src, str], Iterator[Part]]

READERS: dict[str, Reader] = {
    ".pdf": read_pdf, ".docx": read_docx, ".pptx": read_pptx, ".xlsx": read_xlsx, ".xlsm": read_xlsx,
    ".csv": read_csv, ".tsv": read_csv, ".epub": read_epub, ".eml": read_eml, ".mbox": read_mbox,
    ".odt": read_odt, ".rtf": read_rtf,
}


def reader_for(filename: str) -> Optional[Reader]:
    """The reader of a file name's type, or None when the type is not read."""
    return READERS.get(Path(filename).suffix.lower())


def reason(exc: BaseException) -> str:
    """An exception from a reader as a one-line skip reason."""
    if isinstance(exc, Unreadable):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read ({exc.strerror})"
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"cannot read ({type(exc).__name__}{': ' + first if first else ''})"
