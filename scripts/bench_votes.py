#!/usr/bin/env python3
"""Benchmark verification on its own: a labelled vote set through the pipeline's own voting.

tests/data/votes.jsonl holds claims over supporting sentences of ../shared/bench/musique-dev:
for each sentence, one claim that restates it ("true") and one that changes a single fact of
it, a name, number, date or place ("altered"). Each claim goes through `verify.judge` with its
sentence as the only evidence quote, exactly as a run votes (same prompt, seeds, vote rule and
early stop). Printed per model: the share of true claims confirmed and of altered claims
killed, by kind of change, with votes cast and seconds.

    .venv/bin/python scripts/bench_votes.py [--models qwen2.5-coder-1.5b,smollm2-135m] [--limit N] [--out FILE]

The call cache is off, so every vote is computed; nothing is written but --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOTE_SET = ROOT / "tests" / "data" / "votes.jsonl"


def load(limit: int | None) -> list[dict]:
    rows = [json.loads(line) for line in VOTE_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    if limit:
        # Keep pairs together: the first N sentences, each with its true and altered claim.
        keep = list(dict.fromkeys(r["passage_id"] for r in rows))[:limit]
        rows = [r for r in rows if r["passage_id"] in keep]
    return rows


def run_model(name: str, rows: list[dict], home: Path) -> list[dict]:
    from appliance.config import load_settings
    from appliance.llm import ModelPool
    from appliance.pipeline import prompts
    from appliance.pipeline.verify import VoteRule, judge

    settings = load_settings(env={"APPLIANCE_HOME": str(home)},
                             overrides={"llm.cache": False, **{f"models.{r}": name for r in
                                                               ("planner", "extractor", "verifier", "writer")}})
    rule = VoteRule.from_settings(settings)
    ctx = prompts.Context(question="", today="2026-01-01")
    results = []
    with ModelPool(settings, cache=False) as pool:
        engine = pool.for_role("verifier")
        for number, row in enumerate(rows, start=1):
            start = time.perf_counter()
            verdict, failures = judge(engine, ctx, row["id"], row["claim"], f'- "{row["quote"]}"', rule,
                                      settings.llm.seed)
            seconds = time.perf_counter() - start
            right = verdict.confirmed if row["label"] == "true" else not verdict.confirmed
            results.append({"model": name, "id": row["id"], "label": row["label"], "change": row["change"],
                            "confirmed": verdict.confirmed, "right": right, "votes": len(verdict.votes),
                            "supports": verdict.supports, "refutations": verdict.refutations,
                            "abstentions": len(verdict.votes) - verdict.valid_votes, "failures": failures,
                            "seconds": round(seconds, 2),
                            "reasons": [f"{v.verdict.value if v.verdict else 'failed'}: {v.reason}"
                                        for v in verdict.votes]})
            print(f"[{name} {number}/{len(rows)}] {'ok ' if right else 'BAD'} {row['label']:8} "
                  f"{verdict.supports}s/{verdict.refutations}r/{len(verdict.votes)}v {seconds:5.1f}s "
                  f"{row['claim'][:70]}", file=sys.stderr)
    return results


def share(rows: list[dict], **match) -> tuple[float, int]:
    mine = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return (sum(r["right"] for r in mine) / len(mine) if mine else float("nan")), len(mine)


def summary(results: list[dict]) -> str:
    lines = ["| model | true claims confirmed | altered claims killed | altered: name | number | date | place "
             "| votes per claim | abstentions | seconds per claim |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model in dict.fromkeys(r["model"] for r in results):
        mine = [r for r in results if r["model"] == model]
        cells = [model]
        for label in ("true", "altered"):
            value, n = share(mine, label=label)
            cells.append(f"{value:.0%} ({n})")
        for change in ("name", "number", "date", "place"):
            value, n = share(mine, label="altered", change=change)
            cells.append(f"{value:.0%} ({n})")
        cells.append(f"{sum(r['votes'] for r in mine) / len(mine):.2f}")
        cells.append(str(sum(r["abstentions"] for r in mine)))
        seconds = sorted(r["seconds"] for r in mine)
        cells.append(f"{seconds[len(seconds) // 2]:.1f} (median)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-1.5b,smollm2-135m",
                        help="manifest models to measure, comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences (2 claims each)")
    parser.add_argument("--out", type=Path, default=None, help="also write every claim's result as JSONL here")
    args = parser.parse_args()
    rows = load(args.limit)
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-votes-") as home:
        for name in args.models.split(","):
            results += run_model(name.strip(), rows, Path(home))
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results), encoding="utf-8")
    from appliance.config import load_settings
    from appliance.pipeline.verify import VoteRule

    rule = VoteRule.from_settings(load_settings())
    counts = Counter(r["label"] for r in rows)
    print(f"\nvote set: {counts['true']} true and {counts['altered']} altered claims "
          f"({VOTE_SET.relative_to(ROOT)}); rule: {rule.votes} votes, {rule.min_valid} supporting to confirm, "
          f"{rule.kill_at} refutations kill\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
