"""Pipeline benchmark on musique-dev: profiles quick and standard against the one-call rag
baseline, with the same model. Prints medians of wall time, model calls, tokens and the claim
funnel per profile, and answer quality (EM, F1, supporting-passage recall) side by side.

    .venv/bin/python scripts/bench_pipeline.py --limit 5 [--profiles quick,standard] [--home DIR]

Runs in its own state folder (default .build/bench-pipeline) so the call cache of earlier runs
does not flatter the timings; rerunning resumes (answered questions are kept).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATASET = REPO.parent / "shared" / "bench" / "musique-dev"


def median(rows, key, sub=None):
    values = [(r.get(sub) or {}).get(key) if sub else r.get(key) for r in rows]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


FUNNEL = ("claims_extracted", "quotes_rejected", "claims_from_quote", "claims_merged", "verified",
          "confirmed", "killed")


def total(rows, key):
    return sum((r.get("run_stats") or {}).get(key) or 0 for r in rows)


def mean(rows, key):
    values = [r.get(key) for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--profiles", default="quick,standard")
    parser.add_argument("--home", default=str(REPO / ".build" / "bench-pipeline"))
    parser.add_argument("--dataset", default=str(DATASET))
    args = parser.parse_args()
    if not (Path(args.dataset) / "questions.jsonl").is_file():
        sys.exit(f"error: no bench at {args.dataset} (questions.jsonl, corpus.jsonl): name it with --dataset DIR")
    os.environ["APPLIANCE_HOME"] = args.home

    from appliance.config import load_settings
    from appliance.evaluation.runner import EvalRun, corpus_name_for, load_dataset
    from appliance.pipeline.parts import open_run_parts
    from appliance.sources.corpus import Corpus

    dataset = load_dataset(args.dataset, args.limit)
    corpus = corpus_name_for(dataset)
    base = load_settings(overrides={"search.backend": "corpus", "search.corpus": corpus})
    Corpus(base, corpus).add([dataset.corpus_path])
    models, backend, fetcher, embedder = open_run_parts(base)
    results = {}
    for profile in args.profiles.split(","):
        settings = load_settings(profile=profile, overrides={"search.backend": "corpus", "search.corpus": corpus})
        out = Path(args.home) / f"out-{profile}"
        out.mkdir(parents=True, exist_ok=True)
        run = EvalRun(settings, dataset, out, models=models, fetcher=fetcher, embedder=embedder,
                      backend=backend, log=lambda s: print(s, file=sys.stderr))
        results[profile] = run.run(["pipeline"] if profile != "quick" else ["pipeline", "rag"])

    print(f"\nmusique-dev, {len(dataset.questions)} questions, model {models.label()}: medians per question, "
          "the claim funnel summed over the questions, EM/F1/SP recall averaged\n")
    header = ("mode", "wall s", "calls", "submitted", "evaluated", "generated", "busy",
              "extracted", "rejected", "restated", "merged", "verified", "confirmed", "killed",
              "EM", "F1", "SP recall")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for profile, rows in results.items():
        for mode in ("pipeline", "rag"):
            mine = [r for r in rows if r["mode"] == mode]
            if not mine:
                continue
            label = f"{mode} ({profile})" if mode == "pipeline" else "rag (one call)"
            cells = [label, f"{median(mine, 'seconds'):.1f}", f"{median(mine, 'model_calls'):.0f}",
                     f"{median(mine, 'tokens_submitted'):.0f}", f"{median(mine, 'tokens_evaluated'):.0f}",
                     f"{median(mine, 'tokens_generated'):.0f}"]
            if mode == "pipeline":
                cells += [f"{median(mine, 'llm_busy_share', 'run_stats'):.2f}"] + [
                    f"{total(mine, k):.0f}" for k in FUNNEL]
            else:
                cells += ["-"] * (1 + len(FUNNEL))
            cells += [f"{mean(mine, 'em'):.2f}", f"{mean(mine, 'f1'):.2f}", f"{mean(mine, 'sp_recall'):.2f}"]
            print("| " + " | ".join(cells) + " |")
    fetcher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
