"""Benchmark of the sources stage, all on this machine (nothing leaves loopback).

Measures:
  - corpus ingest rate (passages/s, embedding included) for the musique-dev corpus
    (1,890 passages) and for a synthetic corpus (20,000 passages by default);
  - hybrid query latency (p50/p95) at both sizes, over the musique-dev questions,
    and, as a quality check, supporting-passage recall@10 on musique-dev;
  - SearXNG round trip (p50/p95): a real SearXNG started like the test fixture, searching
    a loopback fixture site through a json_engine.

Usage: .venv/bin/python scripts/bench_sources.py [--synthetic N] [--queries N] [--out FILE]
Results go to stdout (a table) and to bench-out/sources.json.
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

    started = time.perf_counter()
    report = Corpus(settings, name).add([path])
    seconds = time.perf_counter() - started
    return {"passages": report.documents, "chunks": report.chunks_added, "seconds": round(seconds, 1),
            "passages_per_s": round(report.documents / seconds, 1)}


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


def bench_corpus(work: Path, questions: list[dict], synthetic_count: int, queries: int) -> dict:
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
    results["synthetic_ingest"] = ingest(settings, "synthetic", synthetic)
    print(f"synthetic ingest: {results['synthetic_ingest']}", file=sys.stderr)
    results["synthetic_query"] = query_latency(settings, "synthetic", questions, queries)
    results["synthetic_query"]["recall_at_10"] = None  # the questions are not about it
    print(f"synthetic query: {results['synthetic_query']}", file=sys.stderr)
    return results


def print_table(results: dict) -> None:
    print(f"{'measure':<44}{'value':>16}")
    if "musique_ingest" in results:
        mi, mq, si, sq = (results[k] for k in ("musique_ingest", "musique_query", "synthetic_ingest",
                                               "synthetic_query"))
        print(f"{'ingest musique-dev (1,890 passages)':<44}{mi['passages_per_s']:>12} p/s")
        synthetic_label = f"ingest synthetic ({si['passages']:,} passages)"
        print(f"{synthetic_label:<44}{si['passages_per_s']:>12} p/s")
        print(f"{'hybrid query p50 / p95, musique-dev':<44}{mq['p50_ms']:>7} / {mq['p95_ms']} ms")
        print(f"{'hybrid query p50 / p95, synthetic':<44}{sq['p50_ms']:>7} / {sq['p95_ms']} ms")
        print(f"{'recall@10 of supporting passages, musique':<44}{mq['recall_at_10']:>16}")
    if "searxng" in results:
        sx = results["searxng"]
        print(f"{'SearXNG round trip p50 / p95':<44}{sx['p50_ms']:>7} / {sx['p95_ms']} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=20000, help="passages in the synthetic corpus")
    parser.add_argument("--queries", type=int, default=100, help="queries timed per corpus and for SearXNG")
    parser.add_argument("--parts", default="corpus,searxng", help="comma-separated: corpus, searxng")
    parser.add_argument("--out", default=str(REPO / "bench-out" / "sources.json"), help="JSON results file")
    args = parser.parse_args()

    questions = [json.loads(line) for line in (MUSIQUE / "questions.jsonl").open(encoding="utf-8")]
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_avg_start": os.getloadavg()}}
    parts = {p.strip() for p in args.parts.split(",")}
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as tmp:
        work = Path(tmp)
        if "corpus" in parts:
            results.update(bench_corpus(work, questions, args.synthetic, args.queries))
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
