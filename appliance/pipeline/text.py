"""Text utilities the checks share: content words, word forms, sentence sameness."""

from __future__ import annotations

import re

# Words too common to show that a claim rests on its quote.
STOP_WORDS = frozenset("""the and for was were are is its his her their this that with from which who whom
whose what when where also has had have not but than then there these those into onto over under
about after before been being by on in of to at as an or it he she they them we you our one""".split())
WORD = re.compile(r"\w+")
# A claim is grounded when at least this share of its content words appear in its quote.
GROUNDED_SHARE = 0.5


def same_sentence(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` are one sentence, spaces, case and a closing full stop aside."""
    def fold(text: str) -> str:
        return " ".join(text.split()).rstrip(".").casefold()
    return fold(a) == fold(b)


def content_words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if len(w) >= 3 and w not in STOP_WORDS}


def grounded(claim: str, quote: str, share: float = GROUNDED_SHARE) -> bool:
    """Whether the claim's wording rests on its quote: at least ``share`` of its content words are there.

    A small model's restatement may name things the quote never mentions (a worked example's
    names, a guess); such a claim is not the quote's claim.
    """
    words = content_words(claim)
    if not words:
        return False
    return len(words & content_words(quote)) >= share * len(words)



def word_found(word: str, basis: set[str]) -> bool:
    if word in basis:
        return True
    # Forms of one word ("Ruritania" for "Ruritanian", "French" for "France") share a stem; a
    # number must be there as written.
    if len(word) >= 4 and not word.isdigit():
        return any(len(b) >= 4 and b[:4] == word[:4] for b in basis)
    return False



MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()


def same_question(a: str, b: str) -> bool:
    """Whether two questions are one, case and spacing aside."""
    return " ".join(a.lower().split()) == " ".join(b.lower().split())
