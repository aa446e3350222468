"""Scores: SQuAD-style exact match and token F1 against the answer and its aliases,
supporting-passage recall and precision, citation faithfulness, and bootstrap intervals."""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from statistics import mean

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = str(text or "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: list[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds if normalize_answer(g)))


def _f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: list[str]) -> float:
    """Best F1 over the gold answer and its aliases (0 when no gold is given)."""
    return max((_f1(prediction, g) for g in golds if g is not None and str(g).strip()), default=0.0)


def contains_answer(prediction: str, golds: list[str]) -> float:
    """1 when a normalised gold answer occurs inside the normalised prediction (long answers)."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(f" {normalize_answer(g)} " in pred for g in golds if normalize_answer(g)))


def answer_read(text: str | None, golds: list[str]) -> float | None:
    """1 when a normalised gold answer (or alias) occurs, as whole words, in ``text``: the
    text an answer call read (None when it read none, closed-book). Where it is 1 and the
    answer is still wrong, the reading lost it; where it is 0, the search never found it."""
    return None if text is None else contains_answer(text, golds)


def passage_recall(cited: list[str], supporting: list[str]) -> float | None:
    """Share of supporting passages among the cited ones (None when there is nothing to find)."""
    gold = set(supporting)
    if not gold:
        return None
    return len(gold & set(cited)) / len(gold)


def passage_precision(cited: list[str], supporting: list[str]) -> float | None:
    """Share of cited passages that are supporting ones (None when nothing was cited)."""
    cited_set = set(cited)
    if not cited_set:
        return None
    return len(cited_set & set(supporting)) / len(cited_set)


def bootstrap_ci(values: list[float], rounds: int = 1000, seed: int = 7,
                 level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (None for no values)."""
    if not values:
        return None
    if len(values) == 1:
        return (values[0], values[0])
    rng = random.Random(seed)
    n = len(values)
    means = sorted(mean(rng.choice(values) for _ in range(n)) for _ in range(rounds))
    lo = means[int((1 - level) / 2 * rounds)]
    hi = means[min(rounds - 1, int((1 + level) / 2 * rounds) - 1)]
    return (lo, hi)


def summarize(values: list[float | None]) -> dict:
    """Mean and 95% interval over the defined values; n says how many there were."""
    defined = [float(v) for v in values if v is not None]
    ci = bootstrap_ci(defined)
    return {"mean": mean(defined) if defined else None, "ci": ci, "n": len(defined)}
