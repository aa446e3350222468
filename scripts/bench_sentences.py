"""Benchmark of the sentence splitter on a corpus: speed, and how its cuts compare with the
regex it replaced and, when installed, with pysbd (a rule-based splitter; not a dependency).

For each splitter: sentences, time, characters per second. Against pysbd: the share of its
sentence ends that the splitter also makes (recall) and the share of the splitter's ends that
pysbd also makes (precision), counted as character offsets in each passage.

Usage: .venv/bin/python scripts/bench_sentences.py [CORPUS.jsonl] [--show N]
(default corpus: the shipped demo corpus, data/demo/corpus.jsonl)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from appliance.sources.sentences import split_sentences  # noqa: E402

_OLD = re.compile(r"(?<=[.!?])\s+")


def old_split(text: str) -> list[str]:
    return [s.strip() for s in _OLD.split(text) if s.strip()]


def ends(text: str, sentences: list[str]) -> set[int]:
    """Character offsets in ``text`` where each sentence but the last ends."""
    out, pos = set(), 0
    for sentence in sentences[:-1]:
        pos = text.index(sentence, pos) + len(sentence)
        out.add(pos)
    return out


def timed(split, texts: list[str]) -> tuple[list[list[str]], float]:
    started = time.perf_counter()
    result = [split(t) for t in texts]
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", default=str(REPO / "data" / "demo" / "corpus.jsonl"),
                        help="JSONL passages (default: the shipped demo corpus)")
    parser.add_argument("--show", type=int, default=8, help="disagreements with pysbd to print")
    args = parser.parse_args()
    texts = [json.loads(line)["text"] for line in Path(args.corpus).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    chars = sum(map(len, texts))
    splitters = {"regex (before)": old_split, "split_sentences": split_sentences}
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="en", clean=False)
        splitters["pysbd"] = lambda t: [s.strip() for s in segmenter.segment(t) if s.strip()]
    except ImportError:
        print("pysbd is not installed: compared with the old regex only", file=sys.stderr)
    results = {}
    print(f"{len(texts)} passages, {chars:,} characters ({args.corpus})")
    print(f"{'splitter':<18} {'sentences':>9} {'ms':>9} {'kchar/s':>9}")
    for name, split in splitters.items():
        results[name], seconds = timed(split, texts)
        print(f"{name:<18} {sum(map(len, results[name])):>9} {seconds * 1000:>9.1f} {chars / seconds / 1000:>9.0f}")
    if "pysbd" not in results:
        return
    reference = [ends(t, s) for t, s in zip(texts, results["pysbd"])]
    for name in ("regex (before)", "split_sentences"):
        mine = [ends(t, s) for t, s in zip(texts, results[name])]
        both = sum(len(a & b) for a, b in zip(mine, reference))
        print(f"{name:<18} vs pysbd: recall {both / max(1, sum(map(len, reference))):.3f}, "
              f"precision {both / max(1, sum(map(len, mine))):.3f}")
    shown = 0
    for text, ours, theirs in zip(texts, results["split_sentences"], results["pysbd"]):
        a, b = ends(text, ours), ends(text, theirs)
        for pos in sorted(a ^ b):
            if shown >= args.show:
                return
            who = "only ours" if pos in a else "only pysbd"
            print(f"  {who:<10} ...{text[max(0, pos - 50):pos]!r} | {text[pos:pos + 30]!r}")
            shown += 1


if __name__ == "__main__":
    main()
