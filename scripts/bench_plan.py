#!/usr/bin/env python3
"""Benchmark planning on its own: how often the planner's plan is fit to research the question.

Each question of a bench set (default ../shared/bench/musique-dev) is planned as a run plans it
(`plan.plan_research`: the same prompt, grammar, checks and repairs), drawing up to --draws
plans while a plan has faults (`plan.plan_faults`: a sub-question naming what the question
does not, one tied to nothing of the question, a name of the question no sub-question asks
about, the whole question asked before its parts). Printed: the share of questions whose first
plan is fit, the share with a fit plan within the draws, fault kinds, and seconds per draw.

    .venv/bin/python scripts/bench_plan.py [--dataset DIR] [--limit N] [--draws 3]
        [--temperature T] [--model NAME] [--out FILE]

The call cache is off, so every plan is computed; nothing is written but --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fault_kind(line: str) -> str:
    for marker, kind in (("which the question does not", "names what the question does not"),
                         ("names nothing of the question", "tied to nothing of the question"),
                         ("no sub-question names", "drops a name of the question"),
                         ("is the whole question", "whole question before its parts"),
                         ("no usable sub-question", "no usable sub-question")):
        if marker in line:
            return kind
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "bench" / "musique-dev")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--draws", type=int, default=None, help="plans drawn at most (default: the setting)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="temperature of the later draws (default: the setting)")
    parser.add_argument("--model", default=None, help="manifest model (default: the planner's)")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--out", type=Path, default=None, help="also write each question's plans as JSONL here")
    args = parser.parse_args()
    if not (args.dataset / "questions.jsonl").is_file():
        sys.exit(f"error: no bench at {args.dataset} (questions.jsonl): name it with --dataset DIR")

    from appliance.config import load_settings
    from appliance.llm import ModelPool
    from appliance.pipeline import prompts
    from appliance.pipeline.plan import plan_research

    questions = [json.loads(line) for line in (args.dataset / "questions.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip()][: args.limit]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as home:
        overrides: dict = {"llm.cache": False, "pipeline.profile": args.profile}
        if args.model:
            overrides.update({f"models.{r}": args.model for r in ("planner", "extractor", "verifier", "writer")})
        settings = load_settings(env={"APPLIANCE_HOME": home}, overrides=overrides)
        p = settings.pipeline
        draws = args.draws or p.plan_draws
        temperature = args.temperature if args.temperature is not None else p.plan_redraw_temperature
        with ModelPool(settings, cache=False) as pool:
            engine = pool.for_role("planner")
            for number, q in enumerate(questions, start=1):
                ctx = prompts.Context(question=q["question"], today=dt.date.today().isoformat())
                start = time.perf_counter()
                drawn, checked = plan_research(engine, ctx, p.min_nodes, min(p.max_nodes, p.hard_max_nodes),
                                               p.min_queries, p.max_queries, draws, settings.llm.seed, temperature)
                seconds = time.perf_counter() - start
                faults = [r for r in checked.repairs if " set aside: " in r]
                fit = not any("researching the question itself" in r for r in checked.repairs)
                rows.append({"id": q["id"], "hops": q.get("hops"), "question": q["question"], "draws": len(drawn),
                             "first_fit": fit and not faults, "fit": fit, "seconds": round(seconds, 2),
                             "repairs": checked.repairs, "nodes": [n.question for n in checked.nodes]})
                print(f"[{number}/{len(questions)}] {'fit ' if fit else 'FAIL'} draws {len(drawn)} "
                      f"{seconds:5.1f}s {q['question'][:70]}", file=sys.stderr)
                for line in faults:
                    print(f"      {line[:160]}", file=sys.stderr)
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    n = len(rows)
    kinds = Counter(fault_kind(part) for r in rows for line in r["repairs"] if " set aside: " in line
                    for part in line.split(" set aside: ", 1)[1].split("; "))
    per_draw = sum(r["seconds"] for r in rows) / max(1, sum(r["draws"] for r in rows))
    print(f"\n{n} questions, up to {draws} draws (later draws at temperature {temperature})")
    print(f"first plan fit: {sum(r['first_fit'] for r in rows)}/{n}; fit within the draws: "
          f"{sum(r['fit'] for r in rows)}/{n}; draws per question {sum(r['draws'] for r in rows) / max(1, n):.2f}; "
          f"seconds per draw {per_draw:.1f}")
    for kind, count in kinds.most_common():
        print(f"  {count:3d}  {kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
