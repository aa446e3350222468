"""Benchmark of the sources stage, all on this machine (nothing leaves loopback).

Measures:
  - corpus ingest rate (passages/s, embedding and indexes included) for the musique-dev
    corpus (1,890 passages) and for a synthetic corpus (100,000 passages by default), and
    plain SentenceTransformer.encode on passages of that same synthetic corpus in the same
    process (a uniform sample; --plain), so the ratio shows what ingest costs beyond embedding;
  - hybrid query latency (p50/p95) at both sizes, over the musique-dev questions, and
    supporting-passage recall@10 on musique-dev; at the synthetic size also how many of the
    exact top-10 vector results the ANN index finds (when it has one);
  - SearXNG round trip (p50/p95): a real SearXNG started like the test fixture, searching
    a loopback fixture site through a json_engine.

Usage: .venv/bin/python scripts/bench_sources.py [--synthetic N] [--plain N] [--queries N] [--out FILE]
Results go to stdout (a table) and to bench-out/sources.json. The synthetic corpus is
generated in a temporary folder (never committed) and removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MUSIQUE = REPO.parent / "shared" / "bench" / "musique-dev"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def settings_for(home: Path):
    from appliance.config import load_settings

    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty.toml"
    empty.write_text("", encoding="utf-8")
    return load_settings(empty, env={"APPLIANCE_HOME": str(home)},
                         overrides={"search.backend": "corpus", "fetch.allow_hosts": ["127.0.0.1"]})


def synthetic_corpus(path: Path, count: int, seed: int = 7) -> None:
    """Passages shaped like musique-dev's (3-6 sentences of encyclopedic text), recombined from
    its sentences so that the vocabulary and lengths are realistic, and all distinct."""
    rng = random.Random(seed)
    records = [json.loads(line) for line in (MUSIQUE / "corpus.jsonl").open(encoding="utf-8")]
    sentences = [s for r in records for s in re.split(r"(?<=[.!?])\s+", r["text"]) if len(s) > 30]
    titles = [r["title"] for r in records]
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            text = " ".join(rng.sample(sentences, rng.randint(3, 6)))
            out.write(json.dumps({"id": f"s{i:06d}", "title": f"{rng.choice(titles)} ({i})", "text": text}) + "\n")


def ingest(settings, name: str, path: Path) -> dict:
    from appliance.sources.corpus import Corpus

    marks: dict[str, float] = {}

    def progress(line: str) -> None:
        if line.startswith("updating the indexes"):
            marks["index_start"] = time.perf_counter()

    started = time.perf_counter()
    report = Corpus(settings, name).add([path], progress=progress)
    seconds = time.perf_counter() - started
    index_s = time.perf_counter() - marks["index_start"] if "index_start" in marks else 0.0
    return {"passages": report.documents, "chunks": report.chunks_added, "seconds": round(seconds, 1),
            "index_seconds": round(index_s, 1), "passages_per_s": round(report.documents / seconds, 1)}


def plain_encode(settings, path: Path, sample: int, seed: int = 11) -> dict:
    """SentenceTransformer.encode with its defaults on the very strings the corpus embeds
    (title, blank line, text), for a uniform sample of the corpus's passages."""
    from appliance.embed import get_embedder

    records = [json.loads(line) for line in path.open(encoding="utf-8")]
    if 0 < sample < len(records):
        records = random.Random(seed).sample(records, sample)
    texts = [f"{r['title']}\n\n{r['text']}" if r.get("title") else r["text"] for r in records]
    model = get_embedder(settings)._model
    started = time.perf_counter()
    model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    seconds = time.perf_counter() - started
    return {"passages": len(texts), "seconds": round(seconds, 1), "passages_per_s": round(len(texts) / seconds, 1)}


