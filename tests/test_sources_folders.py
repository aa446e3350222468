"""A folder of documents in a real corpus (LanceDB, the packaged embedding model): added,
added again unchanged (not read), changed (its passages replaced, pages it lost gone), pruned;
the CLI's summary line; and a passage of a PDF page cited as ``file, p. N`` with a link that
opens the file at that page, its quote found verbatim in the stored text of that page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_settings
from fault_helpers import app_env, cli
from test_sources_documents import write_docx, write_pptx
from test_sources_pdf import write_pdf

from appliance.errors import CorpusError

REPORT_V1 = ["Foreword by the board", "Revenue grew by twelve percent in 2024", "Staff numbers fell to 340"]
REPORT_V2 = ["Foreword by the board", "Revenue grew by fifteen percent in 2024"]
LABELS = "0 << /S /r >> 1 << /S /D >>"  # p. i, then 1, 2, ...


def make_folder(root: Path) -> Path:
    folder = root / "Unterlagen 2025"
    folder.mkdir()
    write_pdf(folder / "annual-report.pdf", REPORT_V1, labels=LABELS)
    write_docx(folder / "review.docx")
    (folder / "notes.md").write_text("# Site notes\n\nThe depot roof was repaired in June.\n", encoding="utf-8")
    return folder


def test_a_changing_folder_is_added_again_by_content_hash(tmp_path):
    from appliance.sources.corpus import Corpus

    folder = make_folder(tmp_path)
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "docs"})
    corpus = Corpus(settings, "docs")
    first = corpus.add([folder])
    assert (first.files_added, first.files_updated, first.files_unchanged, first.files_removed) == (3, 0, 0, 0)
    assert first.added == 5 and not first.skipped  # three pages, the DOCX, the notes
    hit = corpus.search("how much did revenue grow", limit=3)[0]
    assert hit.title == "annual-report.pdf, p. 1" and hit.url == "corpus://docs/Unterlagen_2025/annual-report.pdf/p2"

    again = corpus.add([folder])
    assert (again.files_added, again.files_updated, again.files_unchanged) == (0, 0, 3)
    assert again.unchanged == 5 and again.documents == 0 and again.chunks_added == 0  # nothing was read

    write_pdf(folder / "annual-report.pdf", REPORT_V2, labels=LABELS)
    changed = corpus.add([folder])
    assert (changed.files_added, changed.files_updated, changed.files_unchanged) == (0, 1, 2)
    assert changed.updated == 2 and changed.added == 0
    assert "fifteen percent" in corpus.get("Unterlagen_2025/annual-report.pdf/p2").text
    with pytest.raises(CorpusError, match="no passage"):
        corpus.get("Unterlagen_2025/annual-report.pdf/p3")  # the page the file no longer has
    assert corpus.stats().documents == 4

    (folder / "review.docx").unlink()
    kept = corpus.add([folder])
    assert kept.files_removed == 0 and corpus.get("Unterlagen_2025/review.docx").title == "review.docx"
    pruned = corpus.add([folder], prune=True)
    assert pruned.files_removed == 1 and pruned.files_unchanged == 2
    with pytest.raises(CorpusError, match="no passage"):
        corpus.get("Unterlagen_2025/review.docx")
    assert corpus.stats().documents == 3
    assert all(h.title != "review.docx" for h in corpus.search("quarterly review revenue by region", limit=5))


def test_corpus_add_summary_counts_files_and_skips_with_reasons(tmp_path):
    folder = make_folder(tmp_path)
    write_pptx(folder / "deck.pptx")
    (folder / "empty.docx").write_bytes(b"")
    (folder / "drawing.dwg").write_bytes(b"AC1032")
    env = app_env(tmp_path / "home")
    first = cli(["corpus", "add", str(folder), "--name", "docs"], env)
    assert first.exit_code == 0, first.output
    line = first.stdout.strip()
    assert line.startswith("corpus docs: 5 files (4 added, 0 updated, 0 unchanged, 0 removed); 7 documents (7 added")
    assert "2 skipped (1 empty file, 1 unsupported file type)" in line
    assert "empty.docx: empty file" in first.stderr and "Traceback" not in first.stderr

    (folder / "deck.pptx").unlink()
    (folder / "notes.md").write_text("# Site notes\n\nThe depot roof was repaired in July.\n", encoding="utf-8")
    second = cli(["corpus", "add", str(folder), "--name", "docs", "--prune", "--json"], env)
    assert second.exit_code == 0, second.output
    report = json.loads(second.stdout)
    assert (report["files_added"], report["files_updated"], report["files_unchanged"], report["files_removed"]) == (0, 1, 2, 1)
    assert report["unchanged"] == 4 and report["updated"] == 1

    # Unchanged is not "nothing added": adding the same folder again succeeds.
    third = cli(["corpus", "add", str(folder), "--name", "docs"], env)
    assert third.exit_code == 0 and "(0 added, 0 updated, 3 unchanged, 0 removed)" in third.stdout


def test_a_pdf_page_is_cited_as_file_and_page_with_its_quote_verbatim(tmp_path):
    from appliance.contracts import (Importance, MergedClaim, QuoteRef, ReportData, RunStatus, SourceQuality,
                                     Verdict)
    from appliance.pipeline.anchor import find_quote
    from appliance.report import render_json, render_markdown
    from appliance.sources.corpus import Corpus, CorpusResolver

    folder = make_folder(tmp_path)
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "docs"})
    Corpus(settings, "docs").add([folder])
    hit = Corpus(settings, "docs").search("staff numbers", limit=1)[0]
    source = CorpusResolver(settings)(hit.url)
    pdf_uri = (folder / "annual-report.pdf").resolve().as_uri()
    assert source.title == "annual-report.pdf, p. 2" and source.link == f"{pdf_uri}#page=3"
    quote = "Staff numbers fell to 340"
    assert find_quote(quote, source.text) is not None  # checked against that page's text alone
    assert find_quote("Revenue grew by twelve percent", source.text) is None

    claim = MergedClaim(id="c1", text="Staff numbers fell to 340.", importance=Importance.central,
                        source_quality=SourceQuality.primary, quotes=[QuoteRef(source_url=hit.url, quote=quote)],
                        members=["c1"], node_ids=["n1"])
    data = ReportData(question="How many staff are there?", status=RunStatus.synthesis_failed, date="2025-03-04",
                      model="test", profile="quick", run_id="r1", claims={"c1": claim},
                      verdicts={"c1": Verdict(claim_id="c1", confirmed=True, refutations=0, valid_votes=0, votes=[],
                                              verbatim=True)},
                      sources={hit.url: source})
    markdown = render_markdown(data)
    assert f"[1] annual-report.pdf, p. 2 - <{pdf_uri}#page=3>" in markdown
    assert f'> "{quote}"' in markdown
    cited = render_json(data)["sources"][0]
    assert cited["title"] == "annual-report.pdf, p. 2" and cited["link"] == f"{pdf_uri}#page=3"
    assert cited["url"] == hit.url and cited["quotes"] == [quote]


def test_a_corpus_made_before_files_were_recorded_is_added_to_as_it_is(tmp_path):
    """A corpus without the path / file_hash / location columns gets them on its next add."""
    import lancedb
    import pyarrow as pa

    from appliance.config import state_dir
    from appliance.embed import get_embedder
    from appliance.sources.corpus import Corpus

    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "old"})
    embedder = get_embedder(settings)
    names = ["id", "doc_id", "chunk", "title", "text", "search_text", "source", "url", "doc_hash"]
    schema = pa.schema([pa.field(n, pa.int32() if n == "chunk" else pa.string()) for n in names]
                       + [pa.field("vector", pa.list_(pa.float32(), embedder.dim))],
                       metadata={"embed_model": embedder.name, "embed_dim": str(embedder.dim)})
    text = "Basalt columns form as thick lava cools slowly."
    row = {"id": "r1", "doc_id": "r1", "chunk": 1, "title": "Basalt", "text": text, "search_text": text,
           "source": "old.jsonl:1", "url": "", "doc_hash": "x", "vector": list(map(float, embedder.encode([text])[0]))}
    db = lancedb.connect(str(state_dir(settings, "lancedb")))
    db.create_table("corpus_old", data=pa.Table.from_pylist([row], schema=schema))
    folder = make_folder(tmp_path)
    report = Corpus(settings, "old").add([folder])
    assert report.files_added == 3 and report.added == 5
    corpus = Corpus(settings, "old")
    assert corpus.get("r1").text == text and corpus.stats().documents == 6
    assert corpus.search("how much did revenue grow", limit=1)[0].title == "annual-report.pdf, p. 1"
    assert corpus.add([folder]).files_unchanged == 3


def test_a_note_or_page_is_cited_with_a_link_to_its_file(tmp_path):
    from appliance.sources.corpus import Corpus, CorpusResolver

    folder = tmp_path / "Notizen ü"
    folder.mkdir()
    (folder / "kestrel.md").write_text("# Kestrel Dam\n\nThe Kestrel Dam was completed in 1962.\n")
    (folder / "varn.txt").write_text("The Varn River rises in the northern hills.\n")
    (folder / "board.html").write_text("<html><head><title>Water board</title></head><body><article>"
                                       "<p>The water board employs 212 engineers across the valley.</p>"
                                       "</article></body></html>")
    settings = make_settings(tmp_path / "home", **{"search.backend": "corpus", "search.corpus": "notes"})
    Corpus(settings, "notes").add([folder])
    links = {}
    for query in ("Kestrel Dam completed", "Varn River rises", "water board engineers"):
        hit = Corpus(settings, "notes").search(query, limit=1)[0]
        source = CorpusResolver(settings)(hit.url)
        links[source.title] = source.link
    assert links == {"Kestrel Dam": (folder / "kestrel.md").resolve().as_uri(),
                     "varn": (folder / "varn.txt").resolve().as_uri(),
                     "Water board": (folder / "board.html").resolve().as_uri()}
