"""Quote anchoring: a model's quote counts only where the source text holds it.

Matching forgives case, whitespace and typographic quote/dash differences, and small edits
(similarity >= threshold over the best window). What is kept is the matching span of the
source text itself, so every quote in a report is verbatim by construction.
"""

from __future__ import annotations

from difflib import SequenceMatcher

_FOLD = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u00a0": " ",
})

MIN_QUOTE_CHARS = 12


# Characters around which spacing is not significant: "self - actualizing" and
# "self-actualizing" are the same words, as are "( text )" and "(text)".
_TIGHT = set("-'\"(),.;:!?/")


def _normalise(text: str) -> tuple[str, list[int]]:
    """Folded text plus, for each of its characters, the index of its source character.

    Folds case, typographic quotes and dashes, TeX-style quotes (`` and ''), runs of white
    space, and white space next to punctuation.
    """
    text = text.replace("``", "\"\u200b").replace("''", "\"\u200b")
    out: list[str] = []
    where: list[int] = []
    pending_space = False
    for i, ch in enumerate(text):
        if ch == "\u200b":
            continue  # the second character of a folded `` or ''
        ch = ch.translate(_FOLD).lower()
        if ch.isspace():
            pending_space = bool(out)
            continue
        if pending_space and ch not in _TIGHT and out[-1] not in _TIGHT:
            out.append(" ")
            where.append(i - 1)
        pending_space = False
        out.append(ch)
        where.append(i)
    return "".join(out), where


def _trim_quote(quote: str) -> str:
    return quote.strip().strip("\"'\u201c\u201d\u2018\u2019").strip().rstrip(".").strip()


def find_quote(quote: str, text: str, threshold: float = 0.9) -> str | None:
    """Return the span of ``text`` that ``quote`` matches, or None when it is not there."""
    q_norm, _ = _normalise(_trim_quote(quote))
    if len(q_norm) < MIN_QUOTE_CHARS or not text:
        return None
    t_norm, where = _normalise(text)
    start = t_norm.find(q_norm)
    if start >= 0:
        return _span(text, where, start, start + len(q_norm))
    best = _best_window(q_norm, t_norm, threshold)
    if best is None:
        return None
    return _span(text, where, *best)


def _span(text: str, where: list[int], start: int, end: int) -> str:
    return text[where[start]: where[end - 1] + 1].strip()


def _best_window(q: str, t: str, threshold: float) -> tuple[int, int] | None:
    """Best-scoring window of ``t`` about as long as ``q``, anchored on shared blocks."""
    if len(t) < len(q) * threshold:
        return None
    matcher = SequenceMatcher(None, t, q, autojunk=False)
    anchors = {max(0, block.a - block.b) for block in matcher.get_matching_blocks() if block.size >= 6}
    best: tuple[float, int, int] | None = None
    for anchor in sorted(anchors):
        for length in (len(q), len(q) - 2, len(q) + 2):
            for shift in (-3, 0, 3):
                start = max(0, anchor + shift)
                end = min(len(t), start + length)
                if end <= start:
                    continue
                score = SequenceMatcher(None, t[start:end], q, autojunk=False).ratio()
                if best is None or score > best[0]:
                    best = (score, start, end)
    if best is None or best[0] < threshold:
        return None
    score, start, end = best
    # Widen to whole words so the kept span does not begin or end inside a word.
    while start > 0 and t[start - 1].isalnum() and t[start].isalnum():
        start -= 1
    while end < len(t) and t[end - 1].isalnum() and t[end].isalnum():
        end += 1
    return start, end
