#!/usr/bin/env python3
"""Benchmark the model engine against free generation and the previous grammar path.

For each model (default: every model of the manifest whose file is present, the default
model first) and each contract (plan, extraction with a sentence enum, reason-first vote,
synthesis) it runs, on the same prompt, as medians over --reps repetitions:
  * raw:    llama-cpp-python create_chat_completion, no grammar, made to generate exactly as
            many tokens as the engine's output (end-of-generation tokens banned);
  * old:    create_chat_completion with the previous GBNF grammar (scripts/old_gbnf.py);
  * engine: engine.structured (llguidance masks, forced tokens fast-forwarded, validation).
Speeds are output tokens per second of wall time, prompt evaluation included (the KV cache
is cleared before every call, so each evaluates its whole prompt); the engine's output tokens
include the fast-forwarded ones. The prompt's evaluation is also timed alone, and the ratio
computed again on the generation only (wall time minus that). Also: the share of output tokens fast-forwarded, mask time
as a share of decode time, and the goals (engine >= 1.0x raw on every contract, >= 1.5x on
extraction, mask < 5% of decode), and what evaluating k tokens in one batch costs against one
token on this machine (the ceiling on what fast-forwarding forced tokens can save).

Usage: python scripts/bench_llm.py [--reps 3] [--models a,b] [--manifest PATH] [--json]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from pydantic import Field, create_model  # noqa: E402

from appliance import contracts  # noqa: E402
from appliance.config import load_settings  # noqa: E402
from appliance.llm import CallRecord, Engine, load_manifest, schema_json  # noqa: E402
from appliance.llm.engine import context_size  # noqa: E402
from appliance.llm.native import LlamaBackend, PrefixBank  # noqa: E402
from old_gbnf import gbnf_for  # noqa: E402

# The vote as the pipeline is moving to it: the reason first, then the verdict.
VoteReasonFirst = create_model(
    "VoteReasonFirst", __base__=contracts._Out, reason=(str, Field(max_length=300)),
    verdict=(Literal["supported", "refuted", "insufficient"], ...))

RULES = ("You are a careful research assistant working offline on a fact-checked report. "
         "Answer with one JSON object only, exactly in the requested shape, with no text before or "
         "after it. Write plain, precise English. Never invent facts, names, dates or numbers; use only "
         "what the given text states. Prefer short, specific sentences over long general ones. Keep "
         "the original spelling of names and quoted words, including accents and punctuation. ")

PASSAGE_SENTENCES = [
    "Lake Orta is a small lake in the north of Italy, west of Lake Maggiore.",
    "The island of San Giulio lies in the middle of the lake and holds a twelfth-century basilica.",
    "The lake drains to the north, unlike its neighbours, through the Nigoglia channel at Omegna.",
    'Locals call this oddity "la Nigoglia" and repeat the saying "l\'acqua va in su".',
    "Its water was badly polluted by a rayon factory from 1926, when copper and ammonia entered it.",
    "By the 1950s the fish had almost vanished, and the lake was called \"biologically dead\".",
    "Liming in 1989 and 1990 raised the pH from about 4 to nearly 7 and brought the fish back.",
    "The operation used some 18,000 tonnes of limestone spread from boats over two years.",
    "Today the lake's perch, whitefish and char are caught again by a small number of fishermen.",
    "The Sacro Monte d'Orta, above the town of Orta San Giulio, is a UNESCO World Heritage Site.",
    "Its twenty chapels, built between 1590 and 1788, tell the life of Saint Francis of Assisi.",
    "The painter Morazzone worked on several chapels; café owners in the square still sell prints.",
    "Ferries cross from Orta San Giulio to the island in about five minutes in summer.",
    "The benedictine abbey Mater Ecclesiae on the island houses about seventy nuns.",
    "Friedrich Nietzsche visited the lake in 1882 with Lou Salomé, a trip she later described.",
    "The lake is about 13.4 kilometres long and at most 2.5 kilometres wide.",
    "Its deepest point reaches 143 metres, near the village of Pella on the western shore.",
    "Omegna, at the northern end, grew as an industrial town known for household goods.",
    "Several kitchenware firms started there, among them Alessi, Bialetti and Lagostina.",
    "The Strona river leaves the lake at Omegna and joins the Toce before Lake Maggiore.",
    "A path called \"Anello Azzurro\" circles much of the lake for walkers.",
    "Winter fog often covers the lake while the hills above stay in sunshine.",
    "Water quality surveys since 2000 report the lake as recovered, though sediments hold copper.",
    "Researchers at the CNR in Verbania have monitored the lake's chemistry for decades.",
    "The monitoring series, begun in the 1950s, is one of the longest for any Italian lake.",
    "Tourism is now the main industry of the lake's shore villages.",
    "The island has no cars; its single street is called the \"Way of Silence\".",
    "Signs along it carry short sayings such as \"Walk in silence\" and \"In the present you live\".",
    "The basilica's pulpit, carved in dark serpentine stone, dates from the twelfth century.",
    "Legend says Saint Julius crossed to the island on his cloak in 390 and drove out its serpents.",
]
PASSAGE = " ".join(PASSAGE_SENTENCES)
CLAIMS = [f"[c{i}] {s}" for i, s in enumerate(PASSAGE_SENTENCES[:14], 1)]


@dataclass
class Case:
    name: str
    schema: type
    messages: list[dict]
    budget: int


def cases() -> list[Case]:
    quoted = contracts.quoting_extraction(3, tuple(PASSAGE_SENTENCES))
    return [
        Case("plan", contracts.bounded(contracts.Plan, nodes=(4, 6)), [
            {"role": "system", "content": RULES + "Split the question into 4 to 6 sub-questions a search "
             "engine can answer, with ids q1, q2, ... and the ids each depends on."},
            {"role": "user", "content": "Question: How did Lake Orta recover from industrial pollution, and "
             "what does its recovery teach about restoring acidified lakes elsewhere in Europe?"}], 400),
        Case("extraction", quoted, [
            {"role": "system", "content": RULES + "Rate the source and extract up to 3 claims that answer "
             "the sub-question. Each quote must be one whole sentence of the source, copied exactly; the "
             "claim restates that sentence in your own words."},
            {"role": "user", "content": f"Sub-question: What polluted Lake Orta and how was it restored?\n\n"
             f"Source (lake-orta.example):\n{PASSAGE}"}], 600),
        Case("vote", VoteReasonFirst, [
            {"role": "system", "content": RULES + "You check one claim against the quotes given as evidence. "
             "Look for a reason the quotes do not state the claim. Write the reason first, then the "
             "verdict: supported, refuted or insufficient."},
            {"role": "user", "content": "Quotes:\n" + "\n".join(f'- "{s}"' for s in PASSAGE_SENTENCES[4:8])
             + "\n\nClaim: Liming in 1989-1990 restored the fish of Lake Orta after decades of pollution."}], 200),
        Case("synthesis", contracts.ReportDraft, [
            {"role": "system", "content": RULES + "Write the report from the verified claims only: a short "
             "direct answer, an executive summary, findings by theme whose statements cite claim ids, and "
             "open questions."},
            {"role": "user", "content": "Question: How did Lake Orta recover from industrial pollution?\n\n"
             "Verified claims:\n" + "\n".join(CLAIMS)}], 700),
    ]


def reset(engine: Engine) -> None:
    """Forget llama.cpp's KV cache and the engine's saved instruction heads: every measured
    call evaluates its whole prompt, as the raw and old paths do."""
    engine.backend.llama.reset()
    engine.backend.prefixes = PrefixBank(engine.backend.prefixes.capacity)


def eog_bias(llama) -> dict[int, float]:
    """Logit bias that bans every end-of-generation token (raw runs generate a fixed length)."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    return {t: -1e9 for t in range(llama_cpp.llama_vocab_n_tokens(vocab)) if llama_cpp.llama_vocab_is_eog(vocab, t)}


