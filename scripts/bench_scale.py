#!/usr/bin/env python3
"""Benchmark batches on Dask against the in-process batch, on the same questions.

Modes, each in a fresh state folder holding the demo corpus (data/demo, ingested once), each
with a cold call cache:
  * in-process: `run_batch` in this process, one model, --threads llama.cpp threads;
  * local:1:    a LocalCluster with one worker process (same threads): the cluster path's cost;
  * local:2:    two worker processes, the threads split between them.
Reported: questions per hour of wall time (cluster start included), the median seconds of a
question's own run, and the cluster path's overhead per question: (local:1 wall - in-process
wall) / questions, as a share of an in-process question's time (goal < 3%).

Usage: python scripts/bench_scale.py [--model NAME] [--questions 4] [--threads N] [--corpus-from DIR] [--json]
The default model is the manifest's default (the research model): on a shared machine pass
--model smollm2-135m. Not part of `make test`. Writes only a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.batch import BatchItem, question_id, run_batch  # noqa: E402
from appliance.cluster import ClusterSpec  # noqa: E402
from appliance.config import SettingsRecipe  # noqa: E402

DEMO = ROOT / "data" / "demo"
ROLES = ("planner", "extractor", "verifier", "writer")


def demo_questions(count: int) -> list[BatchItem]:
    texts = [json.loads(line)["question"] for line in (DEMO / "questions.jsonl").read_text().splitlines()
             if line.strip()]
    if count > len(texts):
        raise SystemExit(f"the demo set has {len(texts)} questions; ask for at most that many")
    return [BatchItem(id=question_id(t), question=t, line=n) for n, t in enumerate(texts[:count], start=1)]


def recipe(home: Path, model: str | None, threads: int, profile: str) -> SettingsRecipe:
    empty = home / "empty-config.toml"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_text("", encoding="utf-8")
    overrides: dict[str, object] = {"state.home": str(home), "models.manifest": str(ROOT / "models" / "models.toml"),
                                    "llm.n_threads": threads, "search.backend": "corpus", "search.corpus": "default"}
    if model:
        overrides.update({f"models.{role}": model for role in ROLES})
    return SettingsRecipe(config_file=str(empty), profile=profile, overrides=tuple(sorted(overrides.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model name of the manifest for every role (default: the manifest's)")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp threads in all")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--corpus-from", type=Path,
                        help="a state folder whose corpus 'default' holds data/demo (copied, not re-embedded)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    for key in [k for k in os.environ if k.startswith("APPLIANCE_")]:
        del os.environ[key]

    from appliance.sources.corpus import Corpus

    items = demo_questions(args.questions)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        base = Path(tmp) / "corpus-home"
        if args.corpus_from:
            shutil.copytree(args.corpus_from / "lancedb", base / "lancedb")
        else:
            Corpus(recipe(base, args.model, args.threads, args.profile).build(), "default").add([DEMO / "corpus.jsonl"])
        modes = [("in-process", None, args.threads), ("local:1", ClusterSpec("local", 1), args.threads),
                 ("local:2", ClusterSpec("local", 2), max(1, args.threads // 2))]
        figures: dict[str, dict[str, float]] = {}
        for name, spec, threads in modes:
            home = Path(tmp) / name.replace(":", "-")
            shutil.copytree(base / "lancedb", home / "lancedb")
            start = time.monotonic()
            results = run_batch(items, recipe(home, args.model, threads, args.profile), Path(tmp) / f"out-{name}",
                                cluster=spec)
            wall = time.monotonic() - start
            failed = [r for r in results if r.outcome != "done"]
            if failed:
                raise SystemExit(f"{name}: {failed[0].id} failed: {failed[0].reason}")
            figures[name] = {"wall_seconds": round(wall, 2),
                             "questions_per_hour": round(len(items) * 3600 / wall, 1),
                             "median_question_seconds": round(statistics.median(r.seconds for r in results), 2)}
            print(f"{name:<11} {figures[name]['questions_per_hour']:>8.1f} questions/h  "
                  f"wall {wall:7.1f} s  median question {figures[name]['median_question_seconds']:.1f} s",
                  file=sys.stderr)
        per_question = figures["in-process"]["wall_seconds"] / len(items)
        overhead = (figures["local:1"]["wall_seconds"] - figures["in-process"]["wall_seconds"]) / len(items)
        figures["cluster_overhead"] = {"seconds_per_question": round(overhead, 2),
                                       "share_of_question": round(overhead / per_question, 4)}
        print(f"cluster path overhead: {overhead:.2f} s a question, {100 * overhead / per_question:.1f}% "
              f"of an in-process question (goal < 3%)", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": args.model or "default", "questions": len(items), "threads": args.threads,
                          "profile": args.profile, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
