"""End to end over a folder of documents with the real test model: the report cites a PDF page
as ``file, p. LABEL`` with a link that opens the file at that page, and each of its quotes is
verbatim in the text of that very page (read back from the PDF itself)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from conftest import loopback_overrides, make_settings
from test_research_e2e import check_report
from test_sources_documents import write_docx
from test_sources_pdf import write_pdf

pytestmark = pytest.mark.slow

PAGES = [
    "Annual report of the Varn Valley Water Board",
    "The Kestrel Dam on the Varn River was completed in 1962 and holds 48 million cubic metres.",
    "The board employs 212 engineers and operates four treatment works.",
]


def test_research_over_documents_cites_the_pdf_page(tmp_path, monkeypatch):
    from pypdf import PdfReader

    from appliance.sources.corpus import Corpus

    folder = tmp_path / "Board papers"
    folder.mkdir()
    pdf = folder / "water-board.pdf"
    write_pdf(pdf, PAGES, labels="0 << /S /r >> 1 << /S /D >>")  # p. i, p. 1, p. 2
    write_docx(folder / "review.docx")
    settings = make_settings(tmp_path / "home", **loopback_overrides(**{"search.backend": "corpus",
                                                                        "search.corpus": "board"}))
    Corpus(settings, "board").add([folder])
    monkeypatch.setenv("APPLIANCE_HOME", str(settings.home))
    out = tmp_path / "reports"
    result = CliRunner().invoke(main, ["research", "When was the Kestrel Dam completed?", "--profile", "quick",
                                       "--corpus", "board", "--backend", "corpus", "--out", str(out)])
    assert result.exit_code == 0, result.output
    md_path = Path(result.stdout.strip().splitlines()[-1])
    report = check_report(md_path, settings.home)
    markdown = md_path.read_text(encoding="utf-8")
    pages = [p.extract_text() for p in PdfReader(str(pdf)).pages]
    cited_pages = [s for s in report["sources"] if s["title"].startswith("water-board.pdf, p. ")]
    assert cited_pages, report["sources"]
    for source in cited_pages:
        index = int(re.fullmatch(r".*#page=(\d+)", source["link"]).group(1))
        assert source["link"] == f"{pdf.resolve().as_uri()}#page={index}"
        assert source["title"] == f"water-board.pdf, p. {['i', '1', '2'][index - 1]}"
        assert f"[{source['n']}] {source['title']} - <{source['link'].replace(' ', '%20')}>" in markdown
        for quote in source["quotes"]:
            assert quote in pages[index - 1], (quote, index)
