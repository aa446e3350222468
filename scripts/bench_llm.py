#!/usr/bin/env python3
"""Benchmark the model engine on the default model (or another manifest model).

For one fixed prompt set it reports, as medians over --reps repetitions:
  * raw llama-cpp-python generation speed (create_chat_completion, no grammar),
  * the same with the engine's grammar passed straight to llama-cpp-python,
  * the engine's speed (structured calls: grammar + validation, call cache off),
  * the engine/raw ratio,
  * the share of prompt tokens reused from llama.cpp's prefix cache when three votes on one
    claim run back to back (a long shared prompt, different seeds).
Speeds are generated tokens per second of wall time per call, prompt evaluation included;
the KV cache is cleared before each speed call so every call evaluates its whole prompt.

Usage: python scripts/bench_llm.py [--reps 3] [--model NAME] [--json]
Nothing is written except a state folder in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.contracts import Extraction, Vote  # noqa: E402
from appliance.llm import ModelPool, gbnf_for, schema_json  # noqa: E402

SYSTEM = "You are a careful research assistant. Answer with one JSON object only."
TEXTS = [
    "The Eiffel Tower in Paris is 330 metres tall. It was completed in 1889 for the World's Fair "
    "and was the tallest man-made structure until 1930.",
    "Marie Curie won the Nobel Prize in Physics in 1903 and the Nobel Prize in Chemistry in 1911; "
    "she was the first person to win Nobel Prizes in two sciences.",
    "The Great Barrier Reef off Queensland, Australia, is the world's largest coral reef system, "
    "made of about 2,900 individual reefs over 344,000 square kilometres.",
    "Python 3.11, released in October 2022, was on average 25% faster than Python 3.10 thanks to "
    "the Faster CPython project.",
]
EVIDENCE = " ".join(
    f"Report {i}: the harbour authority recorded {120 + i} ship arrivals in week {i}, "
    f"with average waiting times of {2 + i % 5} hours and {i % 3} incidents." for i in range(40))
CLAIM = "Waiting times at the harbour never exceeded six hours."


def speed_prompts() -> list[tuple[list[dict], type]]:
    out = []
    for i, text in enumerate(TEXTS):
        schema = Extraction if i % 2 == 0 else Vote
        task = ("Extract up to 3 claims with verbatim quotes." if schema is Extraction
                else "Claim: this happened before 1950. Try to refute it.")
        out.append(([{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": f"Text: {text}\n\n{task}"}], schema))
    return out


def vote_messages() -> list[dict]:
    return [{"role": "system", "content": SYSTEM + " Try to refute the claim; if unsure, it is refuted."},
            {"role": "user", "content": f"Evidence:\n{EVIDENCE}\n\nClaim: {CLAIM}"}]


def raw_speed(llama, prompts, max_tokens: int, grammar: bool) -> float:
    from llama_cpp import LlamaGrammar

    tokens = seconds = 0.0
    for i, (messages, schema) in enumerate(prompts):
        llama.reset()
        kwargs = {"grammar": LlamaGrammar.from_string(gbnf_for(schema_json(schema)))} if grammar else {}
        start = time.perf_counter()
        out = llama.create_chat_completion(messages, max_tokens=max_tokens, temperature=0.3,
                                           seed=100 + i, repeat_penalty=1.0, **kwargs)
        seconds += time.perf_counter() - start
        tokens += out["usage"]["completion_tokens"]
    return tokens / seconds


def engine_speed(engine, prompts, max_tokens: int) -> float:
    before = engine.accounting
    for i, (messages, schema) in enumerate(prompts):
        engine.backend.llama.reset()
        try:
            engine.structured(messages, schema, seed=100 + i, max_tokens=max_tokens, cache=False)
        except Exception as exc:  # noqa: BLE001 - a failed call still spent its tokens
            print(f"bench: call {i} failed: {exc}", file=sys.stderr)
    spent = engine.accounting.diff(before)
    return spent.generated_tokens / spent.seconds


def vote_reuse(engine) -> tuple[float, float, list[float]]:
    """Three votes back to back after an unrelated call: (share reused over all three, share
    over votes 2-3, seconds per vote)."""
    messages = vote_messages()
    engine.structured(speed_prompts()[1][0], Vote, seed=1, max_tokens=96, cache=False)
    start = engine.accounting
    per_vote, after_first = [], None
    for seed in (1, 2, 3):
        before = engine.accounting
        engine.structured(messages, Vote, seed=seed, max_tokens=96, cache=False)
        per_vote.append(engine.accounting.diff(before).seconds)
        if seed == 1:
            after_first = engine.accounting
    return (engine.accounting.diff(start).reuse_share, engine.accounting.diff(after_first).reuse_share,
            per_vote)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the local model engine.")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians are reported")
    parser.add_argument("--max-tokens", type=int, default=160, help="output budget per call")
    parser.add_argument("--model", default=None, help="manifest model name (default: the writer's)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    home = tempfile.mkdtemp(prefix="bench-llm-")
    settings = load_settings(env={**os.environ, "APPLIANCE_HOME": home},
                             overrides={"models.manifest": str(ROOT / "models" / "models.toml")})
    pool = ModelPool(settings, cache=False)
    engine = pool.engine(args.model) if args.model else pool.for_role("writer")
    llama = engine.backend.llama
    prompts = speed_prompts()
    raw_speed(llama, prompts[:1], 16, grammar=False)  # warm-up

    raw, raw_g, eng, share_all, share_23, vote_s = [], [], [], [], [], []
    for _ in range(args.reps):
        raw.append(raw_speed(llama, prompts, args.max_tokens, grammar=False))
        raw_g.append(raw_speed(llama, prompts, args.max_tokens, grammar=True))
        eng.append(engine_speed(engine, prompts, args.max_tokens))
        a, b, per_vote = vote_reuse(engine)
        share_all.append(a)
        share_23.append(b)
        vote_s.append(per_vote)
    med = statistics.median
    figures = {
        "model": engine.name, "threads": settings.llm.n_threads or os.cpu_count(), "reps": args.reps,
        "raw_tokens_per_s": round(med(raw), 1),
        "raw_grammar_tokens_per_s": round(med(raw_g), 1),
        "engine_tokens_per_s": round(med(eng), 1),
        "engine_over_raw": round(med(eng) / med(raw), 2),
        "vote_prompt_tokens": engine.count_prompt(vote_messages()),
        "vote_prefix_reuse_share_3_votes": round(med(share_all), 3),
        "vote_prefix_reuse_share_votes_2_3": round(med(share_23), 3),
        "vote_seconds_first_then_next": [round(med(v[i] for v in vote_s), 2) for i in range(3)],
    }
    pool.close()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"model {figures['model']}, {figures['threads']} threads, medians of {args.reps} reps")
        print(f"raw llama-cpp-python (no grammar)  {figures['raw_tokens_per_s']:>7} tokens/s")
        print(f"raw llama-cpp-python + grammar     {figures['raw_grammar_tokens_per_s']:>7} tokens/s")
        print(f"engine.structured (grammar, valid.) {figures['engine_tokens_per_s']:>6} tokens/s")
        print(f"engine / raw                        {figures['engine_over_raw']:>6}")
        print(f"3 votes on one claim ({figures['vote_prompt_tokens']} prompt tokens): "
              f"{figures['vote_prefix_reuse_share_3_votes']:.1%} of prompt tokens reused overall, "
              f"{figures['vote_prefix_reuse_share_votes_2_3']:.1%} for votes 2-3; seconds per vote "
              f"{figures['vote_seconds_first_then_next']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
