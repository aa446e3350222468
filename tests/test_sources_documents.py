"""Office documents, spreadsheets, e-books and e-mail in the local corpus: real files written by
the test with the libraries that make them (python-docx, python-pptx, openpyxl, the standard
library), each read into documents with their place, and bad files as one named skip each with
the rest of the folder added."""

from __future__ import annotations

import mailbox
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from test_sources_pdf import write_pdf

from appliance.sources.ingest import ReadLog, iter_documents


def read(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """{title: text} of the documents read from ``folder``, and {file name: skip reason}."""
    log = ReadLog()
    docs = {d.title: d.text for d in iter_documents([folder], log)}
    return docs, skip_reasons(log)


def skip_reasons(log: ReadLog) -> dict[str, str]:
    out = {}
    for line in log.skipped:
        assert "\n" not in line and "Traceback" not in line
        path, _, why = line.partition(": ")
        out[Path(path).name] = why
    return out


def write_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly review", level=1)
    document.add_paragraph("Revenue in the northern region rose for the third quarter in a row.")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Region", "Revenue", "Staff"], ["North", "12.5", "40"], ["South", "9.1", "35"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Outlook", level=2)
    document.add_paragraph("The board expects flat revenue next year.")
    document.save(str(path))


def write_pptx(path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    for title, body in [("Launch plan", "The pilot starts in March in two depots."),
                        ("Risks", "Battery supply is the main risk to the schedule.")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.slides[1].notes_slide.notes_text_frame.text = "Mention the second supplier."
    deck.save(str(path))


def write_xlsx(path: Path, ledger_rows: int = 250) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "Sales"
    sales.append(["Region", "Units", "Price"])
    sales.append(["North", 120, 3.5])
    sales.append(["South", 80, 4.0])
    ledger = book.create_sheet("Ledger")
    ledger.append(["Entry", "Amount"])
    for i in range(1, ledger_rows + 1):
        ledger.append([f"item {i}", i * 10])
    book.save(str(path))


def write_epub(path: Path) -> None:
    chapter = ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
               '<title>{t}</title></head><body><h1>{t}</h1><p>{p}</p></body></html>')
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml",
                         '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
                         '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
                         '</rootfiles></container>')
        archive.writestr("OEBPS/content.opf",
                         '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
                         '<manifest><item id="c1" href="text/one.xhtml" media-type="application/xhtml+xml"/>'
                         '<item id="c2" href="text/two.xhtml" media-type="application/xhtml+xml"/></manifest>'
                         '<spine><itemref idref="c2"/><itemref idref="c1"/></spine></package>')
        archive.writestr("OEBPS/text/one.xhtml", chapter.format(
            t="The harbour", p="The lighthouse keeper rowed out to the reef every morning at six."))
        archive.writestr("OEBPS/text/two.xhtml", chapter.format(
            t="The storm", p="A storm in October closed the harbour for eleven days."))


def write_odt(path: Path) -> None:
    content = ('<?xml version="1.0" encoding="UTF-8"?>'
               '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
               'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
               'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"><office:body><office:text>'
               '<text:h text:outline-level="1">Field notes</text:h>'
               '<text:p>The river<text:s/>gauge read 2.4 metres on Monday.</text:p>'
               '<table:table><table:table-row><table:table-cell><text:p>Day</text:p></table:table-cell>'
               '<table:table-cell><text:p>Level</text:p></table:table-cell></table:table-row>'
               '<table:table-row><table:table-cell><text:p>Tuesday</text:p></table:table-cell>'
               '<table:table-cell><text:p>2.9</text:p></table:table-cell></table:table-row></table:table>'
               '</office:text></office:body></office:document-content>')
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text", compress_type=zipfile.ZIP_STORED)
        archive.writestr("content.xml", content)


def message(subject: str, body: str, sender: str = "Ana Ruiz <ana@example.org>") -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "team@example.org"
    msg["Date"] = "Tue, 04 Mar 2025 09:30:00 +0000"
    msg["Subject"] = subject
    msg.set_content(body)
    return msg


