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


# Words too common to show that a claim rests on its quote.
_STOP = frozenset("""the and for was were are is its his her their this that with from which who whom
whose what when where also has had have not but than then there these those into onto over under
about after before been being by on in of to at as an or it he she they them we you our one""".split())
_WORD = re.compile(r"\w+")
# A claim is grounded when at least this share of its content words appear in its quote.
GROUNDED_SHARE = 0.5


def same_sentence(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` are one sentence, spaces, case and a closing full stop aside."""
    def fold(text: str) -> str:
        return " ".join(text.split()).rstrip(".").casefold()
    return fold(a) == fold(b)


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP}


def grounded(claim: str, quote: str, share: float = GROUNDED_SHARE) -> bool:
    """Whether the claim's wording rests on its quote: at least ``share`` of its content words are there.

    A small model's restatement may name things the quote never mentions (a worked example's
    names, a guess); such a claim is not the quote's claim.
    """
    words = content_words(claim)
    if not words:
        return False
    return len(words & content_words(quote)) >= share * len(words)


# What a model writes when the evidence does not give an answer.
_NO_ANSWER = re.compile(r"^(unknown|none|n/?a|not (given|known|stated|found|mentioned)|unclear|"
                        r"no answer|cannot (be )?(determined|answered)|insufficient)\b")
_YES_NO = re.compile(r"^(yes|no)\b")


def word_found(word: str, basis: set[str]) -> bool:
    if word in basis:
        return True
    # Forms of one word ("Norway" for "Norwegian", "French" for "France") share a stem; a
    # number must be there as written.
    if len(word) >= 4 and not word.isdigit():
        return any(len(b) >= 4 and b[:4] == word[:4] for b in basis)
    return False


def answer_rests_on(answer: str, text: str) -> bool:
    """Whether a short answer's content words (at least half, word forms forgiven) are in
    ``text``; yes, no and empty answers rest on no text in particular."""
    low = " ".join(str(answer).split()).lower()
    if not low or _YES_NO.match(low):
        return False
    words = {w for w in _WORD.findall(low) if w not in _STOP and (len(w) >= 2 or w.isdigit())}
    if not words:
        return False
    basis = set(_WORD.findall(text.lower()))
    return sum(1 for w in words if word_found(w, basis)) >= 0.5 * len(words)


def short_answer_or_empty(answer: str, evidence: str | None, question: str = "") -> str:
    """``answer`` (white space folded, trailing period dropped) when it is an answer that rests
    on ``evidence``; "" when it says there is none, or names things the evidence does not.
    ``evidence`` None (an answer from memory, read from nothing) skips only the resting check:
    every check of the answer's form still applies, so each eval mode is scored on the terms
    the pipeline's answer is.

    Yes and no rest on the evidence by their nature (the question says what they answer) but
    answer only a yes/no question; any other short answer needs at least half of its content words in the evidence, word forms
    forgiven.
    """
    from .prompts import asked_form, echoes_example, is_yes_no

    text = " ".join(str(answer).split()).strip().strip("\"'").rstrip(".").strip()
    if question:
        text = answer_part(text, question)
    low = text.lower()
    if not text or _NO_ANSWER.match(low) or echoes_example(text, evidence or "", question):
        return ""
    if _YES_NO.match(low):
        # Yes or no answers only a question that asks for it ("yes" to "Who ...?" is no answer).
        return text if not question or is_yes_no(question) else ""
    if restates(text, question) or not has_asked_form(text, asked_form(question) if question else "phrase"):
        return ""
    return text if evidence is None or answer_rests_on(text, evidence) else ""


# A sentence for an answer: this many words or more.
_SENTENCE_WORDS = 5
# The words before "is" say the question again when at least this share of them are its own.
_LEAD_SHARE = 0.5
_COPULA = re.compile(r"^(?P<lead>.+?)\s+(?:is|was|are|were)\s+(?P<rest>.+)$", re.IGNORECASE)


def answer_part(answer: str, question: str) -> str:
    """The part of a sentence answer that answers: "The current opposition leader in Uganda is
    Winnie Kiiza" -> "Winnie Kiiza" (what precedes "is" says the question again), and for a
    question asking when, the date in "The country left the British Empire in 1948" -> "1948".
    A short answer, or one that does not say the question first, is kept as it is."""
    from .prompts import asked_form

    if len(answer.split()) < _SENTENCE_WORDS:
        return answer
    match = _COPULA.match(answer)
    if match and not restates(match.group("rest"), question):
        lead = content_words(match.group("lead"))
        asked = content_words(question)
        if len(lead) >= 2 and sum(1 for w in lead if word_found(w, asked)) >= _LEAD_SHARE * len(lead):
            return match.group("rest").strip()
    if asked_form(question) == "date":
        dates = _DATE_PHRASE.findall(answer)
        if len(dates) == 1:
            return dates[0]
    return answer


_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()
_DATE_WORDS = re.compile(r"\d|\b(" + "|".join(_MONTHS) + r"|century|centuries|decade|bc|bce|ad)\b")
_DATE_ONLY = frozenset(_MONTHS) | {"century", "centuries", "decade", "bc", "bce", "ad", "ce", "in", "on", "of",
                                   "the", "year", "early", "late", "mid"}
_DATE_PHRASE = re.compile(r"\b(?:(?:\d{1,2} )?(?:january|february|march|april|may|june|july|august|september|"
                          r"october|november|december)(?: \d{1,2},?)? )?\d{3,4}\b", re.IGNORECASE)
_ORDINAL = re.compile(r"\d+(s|st|nd|rd|th)?")
_NUMBER_WORDS = re.compile(r"\d|\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                           r"twenty|thirty|forty|fifty|hundred|thousand|million|billion|trillion|dozen|"
                           r"half|none)\b")


def has_asked_form(answer: str, form: str) -> bool:
    """Whether a short answer can be of the kind asked for: a date names a year, day, month or
    century; a number has digits or a number word; a yes/no question takes yes or no. A place
    given for "When ...?" is no answer."""
    low = answer.lower()
    if form == "yes_no":
        return bool(_YES_NO.match(low))
    if form == "date":
        return bool(_DATE_WORDS.search(low))
    if form == "number":
        return bool(_NUMBER_WORDS.search(low))
    if form == "entity":
        # A person or place has a name: a bare year or date ("1886" for "Where ...?") is none.
        return any(not _ORDINAL.fullmatch(w) and w not in _DATE_ONLY for w in _WORD.findall(low))
    return True


# An answer of at least this many content words, nearly all of them the question's own, is
# the question said again ("The first president of the association which published ...").
_RESTATED_WORDS = 3
_RESTATED_SHARE = 0.8


def restates(answer: str, question: str) -> bool:
    """Whether ``answer`` only says the question again. A short answer made of the question's
    words is fine ("Is the Seine or the Thames longer?" answered "the Seine")."""
    words = content_words(answer)
    if len(words) < _RESTATED_WORDS or not question:
        return False
    asked = content_words(question)
    return sum(1 for w in words if word_found(w, asked)) >= _RESTATED_SHARE * len(words)



# A name: a capitalised word (or an acronym such as "U.S.") other than a month or weekday.
_NAME = re.compile(r"\b[A-Z][\w'’.-]*\w|\b[A-Z]\b")
_SENTENCE_START = re.compile(r"(?:^|[.!?;:]\s+|\n)[\W_]*(\w+)")
_NOT_NAMES = _STOP | frozenset(_MONTHS) | frozenset(
    "monday tuesday wednesday thursday friday saturday sunday".split())


def names(text: str, openers: bool = False, acronyms: bool = True) -> set[str]:
    """The names in ``text``: capitalised words, lower-cased, dots dropped ("U.S." -> "us"),
    and the initials of each run of two or more ("American Psychological Association" ->
    "apa", unless not ``acronyms``), so an acronym matches its long form. A sentence's first
    word is capitalised whatever it is, so it counts only with ``openers``."""
    found: set[str] = set()
    for run in name_runs(text, openers):
        found.update(run)
        if acronyms and len(run) >= 2:
            found.add(_initials(run))
    return found


def _initials(run: list[str]) -> str:
    return "".join(w[0] for w in run)


def name_runs(text: str, openers: bool = False) -> list[list[str]]:
    """The runs of capitalised words in ``text`` (words as ``names`` gives them): the words
    that follow one another with only spaces between, "Hans Henrik Stoermann-Naess"."""
    first = set() if openers else {m.start(1) for m in _SENTENCE_START.finditer(text)}
    runs: list[list[str]] = []
    run: list[str] = []
    last_end = -1
    for m in _NAME.finditer(text):
        word = m.group(0).replace(".", "").lower()
        if m.start() in first or word in _NOT_NAMES:
            continue
        if run and text[last_end:m.start()].strip():
            runs.append(run)
            run = []
        run.append(word)
        last_end = m.end()
    if run:
        runs.append(run)
    return runs


# Capitalised words that name a kind of thing, not a thing: "University" in "University of
# Tehran" and in "Rutgers University" does not put the two on one subject.
GENERIC_NAMES = frozenset("""university college school institute academy department science sciences
arts art association society company corporation group organisation organization committee council
club team league party church museum library hospital county city state states province region
district river lake mountain mount island national international royal new north south east west
northern southern eastern western upper lower great greater saint st fort port""".split())


def name_found(name: str, basis: set[str]) -> bool:
    if name in GENERIC_NAMES:
        return False
    return name in basis or (len(name) >= 4 and any(len(b) >= 4 and b[:4] == name[:4] for b in basis))


def off_subject(claim: str, chain: str, around: str = "") -> bool:
    """Whether a claim is about other named things than the research: the claim (its text and
    quotes) names something, the research (``chain``: the question, its sub-questions and their
    answers) names something, and no name of the claim or of the text ``around`` its quotes is
    among the research's, word forms forgiven ("Norwegian" for "Norway"). "Blokker was born in
    Amsterdam" is off a question about Ibsen's Brand; a claim that names nothing is never off
    subject, and one whose quote sits next to a sentence naming the research's subject is on it."""
    basis = names(chain, openers=True)
    if not names(claim) or not basis:
        return False
    leading = _leading_names(chain)
    for run in name_runs(f"{claim}\n{around}", openers=True):
        if len(run) >= 2 and name_found(_initials(run), basis):
            return False
        for at, word in enumerate(run):
            if name_found(word, basis) and not _other_bearer(word, run[at + 1:], basis, leading):
                return False
    return True


def _leading_names(text: str) -> dict[str, set[str]]:
    """Words of ``text`` that stand only before another name, as a given name does ("henrik"
    in "Henrik Ibsen"), each with the last words of the names it leads ({"ibsen"}); not when
    that last word names a kind of thing ("Hampshire County"), nor a word that also stands
    alone or last somewhere in ``text``."""
    leading: dict[str, set[str]] = {}
    alone: set[str] = set()
    for run in name_runs(text, openers=True):
        if len(run) < 2 or run[-1] in GENERIC_NAMES:
            alone.update(run)
            continue
        alone.add(run[-1])
        for word in run[:-1]:
            leading.setdefault(word, set()).add(run[-1])
    return {word: lasts for word, lasts in leading.items() if word not in alone}


def _other_bearer(word: str, after: list[str], basis: set[str], leading: dict[str, set[str]]) -> bool:
    """Whether ``word``, followed in its own name by ``after``, names someone else than the
    research's bearer of it: both use it before a last name, and none of the names after it
    is the research's last name ("Hans Henrik Stoermann-Naess" against "Henrik Ibsen",
    "Steven Amsterdam" against "Steven Blankaart"). A word the research also uses alone or
    last is never another's."""
    if not after or after[-1] in GENERIC_NAMES or name_found(word, basis - leading.keys()):
        return False
    lasts = set().union(*(lasts for lead, lasts in leading.items() if name_found(word, {lead})))
    return not any(name_found(later, lasts) for later in after)


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
# Leader of Opposition ... is Hon. Winnie Kiiza", two sentences after the quoted "The Leader
# of Opposition (LOP) in Uganda is the title bestowed upon ..."). The one-call baseline reads
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


def names_unsupported(claim: str, source_text: str) -> bool:
    """Whether the claim names someone or something that its quote's surroundings in
    ``source_text`` (the quote and the text around it, see ``quote_context``) never name,
    word forms forgiven: "Henrik Ibsen was born in Amsterdam." quoting "Blokker was born in
    Amsterdam" puts the sub-question's subject on another's fact. Kinds of thing
    ("University") and initials do not count."""
    basis = names(source_text, openers=True)
    own = {n for n in names(claim, openers=True, acronyms=False) if len(n) >= 2 and n not in GENERIC_NAMES}
    return any(not name_found(n, basis) for n in own)