def run_engine(engine: Engine, case: Case, seed: int) -> CallRecord:
    records: list[CallRecord] = []
    remove = engine.add_listener(records.append)
    reset(engine)
    try:
        engine.structured(case.messages, case.schema, seed=seed, max_tokens=case.budget, cache=False,
                          purpose=case.name)
    except Exception as exc:  # noqa: BLE001 - a failed call still spent its tokens
        print(f"bench: {engine.name} {case.name} failed: {exc}", file=sys.stderr)
    finally:
        remove()
    return records[-1]


def run_llama(engine: Engine, case: Case, seed: int, *, max_tokens: int, grammar: str | None,
              bias: dict[int, float] | None) -> tuple[int, float]:
    from llama_cpp import LlamaGrammar

    llm = engine.settings.llm
    reset(engine)
    kwargs = {"grammar": LlamaGrammar.from_string(grammar, verbose=False)} if grammar else {}
    start = time.perf_counter()
    out = engine.backend.llama.create_chat_completion(
        case.messages, max_tokens=max_tokens, temperature=llm.temperature, top_p=llm.top_p, top_k=40,
        min_p=0.05, repeat_penalty=1.0, seed=seed, logit_bias=bias, **kwargs)
    return int(out["usage"]["completion_tokens"]), time.perf_counter() - start


