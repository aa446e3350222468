"""PDF files as one document per page, each named by its printed page label.

pypdf (BSD-3) reads the text layer; each page becomes its own document so that a quote is
checked against the text of the page it is cited with, and its citation reads
``report.pdf, p. 17`` with a ``file:///...#page=17`` URL a PDF viewer opens at that page.
A page with no text layer but with images is a scan: it is read by OCR where tesseract is
installed (ocr.py) and cited as ``p. 3 (OCR)``, else reported as a page without a text layer.
A blank page (no text, no image) holds nothing to cite. A PDF that cannot be read is one named
skip, never a traceback.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import ocr
from .documents import Unreadable

# An encoding CMap whose one code space is every two-byte code.
_TWO_BYTE_SPACE = re.compile(rb"1\s+begincodespacerange\s*<0000>\s*<ffff>\s*endcodespacerange", re.IGNORECASE)
# Images smaller than this on both sides are rules, logos or bullets, not a scanned page.
_MIN_SCAN_SIDE = 200


def _page_images(page) -> list | None:
    """The images of a page without text that are worth reading, as PIL images in the page's
    order; None when there is none (a blank page, or only rules and logos); an empty list when
    the page has images that cannot be decoded."""
    try:
        files = list(page.images)
    except Exception:  # noqa: BLE001 - an undecodable image stream: a scan we cannot read
        return []
    images, failed = [], 0
    for file in files:
        try:
            image = file.image
        except Exception:  # noqa: BLE001 - one bad image must not lose the page's others
            failed += 1
            continue
        if image is not None and min(image.size) >= _MIN_SCAN_SIDE:
            images.append(image)
    return images if images or failed else None


@dataclass
class PdfPage:
    """The text of one page, its printed label ("xvii", "17") and its 1-based index. ``ocr``:
    the text was read from the page's images. ``skipped``: why a scanned page has no text
    (no OCR program, or OCR failed); ``text`` is then empty."""

    label: str
    index: int
    text: str
    ocr: bool = False
    skipped: str = ""


class PdfUnreadable(Unreadable):
    """The file is not a PDF whose text can be read; the message is the reason, one line."""


def _two_byte_codes(page) -> None:
    """Read a page's composite fonts whose codes an embedded CMap says are two bytes as
    Identity-H, for text extraction only (the file is never written).

    Some PDF printers (WeasyPrint, when a line needs a fallback font) give a Type0 font its
    own encoding CMap with a two-byte code space instead of the named Identity-H. pypdf reads
    such codes a byte at a time, and the page's text comes out as NUL-interleaved letters
    and stray symbols. The characters come from the font's ToUnicode map, keyed by the same
    two-byte codes, so reading the codes as Identity-H gives the text the page shows.
    """
    from pypdf.generic import NameObject

    try:
        fonts = page["/Resources"]["/Font"]
        for ref in fonts.values():
            font = ref.get_object()
            if font.get("/Subtype") != "/Type0" or "/ToUnicode" not in font:
                continue
            encoding = font.get("/Encoding")
            cmap = encoding.get_object() if encoding is not None else None
            if cmap is None or not hasattr(cmap, "get_data"):
                continue  # a named encoding, read as it says
            if _TWO_BYTE_SPACE.search(cmap.get_data()):
                font[NameObject("/Encoding")] = NameObject("/Identity-H")
    except (KeyError, TypeError, AttributeError, ValueError, OSError):
        return  # no fonts, or damaged ones: the text is read as it is


def read_pdf_pages(path: Path | bytes) -> Iterator[PdfPage]:
    """The pages of ``path`` (a file, or a PDF's bytes) that hold text, one at a time, and the
    scanned pages that could not be read (``skipped`` set). Raises PdfUnreadable with a
    one-line reason."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    # pypdf logs recoverable damage at WARNING; the skip list is where problems are reported.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        if isinstance(path, bytes):
            head = path[:1024]
        else:
            with path.open("rb") as handle:
                head = handle.read(1024)
        if not head.lstrip().startswith(b"%PDF"):
            raise PdfUnreadable("not a PDF (no %PDF header)")
        reader = PdfReader(io.BytesIO(path) if isinstance(path, bytes) else str(path))
        if reader.is_encrypted:
            raise PdfUnreadable("encrypted PDF (give a decrypted copy)")
        labels = list(reader.page_labels)
        exe = ocr.program()
        for number, page in enumerate(reader.pages, start=1):
            _two_byte_codes(page)
            text = (page.extract_text() or "").replace("\x00", "").strip()
            label = (labels[number - 1] if number - 1 < len(labels) else "") or str(number)
            if text:
                yield PdfPage(label=label, index=number, text=text)
                continue
            scanned = _page_images(page)
            if scanned is None:
                continue  # a blank page: nothing on it to cite
            if exe is None:
                yield PdfPage(label=label, index=number, text="", skipped="no text layer")
                continue
            if not scanned:
                yield PdfPage(label=label, index=number, text="", skipped="its images cannot be decoded")
                continue
            try:
                read = "\n\n".join(t for t in (ocr.read_image(exe, image).strip() for image in scanned) if t)
            except ocr.OcrFailed as exc:
                yield PdfPage(label=label, index=number, text="", skipped=str(exc))
                continue
            if read:
                yield PdfPage(label=label, index=number, text=read, ocr=True)
            else:
                yield PdfPage(label=label, index=number, text="", skipped="OCR found no text")
    except PdfUnreadable:
        raise
    except (PdfReadError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PdfUnreadable(f"damaged PDF ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
