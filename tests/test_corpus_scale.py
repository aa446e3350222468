"""Corpus ingest at scale: length-sorted embedding keeps each vector with its own passage, one
write per batch, indexes built once per add, and the ANN index above corpus.ann_min_rows."""

from __future__ import annotations

import json

import numpy as np

from appliance.sources import corpus as corpus_module
from appliance.sources.corpus import Corpus
from conftest import MUSIQUE_CORPUS, loopback_overrides, make_settings


def _records(count: int, start: int = 0) -> list[dict]:
    lines = MUSIQUE_CORPUS.read_text(encoding="utf-8").splitlines()[start:start + count]
    return [json.loads(line) for line in lines]


def _write(path, records) -> None:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")


def test_vectors_stay_with_their_passages_and_writes_are_batched(tmp_path, monkeypatch):
    from appliance.embed import get_embedder

    # Small batches and slices, so this corpus spans several of each, of mixed lengths.
    monkeypatch.setattr(corpus_module, "_BATCH_CHUNKS", 50)
    monkeypatch.setattr(corpus_module, "_EMBED_SLICE", 16)
    settings = make_settings(tmp_path / "home", **loopback_overrides(**{"corpus.ann_min_rows": 0}))
    records = _records(120)
    _write(tmp_path / "p.jsonl", records)
    corpus = Corpus(settings, "scale")
    report = corpus.add([tmp_path / "p.jsonl"])
    assert report.added == 120 and report.chunks_added == 120

    table = corpus._open()
    rows = table.search().select(["id", "search_text", "vector"]).limit(None).to_list()
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in records)
    embedder = get_embedder(settings)
    picked = rows[::17]
    fresh = embedder.encode([r["search_text"] for r in picked])
    for row, vector in zip(picked, fresh):
        assert float(np.dot(np.asarray(row["vector"], dtype=np.float32), vector)) > 0.999, row["id"]
    # One fragment per write: 120 chunks in batches of 50 are three writes, not 120.
    assert table.stats()["fragment_stats"]["num_fragments"] == 3
    assert not any("vector" in idx.columns for idx in table.list_indices())  # ann_min_rows 0: never
    # Each passage is found by its own text.
    for record in records[::30]:
        assert corpus.search(record["text"], 3)[0].url == f"corpus://scale/{record['id']}"


def test_ann_index_above_the_threshold_and_kept_up_to_date(tmp_path):
    settings = make_settings(tmp_path / "home", **loopback_overrides(**{"corpus.ann_min_rows": 300}))
    corpus = Corpus(settings, "ann")
    _write(tmp_path / "a.jsonl", _records(200))
    corpus.add([tmp_path / "a.jsonl"])
    table = corpus._open()
    assert not any("vector" in idx.columns for idx in table.list_indices()), "below the threshold: exact scan"

    _write(tmp_path / "b.jsonl", _records(200, start=200))
    corpus.add([tmp_path / "b.jsonl"])
    table = corpus._open()
    indexes = {idx.name: idx for idx in table.list_indices()}
    vector_index = [name for name, idx in indexes.items() if "vector" in idx.columns]
    assert vector_index, "the add that crossed the threshold built the ANN index"
    assert table.index_stats(vector_index[0]).num_unindexed_rows == 0

    _write(tmp_path / "c.jsonl", _records(50, start=400))
    corpus.add([tmp_path / "c.jsonl"])
    table = corpus._open()
    assert table.index_stats(vector_index[0]).num_unindexed_rows == 0, "a later add indexes its rows"
    stats = corpus.stats()
    assert stats.chunks == 450 and stats.unindexed_rows == 0
    fresh = Corpus(settings, "ann")  # a new process's view: the ANN path answers
    for record in _records(450)[::45]:
        assert fresh.search(record["text"], 3)[0].url == f"corpus://ann/{record['id']}"


def test_the_embedder_embeds_a_text_of_a_recent_call_once(tmp_path):
    """A run embeds a page's sentences for the page gate and again to pick its nearest one:
    the second call reuses the vectors (the model is not called for them) and they are the
    ones a fresh call gives. Large calls (corpus batches) are not remembered."""
    from appliance import embed
    from appliance.embed import get_embedder

    embedder = get_embedder(make_settings(tmp_path / "home", **loopback_overrides()))
    texts = ["Port Ardmore lies in Velka province.", "Its mayor is Ida Brandt.", "The town has two ferries."]
    first = embedder.encode(texts)
    calls: list[list[str]] = []
    model_encode = embedder._encode
    embedder._encode = lambda batch: calls.append(list(batch)) or model_encode(batch)
    try:
        again = embedder.encode(["Who is the mayor of Port Ardmore?", *texts[::-1], texts[0]])
        assert calls == [["Who is the mayor of Port Ardmore?"]]
        assert np.allclose(again[1:4], first[::-1], atol=1e-6) and np.allclose(again[4], first[0], atol=1e-6)
        assert again.shape == (5, embedder.dim) and again.dtype == np.float32
        big = [f"Sentence {i} of a corpus batch." for i in range(embed._REMEMBER_CALL + 1)]
        embedder.encode(big)
        assert big[0] not in embedder._memory and len(calls) == 2
    finally:
        del embedder._encode