def ann_check(settings, name: str, questions: list[dict]) -> dict:
    """Exact top-10 vector results against the ANN index's, and both latencies (vector only)."""
    from appliance.embed import get_embedder
    from appliance.sources.corpus import Corpus

    corpus = Corpus(settings, name)
    table = corpus._open()
    if not any("vector" in idx.columns for idx in table.list_indices()):
        return {"ann_index": False}
    embedder = get_embedder(settings)
    found, exact_t, ann_t = 0, [], []
    for q in questions[:100]:
        vector = embedder.encode([q["question"]])[0]
        t0 = time.perf_counter()
        exact = table.search(vector).distance_type("cosine").bypass_vector_index().limit(10).select(["id"]).to_list()
        t1 = time.perf_counter()
        ann = corpus._nearest(table, vector, 10)
        t2 = time.perf_counter()
        exact_t.append(t1 - t0)
        ann_t.append(t2 - t1)
        found += len({r["id"] for r in exact} & {r["id"] for r in ann})
    n = min(100, len(questions))
    return {"ann_index": True, "ann_recall_at_10_vs_exact": round(found / (10 * n), 3),
            "exact_vector_p50_ms": round(1000 * percentile(exact_t, 0.5), 1),
            "exact_vector_p95_ms": round(1000 * percentile(exact_t, 0.95), 1),
            "ann_vector_p50_ms": round(1000 * percentile(ann_t, 0.5), 1),
            "ann_vector_p95_ms": round(1000 * percentile(ann_t, 0.95), 1)}


def query_latency(settings, name: str, questions: list[dict], rounds: int) -> dict:
    from appliance.sources.corpus import Corpus

    corpus = Corpus(settings, name)
    corpus.search("warm up", 10)
    times, found, wanted = [], 0, 0
    for i in range(rounds):
        q = questions[i % len(questions)]
        started = time.perf_counter()
        hits = corpus.search(q["question"], 10)
        times.append(time.perf_counter() - started)
        if i < len(questions):
            ids = {h.url.rsplit("/", 1)[-1].split("#")[0] for h in hits}
            found += len(ids & set(q["supporting_ids"]))
            wanted += len(q["supporting_ids"])
    return {"queries": rounds, "p50_ms": round(1000 * percentile(times, 0.5), 1),
            "p95_ms": round(1000 * percentile(times, 0.95), 1),
            "recall_at_10": round(found / wanted, 3) if wanted else None}


def searxng_round_trip(workdir: Path, rounds: int) -> dict:
    import sources_harness
    from appliance.sources.searxng import SearxngBackend

    site = sources_harness.FixtureSite().start()
    started = time.perf_counter()
    process = sources_harness.start_searxng(workdir / "searxng", site.url)
    ready = time.perf_counter() - started
    try:
        backend = SearxngBackend(process.url, timeout=10)
        backend.search("warm up lake", 5)
        words = ["lake vostok", "basalt columns", "honeybee waggle dance", "antarctic ice", "lava cooling"]
        times = []
        for i in range(rounds):
            t0 = time.perf_counter()
            backend.search(f"{words[i % len(words)]} {i}", 5)
            times.append(time.perf_counter() - t0)
    finally:
        process.stop()
        site.stop()
    return {"startup_s": round(ready, 1), "queries": rounds, "p50_ms": round(1000 * percentile(times, 0.5), 1),
            "p95_ms": round(1000 * percentile(times, 0.95), 1)}


