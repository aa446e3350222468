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
    a loopback fixture site through a json_engine;
  - documents: `corpus add` of a folder of generated PDFs (F files, then 4F; real PDFs printed
    by WeasyPrint, fonts embedded, several paragraphs a page) in pages/s, against the PDF reader
    alone plus embedding alone of the very chunks it writes (goal: ingest >= 0.8x), and the peak
    RSS of each add in a process of its own (goal: flat from F to 4F files). The add writes in
    batches of --doc-batch-chunks chunks (the product's batch is larger; a small one makes the
    larger folder span several batches, which is what bounded memory is about).

Usage: .venv/bin/python scripts/bench_sources.py [--synthetic N] [--plain N] [--queries N] [--files F] [--out FILE]
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


def write_pdfs(folder: Path, first: int, count: int, pages: int, seed: int = 5) -> None:
    """``count`` PDFs of ``pages`` pages each, printed by WeasyPrint from paragraphs recombined
    from the musique-dev sentences (each file its own text, so none is a duplicate)."""
    from weasyprint import HTML

    rng = random.Random(seed + first)
    records = [json.loads(line) for line in (MUSIQUE / "corpus.jsonl").open(encoding="utf-8")]
    sentences = [s for r in records for s in re.split(r"(?<=[.!?])\s+", r["text"]) if len(s) > 30]
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(first, first + count):
        body = []
        for page in range(pages):
            paragraphs = ["<p>" + " ".join(rng.sample(sentences, 4)) + "</p>" for _ in range(4)]
            body.append(f"<section><h2>Report {number}, part {page + 1}</h2>{''.join(paragraphs)}</section>")
        html = ("<html><head><style>section { page-break-after: always; } body { font: 11pt serif; }"
                "</style></head><body>" + "".join(body) + "</body></html>")
        HTML(string=html).write_pdf(folder / f"report-{number:04d}.pdf")


def documents_child(mode: str, folder: str, home: str, batch_chunks: int) -> dict:
    """One measurement in this (fresh) process: ``ingest`` (corpus add) or ``reader`` (the
    reader, then embedding of the chunks the add would write); seconds after the embedder is
    loaded, and the peak RSS."""
    import resource

    import appliance.sources.corpus as corpus_module
    from appliance.embed import get_embedder
    from appliance.sources.corpus import Corpus
    from appliance.sources.ingest import ReadLog, iter_documents

    settings = settings_for(Path(home))
    embedder = get_embedder(settings)
    embedder.encode(["warm up"])
    loaded_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out: dict = {"rss_after_load_mb": round(loaded_rss / 1024, 1)}
    if mode == "ingest":
        corpus_module._BATCH_CHUNKS = batch_chunks
        started = time.perf_counter()
        report = Corpus(settings, "documents").add([folder])
        out.update(seconds=time.perf_counter() - started, pages=report.documents, chunks=report.chunks_added,
                   skipped=len(report.skipped))
    else:
        started = time.perf_counter()
        docs = list(iter_documents([folder], ReadLog()))
        read_s = time.perf_counter() - started
        texts = Corpus(settings, "unused")._rows(docs)[corpus_module._FTS_COLUMN]
        started = time.perf_counter()
        Corpus._embed(texts, embedder, 0, None)
        out.update(read_seconds=read_s, embed_seconds=time.perf_counter() - started, pages=len(docs),
                   chunks=len(texts))
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _child(args: list[str]) -> dict:
    import subprocess

    done = subprocess.run([sys.executable, __file__, "--documents-child", *args], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: documents measurement {args[0]} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_documents(work: Path, files: int, pages: int, batch_chunks: int) -> dict:
    small, large = work / "docs-f", work / "docs-4f"
    started = time.perf_counter()
    write_pdfs(small, 0, files, pages)
    write_pdfs(large, 0, 4 * files, pages)
    print(f"wrote {5 * files} PDFs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    results: dict = {"files": files, "pages_per_file": pages, "batch_chunks": batch_chunks}
    for label, folder in (("f", small), ("4f", large)):
        reader = _child(["reader", str(folder), str(work / f"home-reader-{label}"), str(batch_chunks)])
        ingest = _child(["ingest", str(folder), str(work / f"home-ingest-{label}"), str(batch_chunks)])
        alone = reader["read_seconds"] + reader["embed_seconds"]
        results[label] = {
            "pages": ingest["pages"], "chunks": ingest["chunks"], "skipped": ingest["skipped"],
            "ingest_pages_per_s": round(ingest["pages"] / ingest["seconds"], 1),
            "reader_pages_per_s": round(reader["pages"] / reader["read_seconds"], 1),
            "reader_plus_embed_pages_per_s": round(reader["pages"] / alone, 1),
            "ingest_vs_reader_plus_embed": round((ingest["pages"] / ingest["seconds"]) / (reader["pages"] / alone), 3),
            "ingest_peak_rss_mb": ingest["peak_rss_mb"], "rss_after_load_mb": ingest["rss_after_load_mb"],
            "reader_peak_rss_mb": reader["peak_rss_mb"]}
        print(f"documents {label}: {results[label]}", file=sys.stderr)
    results["peak_rss_4f_over_f"] = round(results["4f"]["ingest_peak_rss_mb"] / results["f"]["ingest_peak_rss_mb"], 3)
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
    if "documents" in results:
        d = results["documents"]
        for label, count in (("f", d["files"]), ("4f", 4 * d["files"])):
            r = d[label]
            head = f"documents, {count} PDFs ({r['pages']} pages)"
            for name, value in ((f"{head}: ingest", f"{r['ingest_pages_per_s']} pages/s"),
                                ("  reader alone / reader + embedding alone",
                                 f"{r['reader_pages_per_s']} / {r['reader_plus_embed_pages_per_s']}"),
                                ("  ingest / (reader + embedding) (goal >= 0.8)", f"{r['ingest_vs_reader_plus_embed']}"),
                                ("  peak RSS of the add (after model load)",
                                 f"{r['ingest_peak_rss_mb']} ({r['rss_after_load_mb']}) MB")):
                print(f"{name:<52}{value:>22}")
        print(f"{'documents: peak RSS 4F / F (goal flat, ~1.0)':<52}{d['peak_rss_4f_over_f']:>22}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=100000, help="passages in the synthetic corpus")
    parser.add_argument("--plain", type=int, default=10000,
                        help="synthetic passages encoded plainly for the ratio (half before, half after the ingest; 0: all)")
    parser.add_argument("--queries", type=int, default=100, help="queries timed per corpus and for SearXNG")
    parser.add_argument("--parts", default="corpus,searxng,documents",
                        help="comma-separated: corpus, searxng, documents")
    parser.add_argument("--files", type=int, default=20, help="PDFs in the smaller documents folder (F; the larger has 4F)")
    parser.add_argument("--pages", type=int, default=8, help="pages per generated PDF")
    parser.add_argument("--doc-batch-chunks", type=int, default=256,
                        help="chunks per written batch in the documents adds")
    parser.add_argument("--documents-child", nargs=4, metavar=("MODE", "FOLDER", "HOME", "BATCH"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "bench-out" / "sources.json"), help="JSON results file")
    args = parser.parse_args()
    if args.documents_child:
        mode, folder, home, batch = args.documents_child
        print(json.dumps(documents_child(mode, folder, home, int(batch))))
        return 0
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
        if "documents" in parts:
            results["documents"] = bench_documents(work, args.files, args.pages, args.doc_batch_chunks)
    results["machine"]["load_avg_end"] = os.getloadavg()

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print_table(results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