def test_docx_pptx_odt_and_rtf_read_as_readable_text(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_docx(folder / "review.docx")
    write_pptx(folder / "deck.pptx")
    write_odt(folder / "notes.odt")
    (folder / "memo.rtf").write_bytes(rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard The depot "
                                      rb"opens on 3 May.\par Caf\'e9 hours are unchanged.\par}")
    docs, skipped = read(folder)
    assert not skipped
    review = docs["review.docx"]
    # Headings, paragraphs and table rows in document order; each row labelled by the header.
    assert review.index("Quarterly review") < review.index("Revenue in the northern") < review.index("Outlook")
    assert "Region: North; Revenue: 12.5; Staff: 40" in review and "Region: South; Revenue: 9.1; Staff: 35" in review
    assert docs["deck.pptx, slide 1"] == "Launch plan\n\nThe pilot starts in March in two depots."
    assert "Battery supply" in docs["deck.pptx, slide 2"] and "second supplier" in docs["deck.pptx, slide 2"]
    assert "The river gauge read 2.4 metres on Monday." in docs["notes.odt"]
    assert "Day: Tuesday; Level: 2.9" in docs["notes.odt"]
    assert "The depot opens on 3 May." in docs["memo.rtf"] and "Café hours" in docs["memo.rtf"]


def test_sheets_and_csv_are_header_labelled_rows_in_bounded_parts(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    write_xlsx(folder / "book.xlsx")
    (folder / "stations.csv").write_text("station;height\nAlta;120\nBrisa;85\n", encoding="utf-8")
    docs, skipped = read(folder)
    assert not skipped
    assert docs["book.xlsx, sheet Sales"] == "Region: North; Units: 120; Price: 3.5\n\nRegion: South; Units: 80; Price: 4"
    ledger = [t for t in docs if t.startswith("book.xlsx, sheet Ledger")]
    assert ledger == ["book.xlsx, sheet Ledger, rows 2-101", "book.xlsx, sheet Ledger, rows 102-201",
                      "book.xlsx, sheet Ledger, rows 202-251"]
    assert docs["book.xlsx, sheet Ledger, rows 202-251"].endswith("Entry: item 250; Amount: 2500")
    assert docs["stations.csv"] == "station: Alta; height: 120\n\nstation: Brisa; height: 85"


def test_epub_chapters_in_reading_order(tmp_path):
    folder = tmp_path / "shelf"
    folder.mkdir()
    write_epub(folder / "tales.epub")
    log = ReadLog()
    docs = list(iter_documents([folder], log))
    assert [d.title for d in docs] == ["tales.epub, chapter 1", "tales.epub, chapter 2"]
    assert "storm in October" in docs[0].text and "lighthouse keeper" in docs[1].text
    assert docs[0].location == "chapter 1" and docs[0].url == (folder / "tales.epub").resolve().as_uri()


def test_email_and_mailbox_with_a_pdf_attachment(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    pdf = tmp_path / "figures.pdf"
    write_pdf(pdf, ["Cover page", "Water use fell by eight percent after the retrofit"])
    msg = message("Retrofit results", "Attached are the figures from the retrofit.")
    msg.add_attachment(pdf.read_bytes(), maintype="application", subtype="pdf", filename="figures.pdf")
    msg.add_attachment(b"\x00\x01", maintype="application", subtype="octet-stream", filename="blob.bin")
    (folder / "results.eml").write_bytes(msg.as_bytes())
    box = mailbox.mbox(str(folder / "archive.mbox"))
    box.add(message("Site visit", "The site visit moved to Thursday."))
    box.add(message("Budget", "The budget for the pumps was approved.", sender="Li Wei <li@example.org>"))
    box.close()
    docs, skipped = read(folder)
    assert skipped == {"results.eml": "attachment blob.bin: not a document type that is read"}
    mail = docs["Retrofit results"]
    assert "From: Ana Ruiz <ana@example.org>" in mail and "Date: Tue, 04 Mar 2025 09:30:00 +0000" in mail
    assert "Attached are the figures" in mail
    attached = docs["figures.pdf, p. 2 (attached to Retrofit results)"]
    assert "Water use fell by eight percent" in attached
    assert docs["Site visit (archive.mbox, message 1)"].endswith("The site visit moved to Thursday.")
    assert "From: Li Wei" in docs["Budget (archive.mbox, message 2)"]


def test_bad_files_are_one_named_skip_each_and_the_rest_is_added(tmp_path):
    folder = tmp_path / "Ablage März 2025"  # spaces and non-ASCII in the path
    folder.mkdir()
    (folder / "good notes.md").write_text("# Good\n\nThis file is still added.\n", encoding="utf-8")
    write_docx(folder / "Bericht für Vorstand.docx")
    (folder / "zero.docx").write_bytes(b"")
    (folder / "zero.xlsx").write_bytes(b"")
    (folder / "not-a-zip.docx").write_text("<html>a web page saved as .docx</html>", encoding="utf-8")
    (folder / "drawing.dwg").write_bytes(b"AC1032")
    # A ZIP bomb: a valid DOCX plus a member of zeros that unpacks far past the cap.
    bomb = folder / "bomb.docx"
    write_docx(bomb)
    with zipfile.ZipFile(bomb, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/media/zeros.bin", "w", force_zip64=True) as member:
            block = bytes(1 << 20)
            for _ in range(600):
                member.write(block)
    assert bomb.stat().st_size < 5 * 2**20
    docs, skipped = read(folder)
    assert sorted(docs) == ["Bericht für Vorstand.docx", "Good"]
    assert skipped["zero.docx"] == "empty file" and skipped["zero.xlsx"] == "empty file"
    assert skipped["not-a-zip.docx"].startswith("not a DOCX")
    assert skipped["drawing.dwg"].startswith("unsupported file type")
    assert skipped["bomb.docx"].startswith("unpacks to 600 MB, over the 512 MB limit (a ZIP bomb")
    assert len(skipped) == 5


def test_a_file_that_vanishes_mid_ingest_is_a_named_skip(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_pptx(folder / "a-deck.pptx")
    write_docx(folder / "b-gone.docx")
    (folder / "c-last.txt").write_text("The last file is read too.\n", encoding="utf-8")
    log = ReadLog()
    titles = []
    for doc in iter_documents([folder], log):
        titles.append(doc.title)
        (folder / "b-gone.docx").unlink(missing_ok=True)  # gone after the folder was listed
    assert titles == ["a-deck.pptx, slide 1", "a-deck.pptx, slide 2", "c-last"]
    assert skip_reasons(log) == {"b-gone.docx": "cannot read (No such file or directory)"}


def test_every_document_keeps_its_file_hash_and_place(tmp_path):
    import hashlib

    folder = tmp_path / "docs"
    folder.mkdir()
    write_pdf(folder / "plan.pdf", ["Scope", "Budget"])
    write_xlsx(folder / "book.xlsx", ledger_rows=3)
    docs = list(iter_documents([folder], ReadLog()))
    by_title = {d.title: d for d in docs}
    page = by_title["plan.pdf, p. 2"]
    assert page.path == str((folder / "plan.pdf").resolve()) and page.location == "p. 2"
    assert page.file_hash == hashlib.sha256((folder / "plan.pdf").read_bytes()).hexdigest()
    assert page.url.endswith("plan.pdf#page=2") and page.id.endswith("plan.pdf/p2")
    assert by_title["book.xlsx, sheet Sales"].location == "sheet Sales"


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx", ".epub", ".odt"])
def test_damaged_zip_documents_are_named_skips(tmp_path, suffix):
    folder = tmp_path / "docs"
    folder.mkdir()
    with zipfile.ZipFile(folder / f"broken{suffix}", "w") as archive:
        archive.writestr("unrelated.txt", "not the parts this format needs")
    (folder / "ok.txt").write_text("Still here.\n", encoding="utf-8")
    docs, skipped = read(folder)
    assert list(docs) == ["ok"]
    assert list(skipped) == [f"broken{suffix}"] and skipped[f"broken{suffix}"]


def test_a_2000_page_pdf_is_read_page_by_page(tmp_path):
    """Pages are yielded as they are read (the caller batches them), each cited by its page."""
    folder = tmp_path / "manuals"
    folder.mkdir()
    write_pdf(folder / "manual.pdf", [f"Valve {i} opens at {i % 90} degrees" for i in range(1, 2001)])
    pages = iter_documents([folder], ReadLog())
    first = next(pages)
    assert first.title == "manual.pdf, p. 1" and first.text == "Valve 1 opens at 1 degrees"
    rest = [(d.title, d.url.rsplit("#", 1)[1]) for d in pages]
    assert len(rest) == 1999 and rest[-1] == ("manual.pdf, p. 2000", "page=2000")


def test_a_file_given_twice_is_read_once(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_pptx(folder / "deck.pptx")
    log = ReadLog()
    docs = list(iter_documents([folder, folder / "deck.pptx"], log))
    assert [d.title for d in docs] == ["deck.pptx, slide 1", "deck.pptx, slide 2"]
    assert skip_reasons(log) == {"deck.pptx": "given more than once (read once)"} and log.files == 1


def test_a_one_column_sheet_labels_each_row(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "names.csv").write_text("Name\nAda\nGrace\n", encoding="utf-8")
    docs, skipped = read(folder)
    assert docs == {"names.csv": "Name: Ada\n\nName: Grace"} and not skipped
