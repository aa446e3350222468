"""PDF files as one document per page, each named by its printed page label.

pypdf (BSD-3) reads the text layer; each page becomes its own document so that a quote is
checked against the text of the page it is cited with, and its citation reads
``report.pdf, p. 17`` with a ``file:///...#page=17`` URL a PDF viewer opens at that page.
A PDF that cannot be read is one named skip, never a traceback.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .documents import Unreadable


@dataclass
class PdfPage:
    """The text of one page, its printed label ("xvii", "17") and its 1-based index."""

    label: str
    index: int
    text: str


class PdfUnreadable(Unreadable):
    """The file is not a PDF whose text can be read; the message is the reason, one line."""


def read_pdf_pages(path: Path | bytes) -> Iterator[PdfPage]:
    """The pages of ``path`` (a file, or a PDF's bytes) that hold text, one at a time.
    Raises PdfUnreadable with a one-line reason."""
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
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if text:
                label = labels[number - 1] if number - 1 < len(labels) else str(number)
                yield PdfPage(label=label or str(number), index=number, text=text)
    except PdfUnreadable:
        raise
    except (PdfReadError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PdfUnreadable(f"damaged PDF ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
