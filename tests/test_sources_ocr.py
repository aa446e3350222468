"""Scanned PDF pages: real PDFs whose pages are pictures of text (made here with Pillow, as a
scanner makes them), read by the real tesseract where it is installed (`.ci/run` installs
Debian's tesseract-ocr) and cited as OCR text; without it, a counted and named skip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import make_settings
from test_sources_pdf import write_pdf

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None,
                                     reason="tesseract is not installed (apt install tesseract-ocr)")

SCANNED = ["The Orlen Bridge was opened in 1931", "Its main span is 210 metres long"]


def scan_pages(lines: list[str]) -> list:
    """One greyscale page picture per line, about 150 dpi, the line printed large and dark."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=44)
    pages = []
    for line in lines:
        page = Image.new("L", (1275, 1650), 255)
        ImageDraw.Draw(page).text((90, 160), line, fill=0, font=font)
        pages.append(page)
    return pages


def write_scan(path: Path, lines: list[str]) -> None:
    first, *rest = scan_pages(lines)
    first.save(path, "PDF", resolution=150.0, save_all=True, append_images=rest)


def write_mixed(path: Path, tmp: Path) -> None:
    """Page 1 with a text layer, page 2 a scan, page 3 blank (no text, no picture)."""
    from pypdf import PdfReader, PdfWriter

    write_pdf(tmp / "typed.pdf", ["Minutes of the bridge committee"])
    write_scan(tmp / "scanned.pdf", SCANNED[:1])
    writer = PdfWriter()
    writer.add_page(PdfReader(str(tmp / "typed.pdf")).pages[0])
    writer.add_page(PdfReader(str(tmp / "scanned.pdf")).pages[0])
    writer.add_blank_page(612, 792)
    with path.open("wb") as handle:
        writer.write(handle)


def _read(paths, monkeypatch=None, without_ocr: bool = False):
    from appliance.sources import ocr
    from appliance.sources.ingest import ReadLog, iter_documents

    log = ReadLog()
    if without_ocr:
        assert monkeypatch is not None
        monkeypatch.setattr(ocr.shutil, "which", lambda name: None)
    docs = list(iter_documents(paths, log))
    return docs, log


def test_scanned_pages_without_ocr_are_a_named_skip_and_the_rest_is_read(tmp_path, monkeypatch):
    folder = tmp_path / "scans"
    folder.mkdir()
    write_scan(folder / "scan.pdf", SCANNED)
    write_mixed(folder / "mixed.pdf", tmp_path)
    docs, log = _read([folder], monkeypatch, without_ocr=True)
    assert [d.title for d in docs] == ["mixed.pdf, p. 1"]  # the typed page; the blank one holds nothing
    reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in log.skipped}
    assert reasons == {
        "mixed.pdf": "no text layer (1 scanned page: p. 2; install tesseract-ocr to read scans by OCR, "
                     "then add the file again)",
        "scan.pdf": "no text layer (a scanned PDF; install tesseract-ocr to read scans by OCR, then add the file again)",
    }


def test_ocr_switched_off_in_the_settings_skips_scans_naming_the_setting(tmp_path):
    from appliance.sources.corpus import Corpus

    folder = tmp_path / "scans"
    folder.mkdir()
    write_scan(folder / "scan.pdf", SCANNED)
    (folder / "notes.md").write_text("# Notes\n\nThe bridge committee met twice.\n")
    settings = make_settings(tmp_path / "home", **{"corpus.ocr": False})
    report = Corpus(settings, "scans").add([folder])
    assert report.files_added == 1
    assert [s.split(": ", 1)[1] for s in report.skipped] == [
        "no text layer (a scanned PDF; OCR is off: set [corpus] ocr = true to read scans)"]


@needs_tesseract
def test_a_scanned_page_is_read_by_ocr_and_cited_as_ocr_on_its_page(tmp_path):
    from appliance.pipeline.anchor import find_quote
    from appliance.sources.corpus import Corpus, CorpusResolver

    folder = tmp_path / "Brücken Archiv"  # spaces and non-ASCII in the path
    folder.mkdir()
    write_scan(folder / "scan.pdf", SCANNED)
    write_mixed(folder / "mixed.pdf", tmp_path)
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "scans"})
    corpus = Corpus(settings, "scans")
    report = corpus.add([folder])
    assert report.skipped == [] and report.files_added == 2
    hits = {h.title: h for h in corpus.search("main span metres long", limit=3)}
    assert "scan.pdf, p. 2 (OCR)" in hits, list(hits)
    hit = hits["scan.pdf, p. 2 (OCR)"]
    source = CorpusResolver(settings)(hit.url)
    assert source.link == f"{(folder / 'scan.pdf').resolve().as_uri()}#page=2"
    # The quote check runs against the text OCR read on that page, and that page alone.
    assert find_quote("main span is 210 metres long", source.text) is not None
    assert find_quote("opened in 1931", source.text) is None
    mixed = corpus.search("when was the Orlen Bridge opened", limit=3)
    assert {"mixed.pdf, p. 2 (OCR)", "scan.pdf, p. 1 (OCR)"} <= {h.title for h in mixed}
    titles = {h.title for h in corpus.search("bridge committee minutes", limit=10)}
    assert "mixed.pdf, p. 1" in titles and not any("p. 3" in t for t in titles)


