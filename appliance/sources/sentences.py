"""Sentence splitting, one rule set for the corpus chunker and for the sentences a model may
quote.

A sentence end is ``.``, ``!`` or ``?`` (closing quotes and brackets may follow) and then white
space. Most full stops that are not sentence ends are told apart by the word before them and
the word after: a title or reference abbreviation ("Dr.", "St.", "Fig.") is always followed by
more of the same sentence; an initial ("J.") is part of a name; a dotted acronym ("U.S.",
"e.g.", "p.m.") or "etc." ends a sentence only when a word that usually starts one comes next;
and a sentence does not start with a lower-case letter. Decimals ("3.5") have no space after
the point, so they are never a candidate.

When in doubt the text is not cut: a sentence too long only makes a longer quote, a sentence
cut in two makes a quote that cannot be made. Pieces are cut only at white space, so each is
the text's own characters.

Measured against the regex it replaces and pysbd on the musique-dev corpus (scripts/bench_sentences.py).
"""

from __future__ import annotations

import re

# A candidate end: the punctuation, what may close around it, and the white space after it.
_CANDIDATE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+")

# Followed by more of the same sentence: titles, and words that introduce a name.
_ALWAYS_CONTINUES = frozenset("""
mr mrs ms messrs mme mlle dr prof st mt ft gen col lt sgt capt cmdr adm maj brig rev hon gov
sen rep pres supt insp fr sr jr sra srta vs v cf approx ca ave blvd rd ste pron
jan feb mar apr jun jul aug sep sept oct nov dec
""".split())

# Followed by more of the same sentence when a number comes next ("No. 5", "c. 1420"); they
# are also ordinary words that may end one ("the answer was no.").
_BEFORE_A_NUMBER = frozenset("no nos fig figs vol vols ch chap sec art op p pp para c ed eds pl".split())

# Abbreviations that often end a sentence too: a cut only before a usual sentence start.
_SOMETIMES_ENDS = frozenset("etc inc ltd co corp bros al esq".split())

# Words that usually start a sentence: after an ambiguous abbreviation they make it an end.
_STARTERS = frozenset("""
the a an he she it they we i you this that these those there here his her its their our my
but and so yet or nor however in on at by for from with after before when while as since
although though if once today later then thus also meanwhile during between despite many
most some all both each one two three several no not
""".split())

_WORD_BEFORE = re.compile(r"(\S+?)[.!?]*$")
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")
_LEADING = "\"'\u201c\u2018([{"


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` in order, each stripped; white space inside is left as it is."""
    out: list[str] = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        if _is_end(text, match):
            piece = text[start:match.end()].strip()
            if piece:
                out.append(piece)
            start = match.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def _is_end(text: str, match: re.Match) -> bool:
    following = _next_word(text, match.end())
    if not following:
        return True  # white space to the end of the text
    first = following[0]
    if first.islower():
        return False  # "Yahoo! was", "5 p.m. on Monday", "e.g. penguins"
    if "." not in match.group(0):
        return True  # "!" or "?" before a word that may start a sentence
    word = _word_before(text, match.start())
    low = word.lower()
    if low in _ALWAYS_CONTINUES or (low in _BEFORE_A_NUMBER and first.isdigit()):
        return False
    if len(word) == 1 and word.isalpha() and word.isupper():
        return False  # an initial: "J. R. R. Tolkien"
    if low in _SOMETIMES_ENDS or _DOTTED.match(word):
        return following.strip(_LEADING).lower() in _STARTERS
    return True


def _word_before(text: str, end: int) -> str:
    """The word ending at ``end`` (where the punctuation starts), without opening brackets."""
    begin = end
    while begin > 0 and not text[begin - 1].isspace():
        begin -= 1
    match = _WORD_BEFORE.match(text[begin:end])
    word = match.group(1) if match else ""
    return word.lstrip(_LEADING)


def _next_word(text: str, begin: int) -> str:
    end = begin
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[begin:end].rstrip(".,;:!?\"'\u201d\u2019)]")