def bench_model(engine: Engine, reps: int, only: list[str] | None = None) -> dict:
    bias = eog_bias(engine.backend.llama)
    rows = {}
    run_engine(engine, cases()[2], 1)  # warm-up (tokenizer for the grammar, first decode)
    for case in cases():
        if only and case.name not in only:
            continue
        gbnf = gbnf_for(schema_json(case.schema))
        raw, old, eng, forced, mask, prompt = [], [], [], [], [], 0
        raw_gen, eng_gen = [], []
        for rep in range(reps):
            seed = 100 + rep
            rec = run_engine(engine, case, seed)
            n_out = rec.generated_tokens
            eng.append(n_out / rec.seconds)
            prefill = prompt_seconds(engine, case)
            forced.append(rec.forced_tokens / max(1, n_out))
            mask.append(rec.mask_seconds / max(1e-9, rec.decode_seconds))
            prompt = rec.prompt_tokens // max(1, rec.attempts)
            n, s = run_llama(engine, case, seed, max_tokens=max(1, n_out // max(1, rec.attempts)),
                             grammar=None, bias=bias)
            raw.append(n / s)
            if rec.attempts == 1:
                raw_gen.append(n / max(1e-3, s - prefill))
                eng_gen.append(n_out / max(1e-3, rec.seconds - prefill))
            n, s = run_llama(engine, case, seed, max_tokens=case.budget, grammar=gbnf, bias=None)
            old.append(n / s)
            print(f"bench: {engine.name} {case.name} rep {rep + 1}: engine {eng[-1]:.1f}, raw {raw[-1]:.1f}, "
                  f"old {old[-1]:.1f} tok/s", file=sys.stderr, flush=True)
        med = statistics.median
        rows[case.name] = {
            "prompt_tokens": prompt, "output_tokens": rec.generated_tokens, "attempts": rec.attempts,
            "raw_tok_s": round(med(raw), 1), "old_tok_s": round(med(old), 1), "engine_tok_s": round(med(eng), 1),
            "engine_over_raw": round(med(eng) / med(raw), 2), "old_over_raw": round(med(old) / med(raw), 2),
            "forced_share": round(med(forced), 3), "mask_share_of_decode": round(med(mask), 4),
            "prompt_seconds": round(prefill, 2),
            "engine_over_raw_generation": round(med(eng_gen) / med(raw_gen), 2) if raw_gen else None}
    return rows


def prompt_seconds(engine: Engine, case: Case) -> float:
    """Seconds llama.cpp takes to evaluate the case's prompt alone (from an empty cache): the
    part of every call's wall time that no decoding strategy changes."""
    tokens, _ = engine.backend.render(case.messages)
    reset(engine)
    start = time.perf_counter()
    engine.backend.llama.eval(tokens)
    return time.perf_counter() - start


def goals(rows: dict) -> dict:
    """The goals the run can judge: those over every contract only when all of them ran."""
    out = {}
    if len(rows) == len(cases()):
        out["engine_ge_1x_raw_every_contract"] = all(r["engine_over_raw"] >= 1.0 for r in rows.values())
    if "extraction" in rows:
        out["engine_ge_1_5x_raw_extraction"] = rows["extraction"]["engine_over_raw"] >= 1.5
    out["mask_lt_5pct_of_decode"] = all(r["mask_share_of_decode"] < 0.05 for r in rows.values())
    return out


BATCH_SIZES = (1, 2, 4, 8)


def batch_costs(engine: Engine, reps: int = 5) -> dict[int, float]:
    """Seconds to evaluate k tokens in one batch after the extraction prompt, as a multiple of
    one token's (medians): the most a fast-forward of k forced tokens can save is 1 - cost/k.
    Where a batch costs about as much as one token (a GPU), forcing makes text almost free;
    where it costs nearly k times one (a CPU that is compute-bound at these sizes), it cannot."""
    tokens, _ = engine.backend.render(cases()[1].messages)
    llama = engine.backend.llama
    reset(engine)
    llama.eval(tokens)
    n = len(tokens)
    extra = (tokens * 2)[:max(BATCH_SIZES)]
    seconds = {}
    for k in BATCH_SIZES:
        times = []
        for _ in range(reps):
            llama.n_tokens = n  # eval() drops the KV cache beyond this
            start = time.perf_counter()
            llama.eval(extra[:k])
            times.append(time.perf_counter() - start)
        seconds[k] = statistics.median(times)
    reset(engine)
    return {k: round(seconds[k] / seconds[1], 2) for k in BATCH_SIZES}


def vote_reuse(engine: Engine) -> list[float]:
    """Seconds of three votes on one claim back to back (votes 2-3 reuse the prompt's prefix)."""
    case = cases()[2]
    reset(engine)
    return [round(run_engine_keep(engine, case, seed).seconds, 2) for seed in (1, 2, 3)]


def run_engine_keep(engine: Engine, case: Case, seed: int) -> CallRecord:
    records: list[CallRecord] = []
    remove = engine.add_listener(records.append)
    try:
        engine.structured(case.messages, case.schema, seed=seed, max_tokens=case.budget, cache=False)
    finally:
        remove()
    return records[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the local model engine.")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians are reported")
    parser.add_argument("--models", default="", help="comma-separated manifest names (default: all present)")
    parser.add_argument("--manifest", default=str(ROOT / "models" / "models.toml"), help="model manifest")
    parser.add_argument("--contracts", default="", help="comma-separated contracts to run (default: all; "
                        "the goals need all)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    home = tempfile.mkdtemp(prefix="bench-llm-")
    settings = load_settings(env={**os.environ, "APPLIANCE_HOME": home},
                             overrides={"models.manifest": args.manifest})
    manifest = load_manifest(Path(args.manifest))
    entries = [e for e in manifest.models if manifest.path_of(e).is_file()]
    entries.sort(key=lambda e: not e.roles)  # the model serving roles (the default) first
    if args.models:
        wanted = args.models.split(",")
        entries = [manifest.get(name) for name in wanted]
    results = {"threads": settings.llm.n_threads or os.cpu_count(), "reps": args.reps, "models": {}}
    for entry in entries:
        llm = settings.llm
        backend = LlamaBackend.load(manifest.path_of(entry), name=entry.name,
                                    n_ctx=context_size(settings, entry), n_threads=llm.n_threads,
                                    n_batch=llm.n_batch, seed=llm.seed, chat_format=entry.chat_format or None)
        engine = Engine(backend, entry, settings)
        rows = bench_model(engine, args.reps, [c for c in args.contracts.split(",") if c])
        results["models"][entry.name] = {"contracts": rows, "goals": goals(rows),
                                         "three_votes_seconds": vote_reuse(engine),
                                         "batch_cost": batch_costs(engine)}
        engine.close()
        if not args.json:
            print_model(entry.name, results["models"][entry.name], args.reps, results["threads"])
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def print_model(name: str, data: dict, reps: int, threads: int) -> None:
    print(f"\nmodel {name}, {threads} threads, medians of {reps} reps (tok/s = output tokens / wall s)")
    print(f"{'contract':<11}{'prompt':>7}{'out':>5}{'raw':>8}{'old':>8}{'engine':>8}{'eng/raw':>8}"
          f"{'old/raw':>8}{'forced':>8}{'mask/dec':>9}{'prompt s':>9}{'gen eng/raw':>12}")
    for cname, r in data["contracts"].items():
        gen = f"{r['engine_over_raw_generation']}x" if r["engine_over_raw_generation"] else "n/a"
        print(f"{cname:<11}{r['prompt_tokens']:>7}{r['output_tokens']:>5}{r['raw_tok_s']:>8}{r['old_tok_s']:>8}"
              f"{r['engine_tok_s']:>8}{r['engine_over_raw']:>7}x{r['old_over_raw']:>7}x"
              f"{r['forced_share']:>8.0%}{r['mask_share_of_decode']:>9.2%}{r['prompt_seconds']:>9}{gen:>12}")
    print("gen eng/raw: the same ratio on the generation alone (the prompt's evaluation, timed on "
          "its own, taken off both)")
    print("goals: " + ", ".join(f"{k} {'MET' if v else 'NOT MET'}" for k, v in data["goals"].items()))
    print(f"three votes back to back, seconds: {data['three_votes_seconds']}")
    costs = data["batch_cost"]
    print("k tokens in one batch cost, in one token's time: "
          + ", ".join(f"k={k} {c}x (forcing saves at most {max(0.0, 1 - c / k):.0%})" for k, c in costs.items()))


if __name__ == "__main__":
    sys.exit(main())