def bench_corpus(work: Path, questions: list[dict], synthetic_count: int, queries: int, plain: int) -> dict:
    from appliance.embed import get_embedder

    results: dict = {}
    settings = settings_for(work / "home")
    t0 = time.perf_counter()
    get_embedder(settings)
    results["embedder_load_s"] = round(time.perf_counter() - t0, 1)
    print(f"embedder loaded in {results['embedder_load_s']} s", file=sys.stderr)
    results["musique_ingest"] = ingest(settings, "musique", MUSIQUE / "corpus.jsonl")
    print(f"musique ingest: {results['musique_ingest']}", file=sys.stderr)
    results["musique_query"] = query_latency(settings, "musique", questions, queries)
    print(f"musique query: {results['musique_query']}", file=sys.stderr)
    synthetic = work / "synthetic.jsonl"
    synthetic_corpus(synthetic, synthetic_count)
    # Plain encoding before and after the ingest, averaged: the machine's speed drifts (other
    # processes, heat) over an hour-long ingest, and a ratio of two moments would show it.
    half = max(1, plain // 2) if plain else 0  # 0: every passage, before the ingest only
    before = plain_encode(settings, synthetic, half, seed=11)
    print(f"plain encode (before): {before}", file=sys.stderr)
    results["synthetic_ingest"] = ingest(settings, "synthetic", synthetic)
    print(f"synthetic ingest: {results['synthetic_ingest']}", file=sys.stderr)
    after = plain_encode(settings, synthetic, half, seed=12) if plain else {"passages": 0, "seconds": 0.0}
    print(f"plain encode (after): {after}", file=sys.stderr)
    total = before["passages"] + after["passages"]
    plain_rate = total / (before["seconds"] + after["seconds"])
    results["plain_encode"] = {"passages": total, "passages_per_s": round(plain_rate, 1),
                               "before": before, "after": after}
    results["ingest_vs_plain"] = round(results["synthetic_ingest"]["passages_per_s"] / plain_rate, 3)
    results["synthetic_query"] = query_latency(settings, "synthetic", questions, queries)
    results["synthetic_query"]["recall_at_10"] = None  # the questions are not about it
    print(f"synthetic query: {results['synthetic_query']}", file=sys.stderr)
    results["synthetic_ann"] = ann_check(settings, "synthetic", questions)
    print(f"synthetic ANN: {results['synthetic_ann']}", file=sys.stderr)
    return results


def print_table(results: dict) -> None:
    print(f"{'measure':<52}{'value':>22}")
    if "musique_ingest" in results:
        mi, mq, si, sq = (results[k] for k in ("musique_ingest", "musique_query", "synthetic_ingest",
                                               "synthetic_query"))
        pe, ann = results["plain_encode"], results.get("synthetic_ann", {})
        n = f"{si['passages']:,}"
        rows = [
            ("ingest musique-dev (1,890 passages)", f"{mi['passages_per_s']} p/s"),
            (f"ingest synthetic ({n} passages)", f"{si['passages_per_s']} p/s"),
            (f"  of which indexes, seconds", f"{si['index_seconds']} s"),
            (f"plain encode, {pe['passages']:,} of those passages", f"{pe['passages_per_s']} p/s"),
            ("ingest / plain encode (goal >= 0.8)", f"{results['ingest_vs_plain']}"),
            ("hybrid query p50 / p95, musique-dev", f"{mq['p50_ms']} / {mq['p95_ms']} ms"),
            (f"hybrid query p50 / p95, synthetic {n} (goal p95 <= 50)", f"{sq['p50_ms']} / {sq['p95_ms']} ms"),
            ("recall@10 of supporting passages, musique (>= 0.717)", f"{mq['recall_at_10']}"),
        ]
        if ann.get("ann_index"):
            rows += [("ANN: exact top-10 vector results found", f"{ann['ann_recall_at_10_vs_exact']}"),
                     ("vector only p95, exact scan / ANN", f"{ann['exact_vector_p95_ms']} / {ann['ann_vector_p95_ms']} ms")]
        for label, value in rows:
            print(f"{label:<52}{value:>22}")
    if "searxng" in results:
        sx = results["searxng"]
        print(f"{'SearXNG round trip p50 / p95':<52}{str(sx['p50_ms']) + ' / ' + str(sx['p95_ms']) + ' ms':>22}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=100000, help="passages in the synthetic corpus")
    parser.add_argument("--plain", type=int, default=10000,
                        help="synthetic passages encoded plainly for the ratio (half before, half after the ingest; 0: all)")
    parser.add_argument("--queries", type=int, default=100, help="queries timed per corpus and for SearXNG")
    parser.add_argument("--parts", default="corpus,searxng", help="comma-separated: corpus, searxng")
    parser.add_argument("--out", default=str(REPO / "bench-out" / "sources.json"), help="JSON results file")
    args = parser.parse_args()
    if not (MUSIQUE / "questions.jsonl").is_file():
        sys.exit(f"error: no bench at {MUSIQUE} (questions.jsonl, corpus.jsonl): put the team's musique-dev folder there")

    questions = [json.loads(line) for line in (MUSIQUE / "questions.jsonl").open(encoding="utf-8")]
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_avg_start": os.getloadavg()}}
    parts = {p.strip() for p in args.parts.split(",")}
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as tmp:
        work = Path(tmp)
        if "corpus" in parts:
            results.update(bench_corpus(work, questions, args.synthetic, args.queries, args.plain))
        if "searxng" in parts:
            results["searxng"] = searxng_round_trip(work, args.queries)
            print(f"searxng: {results['searxng']}", file=sys.stderr)
    results["machine"]["load_avg_end"] = os.getloadavg()

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print_table(results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
