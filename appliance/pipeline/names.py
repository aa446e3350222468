"""Names and subjects: what a text names, and whether a claim is about what the research names."""

from __future__ import annotations

import re

from .text import MONTHS, STOP_WORDS

# A name: a capitalised word (or an acronym such as "U.S.") other than a month or weekday.
_NAME = re.compile(r"\b[A-Z][\w'’.-]*\w|\b[A-Z]\b")
_SENTENCE_START = re.compile(r"(?:^|[.!?;:]\s+|\n)[\W_]*(\w+)")
_NOT_NAMES = STOP_WORDS | frozenset(MONTHS) | frozenset(
    "monday tuesday wednesday thursday friday saturday sunday".split())


def names(text: str, openers: bool = False, acronyms: bool = True) -> set[str]:
    """The names in ``text``: capitalised words, lower-cased, dots dropped ("U.S." -> "us"),
    and the initials of each run of two or more ("Velka Harbour Board" ->
    "vhb", unless not ``acronyms``), so an acronym matches its long form. A sentence's first
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
    that follow one another with only spaces between, "Jon Marta Lindqvist-Berg"."""
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
# Velka" and in "Ardmore University" does not put the two on one subject.
GENERIC_NAMES = frozenset("""university college school institute academy department science sciences
arts art association society company corporation group organisation organization committee council
club team league party church museum library hospital county city state states province region
district river lake mountain mount island national international royal new north south east west
northern southern eastern western upper lower great greater saint st fort port""".split())


def name_found(name: str, basis: set[str]) -> bool:
    if name in GENERIC_NAMES:
        return False
    return name in basis or (len(name) >= 4 and any(len(b) >= 4 and b[:4] == name[:4] for b in basis))


def query_names(query: str) -> set[str]:
    """The names a search query asks about: its names but the kinds of thing ("University")."""
    return {n for n in names(query) if n not in GENERIC_NAMES}


def names_named(asked: set[str], text: str) -> int:
    """How many of the names ``asked`` the text names (a sentence's first word counts here: a
    page's title and opening sentence start with its subject)."""
    basis = names(text, openers=True)
    return sum(1 for name in asked if name_found(name, basis))


def off_subject(claim: str, chain: str, around: str = "") -> bool:
    """Whether a claim is about other named things than the research: the claim (its text and
    quotes) names something, the research (``chain``: the question, its sub-questions and their
    answers) names something, and no name of the claim or of the text ``around`` its quotes is
    among the research's, word forms forgiven ("Ruritanian" for "Ruritania"). "Lindqvist was born
    in Ardmore" is off a question about Marta Olsen's first opera; a claim that names nothing is never off
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


def names_nothing(question: str) -> bool:
    """Check question-subject decides on this: whether the question names nothing (no
    capitalised word but its first): "Which river runs past the town with the oldest
    lighthouse?" Such a question gives no names of its own for a claim to be about, so the
    names a plan's sub-questions and answers bring decide its subject alone, and a plan gone
    astray ("Which town is it?" answered with some town) would put every claim read for the
    question itself off subject."""
    return not names(question)


def _leading_names(text: str) -> dict[str, set[str]]:
    """Words of ``text`` that stand only before another name, as a given name does ("marta"
    in "Marta Olsen"), each with the last words of the names it leads ({"olsen"}); not when
    that last word names a kind of thing ("Velka County"), nor a word that also stands
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
    is the research's last name ("Jon Marta Lindqvist" against "Marta Olsen",
    "Ida Ardmore" against "Ida Brandt"). A word the research also uses alone or
    last is never another's."""
    if not after or after[-1] in GENERIC_NAMES or name_found(word, basis - leading.keys()):
        return False
    lasts = set().union(*(lasts for lead, lasts in leading.items() if name_found(word, {lead})))
    return not any(name_found(later, lasts) for later in after)



def names_unsupported(claim: str, source_text: str) -> bool:
    """Whether the claim names someone or something that its quote's surroundings in
    ``source_text`` (the quote and the text around it, see ``anchor.quote_context``) never name,
    word forms forgiven: "Marta Olsen was born in Ardmore." quoting "Lindqvist was born in
    Ardmore" puts the sub-question's subject on another's fact. Kinds of thing
    ("University") and initials do not count."""
    basis = names(source_text, openers=True)
    own = {n for n in names(claim, openers=True, acronyms=False) if len(n) >= 2 and n not in GENERIC_NAMES}
    return any(not name_found(n, basis) for n in own)