@needs_tesseract
def test_a_scan_attached_to_an_email_is_read_by_ocr(tmp_path, monkeypatch):
    from email.message import EmailMessage

    from appliance.sources import ocr

    from appliance.sources.ingest import ReadLog, iter_documents

    write_scan(tmp_path / "letter.pdf", SCANNED[1:])
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "a@example.org", "b@example.org", "Bridge survey"
    message.set_content("The survey is attached.")
    message.add_attachment((tmp_path / "letter.pdf").read_bytes(), maintype="application", subtype="pdf",
                           filename="letter.pdf")
    (tmp_path / "mail").mkdir()
    (tmp_path / "mail" / "survey.eml").write_bytes(bytes(message))
    log = ReadLog()
    docs = list(iter_documents([tmp_path / "mail"], log))
    assert log.skipped == []
    scanned = [d for d in docs if "(OCR)" in d.location]
    assert len(scanned) == 1 and "210 metres" in scanned[0].text
    assert scanned[0].title == "letter.pdf, p. 1 (OCR) (attached to Bridge survey)"
    # Without OCR the message waits for it, as a scanned PDF of its own would.
    monkeypatch.setattr(ocr.shutil, "which", lambda name: None)
    without = ReadLog()
    list(iter_documents([tmp_path / "mail"], without))
    assert without.ocr_pending == {str((tmp_path / "mail" / "survey.eml").resolve())}


def test_ocr_failures_are_named_per_page(tmp_path, monkeypatch):
    from appliance.sources import ocr

    write_scan(tmp_path / "scan.pdf", SCANNED)
    monkeypatch.setattr(ocr.shutil, "which", lambda name: "/usr/bin/tesseract")

    def broken(exe, image):
        raise ocr.OcrFailed("tesseract failed (Error opening data file eng.traineddata)")

    monkeypatch.setattr(ocr, "read_image", broken)
    docs, log = _read([tmp_path / "scan.pdf"])
    assert docs == []
    assert [line.split(": ", 1)[1] for line in log.skipped] == [
        "2 scanned pages not read (p. 1, p. 2: tesseract failed (Error opening data file eng.traineddata))"]


def test_a_scanned_page_whose_image_cannot_be_decoded_is_named(tmp_path, monkeypatch):
    """A page without text whose picture's data is damaged: with OCR available it is one named
    skip for the file ("its images cannot be decoded"), the typed page is still read."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject, NumberObject

    from appliance.sources import ocr

    write_pdf(tmp_path / "typed.pdf", ["Minutes of the bridge committee"])
    write_scan(tmp_path / "scanned.pdf", SCANNED[:1])
    writer = PdfWriter()
    writer.add_page(PdfReader(str(tmp_path / "typed.pdf")).pages[0])
    scan = writer.add_page(PdfReader(str(tmp_path / "scanned.pdf")).pages[0])
    for ref in scan["/Resources"]["/XObject"].values():
        image = ref.get_object()
        image._data = b"not an image at all"  # the stream's raw bytes, still marked as a JPEG
        image[NameObject("/Filter")] = NameObject("/DCTDecode")
        image[NameObject("/Length")] = NumberObject(len(image._data))
    folder = tmp_path / "minutes"
    folder.mkdir()
    with (folder / "minutes.pdf").open("wb") as handle:
        writer.write(handle)
    monkeypatch.setattr(ocr.shutil, "which", lambda name: "/usr/bin/tesseract")
    monkeypatch.setattr(ocr, "read_image", lambda exe, image: pytest.fail("no image to read"))
    docs, log = _read([folder])
    assert [d.title for d in docs] == ["minutes.pdf, p. 1"]
    reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in log.skipped}
    assert reasons == {"minutes.pdf": "1 scanned page not read (p. 2: its images cannot be decoded)"}


def test_doctor_says_whether_ocr_can_read_the_configured_languages(tmp_path, monkeypatch):
    from appliance.cli.doctor import check_ocr
    from appliance.sources import ocr

    if shutil.which("tesseract") is not None:
        found = check_ocr(make_settings(tmp_path / "a", **{"corpus.ocr_languages": "eng"}))
        assert found.ok and "languages" in found.detail and "eng" in found.detail
        absent = check_ocr(make_settings(tmp_path / "b", **{"corpus.ocr_languages": "eng+zzz"}))
        assert not absent.ok and "tesseract-ocr-zzz" in absent.detail
    monkeypatch.setattr(ocr.shutil, "which", lambda name: None)
    missing = check_ocr(make_settings(tmp_path / "c"))
    assert not missing.ok and "tesseract-ocr" in missing.detail and not missing.required


@needs_tesseract
def test_a_partly_scanned_pdf_added_without_ocr_is_read_again_once_ocr_is_on(tmp_path, monkeypatch):
    """Its typed page is added and its scan named; adding again without OCR changes nothing;
    once OCR is on the file is read again (its scan now searchable, cited as OCR), and after
    that it is unchanged."""
    from appliance.sources import ocr
    from appliance.sources.corpus import Corpus

    folder = tmp_path / "minutes"
    folder.mkdir()
    write_mixed(folder / "mixed.pdf", tmp_path)
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "minutes"})
    corpus = Corpus(settings, "minutes")
    with monkeypatch.context() as without:
        without.setattr(ocr.shutil, "which", lambda name: None)
        first = corpus.add([folder])
        assert (first.files_added, first.chunks_added) == (1, 1)
        assert any("no text layer (1 scanned page: p. 2" in line for line in first.skipped)
        again = corpus.add([folder])
        assert (again.files_unchanged, again.files_updated, again.chunks_added) == (1, 0, 0)
    with_ocr = corpus.add([folder])
    assert (with_ocr.files_updated, with_ocr.chunks_added) == (1, 2) and not with_ocr.skipped
    hits = corpus.search("When was the Orlen Bridge opened?", limit=3)
    assert hits[0].title == "mixed.pdf, p. 2 (OCR)"
    last = corpus.add([folder])
    assert (last.files_unchanged, last.files_updated, last.chunks_added) == (1, 0, 0)
