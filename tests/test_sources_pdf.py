"""PDF pages in the local corpus: real PDFs written by the test, one document per page, titled by
the printed page label, and bad PDFs as one named skip each with the rest of the folder added."""

from __future__ import annotations

from pathlib import Path

from conftest import make_settings


def write_pdf(path: Path, pages: list[str], labels: str = "") -> None:
    """A minimal real PDF: one Helvetica text line per page; ``labels`` is a /PageLabels /Nums
    body such as ``0 << /S /r >> 2 << /S /D >>`` (roman front matter, then 1, 2, ...)."""
    objects: list[bytes] = []
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    extra = f" /PageLabels << /Nums [{labels}] >>" if labels else ""
    objects.append(f"<< /Type /Catalog /Pages 2 0 R{extra} >>".encode())
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))


def test_pdf_pages_are_documents_named_by_their_page_label():
    import tempfile

    from appliance.sources.ingest import ReadLog, iter_documents

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "Berichte 2024 ü"          # spaces and non-ASCII in the path
        folder.mkdir()
        write_pdf(folder / "annual-report.pdf",
                  ["Foreword by the board", "Revenue grew by twelve percent in 2024", "Staff numbers fell to 340"],
                  labels="0 << /S /r >> 1 << /S /D >>")
        (folder / "empty.pdf").write_bytes(b"")
        (folder / "fake.pdf").write_text("<html><body>not a pdf</body></html>")
        (folder / "truncated.pdf").write_bytes((folder / "annual-report.pdf").read_bytes()[:200])
        log = ReadLog()
        docs = list(iter_documents([folder], log))
        titles = [d.title for d in docs]
        assert titles == ["annual-report.pdf, p. i", "annual-report.pdf, p. 1", "annual-report.pdf, p. 2"]
        revenue = docs[1]
        assert "Revenue grew by twelve percent" in revenue.text
        assert revenue.url.startswith("file:///") and revenue.url.endswith("annual-report.pdf#page=2")
        reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in log.skipped}
        assert reasons["empty.pdf"] == "empty file"
        assert reasons["fake.pdf"].startswith("not a PDF")
        assert "truncated.pdf" in reasons and "\n" not in reasons["truncated.pdf"]


def test_a_pdf_page_is_searched_and_cited_with_its_label(tmp_path):
    from appliance.sources.corpus import Corpus

    folder = tmp_path / "docs"
    folder.mkdir()
    write_pdf(folder / "annual-report.pdf",
              ["Foreword by the board", "Revenue grew by twelve percent in 2024", "Staff numbers fell to 340"],
              labels="0 << /S /r >> 1 << /S /D >>")
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "docs"})
    corpus = Corpus(settings, "docs")
    corpus.add([folder])
    hits = corpus.search("how much did revenue grow", limit=3)
    assert hits and hits[0].title == "annual-report.pdf, p. 1"


def test_an_encrypted_pdf_is_a_named_skip(tmp_path):
    from pypdf import PdfReader, PdfWriter

    from appliance.sources.ingest import ReadLog, iter_documents

    plain = tmp_path / "plain.pdf"
    write_pdf(plain, ["Secret figures for the board"])
    writer = PdfWriter()
    for page in PdfReader(str(plain)).pages:
        writer.add_page(page)
    writer.encrypt(user_password="pw", algorithm="RC4-128")
    folder = tmp_path / "docs"
    folder.mkdir()
    with (folder / "locked.pdf").open("wb") as handle:
        writer.write(handle)
    (folder / "notes.md").write_text("# Notes\n\nThe rest of the folder is still added.\n")
    log = ReadLog()
    docs = list(iter_documents([folder], log))
    assert [d.title for d in docs] == ["Notes"]
    assert len(log.skipped) == 1 and log.skipped[0].endswith("locked.pdf: encrypted PDF (give a decrypted copy)")


PRINTED = Path(__file__).parent / "data" / "printed-serif.pdf"


def test_a_printed_pdf_with_a_two_byte_encoding_cmap_reads_as_its_text(tmp_path):
    """tests/data/printed-serif.pdf, printed by WeasyPrint: a line needing a fallback font gives
    the body font an embedded two-byte encoding CMap, which pypdf alone reads as NUL-interleaved
    letters. Its text comes out as the page shows it, found by search and quoted verbatim."""
    from pypdf import PdfReader

    from appliance.pipeline.anchor import find_quote
    from appliance.sources.corpus import Corpus
    from appliance.sources.pdf import read_pdf_pages

    raw = PdfReader(str(PRINTED)).pages[0].extract_text()
    assert "\x00" in raw, "the fixture no longer shows the encoding this test is about"
    (page,) = list(read_pdf_pages(PRINTED))
    assert "\x00" not in page.text
    assert "rebuilt in 1931 after the winter storms" in page.text
    assert "The Velka trading house (1844–1909) opened an office in Chiang Mai (เชียงใหม่)" in page.text

    folder = tmp_path / "survey"
    folder.mkdir()
    (folder / "survey.pdf").write_bytes(PRINTED.read_bytes())
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "survey"})
    corpus = Corpus(settings, "survey")
    corpus.add([folder])
    hits = corpus.search("who designed the lighthouse of Port Ardmore", limit=3)
    assert hits and hits[0].title == "survey.pdf, p. 1"
    best = corpus.ranked("who designed the lighthouse of Port Ardmore", 1)[0]
    assert find_quote("Its lighthouse stands 24 metres tall and was designed by Ida Brandt", best.text)
