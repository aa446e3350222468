"""Quote anchoring: a model's quote counts only where the source text holds it.

Matching forgives case, whitespace and typographic quote/dash differences, and small edits
(similarity >= threshold over the best window). What is kept is the matching span of the
source text itself, so every quote in a report is verbatim by construction.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from ..sources.ingest import split_at_words
from ..sources.sentences import split_sentences

_FOLD = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u00a0": " ",
})

MIN_QUOTE_CHARS = 12

# Quotable sentences: at least this long (shorter lines are titles and fragments), at most
# MAX_SENTENCE_CHARS (longer ones are cut at a word), at most MAX_SENTENCES per source.
MIN_SENTENCE_CHARS = 20
MAX_SENTENCE_CHARS = 300
MAX_SENTENCES = 80


# Characters around which spacing is not significant: "self - actualizing" and
# "self-actualizing" are the same words, as are "( text )" and "(text)".
_TIGHT = set("-'\"(),.;:!?/")


def normalise(text: str) -> tuple[str, list[int]]:
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
    q_norm, _ = normalise(_trim_quote(quote))
    if len(q_norm) < MIN_QUOTE_CHARS or not text:
        return None
    t_norm, where = normalise(text)
    start = t_norm.find(q_norm)
    if start >= 0:
        return _span(text, where, start, start + len(q_norm))
    best = _best_window(q_norm, t_norm, threshold)
    if best is None:
        return None
    return _span(text, where, *best)


def _span(text: str, where: list[int], start: int, end: int) -> str:
    last = where[end - 1]
    # A TeX-style quote (`` or '') folds to one character mapped to its first: keep both, or
    # the span would end in half of it ("the Continent '" for "the Continent ''").
    stop = last + 2 if text[last: last + 2] in ("``", "''") else last + 1
    return text[where[start]: stop].strip()


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


def quotable_sentences(text: str, limit: int = MAX_SENTENCES) -> tuple[str, ...]:
    """The sentences of ``text`` a model may quote, in order, without repeats, white space folded.

    Each is a verbatim piece of the text (lines and sentences, long ones cut at a word), so a
    grammar that only admits these makes every quote verbatim by construction.
    """
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        for sentence in split_sentences(line):
            for piece in split_at_words(" ".join(sentence.split()), MAX_SENTENCE_CHARS):
                if len(piece) < MIN_SENTENCE_CHARS or piece in seen or "<|" in piece:
                    continue  # too short, a repeat, or a chat-template token a model must not write
                seen.add(piece)
                out.append(piece)
                if len(out) >= limit:
                    return tuple(out)
    return tuple(out)



# The text around a quoted sentence that the names checks read: a sentence often names its
# subject only in its neighbours ("It was dissolved in 1995." after the sentence naming "it").
CONTEXT_CHARS = 240
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s+")


def quote_context(text: str, quote: str, chars: int = CONTEXT_CHARS) -> str:
    """The quote with up to ``chars`` characters of its source on each side, cut where a
    sentence ends (else at a space); "" when the quote is not in ``text`` as written."""
    at = text.find(quote)
    if at < 0:
        return ""
    start, end = _around(text, at, at + len(quote), chars)
    return " ".join(text[start:end].split())


def _around(text: str, at: int, stop: int, chars: int) -> tuple[int, int]:
    """The span of ``text[at:stop]`` widened by up to ``chars`` on each side, to sentence ends."""
    start, end = max(0, at - chars), min(len(text), stop + chars)
    if start > 0:
        cuts = [m.end() for m in _SENTENCE_END.finditer(text, start, at)]
        space = text.find(" ", start, at)
        start = cuts[0] if cuts else (space + 1 if space >= 0 else at)
    if end < len(text):
        cuts = [m.start() + 1 for m in _SENTENCE_END.finditer(text, stop, end)]
        space = text.rfind(" ", stop, end)
        end = cuts[-1] if cuts else (space if space >= 0 else stop)
    return start, end


def passage_around(text: str, quotes: list[str], chars: int = CONTEXT_CHARS) -> str:
    """The quoted sentences of one source with the text around each (see ``quote_context``),
    in the source's order, overlapping stretches joined and others separated by "...": what
    a reader of the quotes needs to see of their source, each sentence once. Quotes not in
    ``text`` as written are left out."""
    spans: list[tuple[int, int]] = []
    for quote in quotes:
        at = text.find(quote)
        if at >= 0:
            spans.append(_around(text, at, at + len(quote), chars))
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return " ... ".join(" ".join(text[start:end].split()) for start, end in merged)


# The text around each quoted sentence that an answer reads (a node's and the run's): as
# wide as a short passage, so the sentence after the one quoted is read whole ("The current
# chair ... is Ida Brandt", two sentences after the quoted "The chair of the Velka Harbour Board
# is the title given to ..."). The one-call baseline reads
# each retrieved passage's first 700 characters.
READING_CHARS = 480


def source_passages(quotes: dict[str, list[str]], texts: dict[str, str], total: int,
                    quotes_alone: bool, chars: int = READING_CHARS) -> list[tuple[str, str]]:
    """(url, passage) per source of ``quotes`` (url -> its quotes, in reading order): the
    ``passage_around`` its quotes (``chars`` on each side), about ``total`` characters in all.
    A source whose text is not at hand or whose passage would pass ``total`` gives its quotes
    alone when ``quotes_alone``, else nothing."""
    out: list[tuple[str, str]] = []
    used = 0
    for url, mine in quotes.items():
        passage = passage_around(texts.get(url, ""), mine, chars) if mine else ""
        if not passage or used + len(passage) > total:
            if not (quotes_alone and mine):
                continue
            passage = " ".join(mine)
        used += len(passage)
        out.append((url, passage))
    return out


# Characters of each passage a reading step shows (the iterative baseline's and the question
# node's next-search step alike).
PASSAGE_CHARS = 700


def passages_text(sources, chars: int = PASSAGE_CHARS) -> str:
    """Passages (anything with a ``title`` and a ``text``) numbered from 1, each as its title
    and its first ``chars`` characters: what a step of retrieve-read-retrieve reads."""
    return "\n\n".join(f"[{i}] {s.title}: {s.text[:chars]}" for i, s in enumerate(sources, start=1))
