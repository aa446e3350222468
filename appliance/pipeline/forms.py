"""Question and answer forms: what a question asks for, and whether a short answer is one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .checks import ALL_ON, Switches
from .places import COUNTRIES, countries_named, named_by_demonym
from .text import MONTHS, STOP_WORDS, WORD, content_words, word_found

# What a model writes when the evidence does not give an answer.
_NO_ANSWER = re.compile(r"^(unknown|none|n/?a|not (given|known|stated|found|mentioned)|unclear|"
                        r"no answer|cannot (be )?(determined|answered)|insufficient)\b")
_YES_NO = re.compile(r"^(yes|no)\b")


def answer_rests_on(answer: str, text: str) -> bool:
    """Whether a short answer's content words (at least half, word forms forgiven) are in
    ``text``; yes, no and empty answers rest on no text in particular."""
    low = " ".join(str(answer).split()).lower()
    if not low or _YES_NO.match(low):
        return False
    words = {w for w in WORD.findall(low) if w not in STOP_WORDS and (len(w) >= 2 or w.isdigit())}
    if not words:
        return False
    basis = set(WORD.findall(text.lower()))
    if sum(1 for w in words if word_found(w, basis)) >= 0.5 * len(words):
        return True
    # A country rests on a text that names only its people ("Dutch" for "Netherlands").
    country = " ".join(str(answer).split()).rstrip(".")
    return country in COUNTRIES and named_by_demonym(country, text)


def says_no_answer(answer: str) -> bool:
    """Whether a short answer says there is none ("unknown", "not stated", "cannot be determined")."""
    return bool(_NO_ANSWER.match(answer.lower()))


def checked_answer(answer: str, evidence: str | None, question: str = "",
                   switches: Switches = ALL_ON) -> tuple[str, list[str]]:
    """The answer checks in order: ``answer`` (white space folded, quotes and trailing period
    dropped) and the ids of the checks that fired on it; "" when one of them
    drops it. ``evidence`` None (an answer from memory, read from nothing) skips only the
    resting check: every check of the answer's form still applies, so each eval mode is scored
    on the terms the pipeline's answer is.

    Yes and no rest on the evidence by their nature (the question says what they answer) but
    answer only a yes/no question; any other short answer needs at least half of its content
    words in the evidence, word forms forgiven.
    """
    fired: list[str] = []
    text = " ".join(str(answer).split()).strip().strip("\"'").rstrip(".").strip()
    if question and switches.on("answer-dates"):
        decided = dated_choice(question, evidence)
        if decided and decided.lower() != text.lower():
            fired.append("answer-dates")
            text = decided
    if not text:
        return "", fired
    form = asked_form(question) if question else "phrase"
    yes_no = bool(_YES_NO.match(text.lower()))
    for check_id, drops in (
            ("answer-none", lambda: says_no_answer(text)),
            ("example-echo", lambda: (echoes_example(text, evidence or "", question)
                                      or echoes_instruction(text, evidence or "", question))),
            ("answer-restates", lambda: not yes_no and restates(text, question)),
            # Yes or no answers only a question that asks for it ("yes" to "Who ...?" is no answer).
            ("answer-form", lambda: (not is_yes_no(question) if yes_no and question
                                     else not yes_no and not has_asked_form(text, form))),
            ("answer-rests", lambda: not yes_no and evidence is not None and not answer_rests_on(text, evidence))):
        if switches.on(check_id) and drops():
            return "", fired + [check_id]
    return text, fired


def short_answer_or_empty(answer: str, evidence: str | None, question: str = "",
                          switches: Switches = ALL_ON) -> str:
    """``checked_answer``'s answer alone: the answer, or "" when a check dropped it."""
    return checked_answer(answer, evidence, question, switches)[0]


_DATE_WORDS = re.compile(r"\d|\b(" + "|".join(MONTHS) + r"|century|centuries|decade|bc|bce|ad)\b")
_DATE_ONLY = frozenset(MONTHS) | {"century", "centuries", "decade", "bc", "bce", "ad", "ce", "in", "on", "of",
                                   "the", "year", "early", "late", "mid"}
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
        return any(not _ORDINAL.fullmatch(w) and w not in _DATE_ONLY for w in WORD.findall(low))
    return True


# An answer of at least this many content words, nearly all of them the question's own, is
# the question said again ("The first president of the association which published ...").
_RESTATED_WORDS = 3
_RESTATED_SHARE = 0.8


def restates(answer: str, question: str) -> bool:
    """Whether ``answer`` only says the question again. A short answer made of the question's
    words is fine ("Is the Velka or the Ard longer?" answered "the Velka")."""
    words = content_words(answer)
    if len(words) < _RESTATED_WORDS or not question:
        return False
    asked = content_words(question)
    return sum(1 for w in words if word_found(w, asked)) >= _RESTATED_SHARE * len(words)




# A question that opens with one of these asks for yes or no ("Are both ... directors?").
_YES_NO_OPENERS = frozenset("""is are was were am do does did can could will would shall should
has have had may might must""".split())


def is_yes_no(question: str) -> bool:
    """Whether ``question`` asks for yes or no: it opens with an auxiliary verb and offers no
    choice ("Is X or Y older?" asks for a name)."""
    words = question.strip().lower().split()
    return bool(words) and words[0] in _YES_NO_OPENERS and " or " not in f" {question.lower()} "


# "When ...?", "What year ...?", and a question that ends asking when ("... was started when?").
_DATE_ASKED = re.compile(r"^\s*when\b|\b(what|which) (year|date|decade|century)\b|\bwhen\s*\??\s*$",
                         re.IGNORECASE)
_ENTITY_ASKED = re.compile(r"^\s*(who|whom|whose|where)\b|^\s*(in|from|to|of|at) (which|what) "
                           r"(country|city|state|county|town|province|region|continent|place)\b", re.IGNORECASE)
# "In which country ...?", "What county ...?": the kind of place or body asked for, by name.
_KIND_ASKED = re.compile(r"^\s*(?:(?:in|from|to|of|at|for|on) )?(?:which|what) (country|nation|city|state|county|"
                         r"town|village|province|region|continent|island|river|district|borough)\b", re.IGNORECASE)
# "What is the population of ...?", "What was the total debt of ...?": an amount asked by its
# name, the name followed by what it is of (a "price war between ..." is no amount).
_AMOUNT_NOUNS = (r"population|debt|cost|price|budget|revenue|salary|income|attendance|capacity|"
                 r"height|length|weight|distance|elevation|altitude|depth|speed|temperature")
_NUMBER_ASKED = re.compile(r"^\s*how (many|much|long|old|far|tall|high|big|large|deep|wide)\b|"
                           r"\bwhat (percentage|percent|proportion|number|amount)\b|"
                           rf"\bwhat(?:'s| is| was| are| were) (?:the |its |their )?(?:[a-z]+ )?(?:{_AMOUNT_NOUNS})"
                           r"(?: [a-z]+)?(?: of| for| in| at| on| by|\s*\?|\s*$)",
                           re.IGNORECASE)


def asked_form(question: str) -> str:
    """What kind of answer ``question`` asks for: "yes_no", "date" ("When ...?", "What year
    ...?", "... was started when?"), "number" ("How many ...?", "What percentage ...?", "What
    is the population of ...?"), "entity" (a person or place: "Who ...?", "Where ...?", "In
    which country ...?") or "phrase" (any other short phrase). "Who was president when ...?" asks for a name: only a
    leading or closing "when" asks for a date."""
    if is_yes_no(question):
        return "yes_no"
    if _DATE_ASKED.search(question):
        return "date"
    if _NUMBER_ASKED.search(question):
        return "number"
    if _ENTITY_ASKED.search(question):
        return "entity"
    return "phrase"


def asked_kind(question: str) -> str:
    """The kind of named thing a question opens by asking for ("country" for "In which
    country is Port Ardmore?"), or "". Told only "the shortest phrase", a small model gives the
    city or province its evidence names for a country."""
    match = _KIND_ASKED.search(question)
    return match.group(1).lower() if match else ""



def echoes_example(text: str, *inputs: str) -> bool:
    """True when ``text`` names something from the prompts' worked examples
    (``prompts.EXAMPLE_MARKERS``) that none of ``inputs`` has: small models copy examples."""
    from .prompts import EXAMPLE_MARKERS

    low = text.lower()
    given = " ".join(inputs).lower()
    return any(marker in low and marker not in given for marker in EXAMPLE_MARKERS)


# An answer of at least this many content words, each of them a word of the answer
# instruction and not all of them in the question or evidence, is the instruction said back.
_ECHOED_WORDS = 3


def echoes_instruction(text: str, *inputs: str) -> bool:
    """True when a short answer is made of the answer instruction's own words
    (``prompts.ANSWER_INSTRUCTION_WORDS``): "The name or date asked for" is the prompt said
    back, not an answer. Words the question or evidence also has do not count as echoed."""
    from .prompts import ANSWER_INSTRUCTION_WORDS

    words = content_words(text)
    if len(words) < _ECHOED_WORDS or not words <= ANSWER_INSTRUCTION_WORDS:
        return False
    return not words <= content_words(" ".join(inputs))


# A name as a question writes it: capitalised words (or numbers), with the small words that
# join a name's parts ("Bank of Ruritania", "Ida van Brandt", "The Velka Times").
_NAME_WORD = r"[A-Z0-9][\w'’.\-&]*"
_JOINER = r"(?:of|the|de|da|di|del|von|van|du|la|le|y|al|el|on|upon|in)"
_NAME_SPAN = rf"{_NAME_WORD}(?:\s+(?:{_JOINER}\s+)*{_NAME_WORD})*"
# The second name may follow a few small words ("... or the founding of Y").
_PAIR = re.compile(rf"(?P<a>{_NAME_SPAN})\s*,?\s+(?P<op>or|and|&)\s+(?:[a-z]+\s+){{0,3}}?(?P<b>{_NAME_SPAN})")
# "Is X older than Y?", "Was X founded earlier than the Y?"
_THAN = re.compile(rf"(?P<a>{_NAME_SPAN})\s+(?:[a-z]+\s+){{1,3}}than\s+(?:[a-z]+\s+){{0,2}}?(?P<b>{_NAME_SPAN})")
# A choice between the two ("..., X or Y?") or a question about both ("Are X and Y both ...?",
# "Both X and Y ...", "... X and Y ... the same ...?", "What do X and Y have in common?").
_BOTH = re.compile(r"\b(both|same|in common|each|either|neither|between|respective|respectively)\b",
                   re.IGNORECASE)
# A question about what two things share, not a choice of one of them.
_SHARED = re.compile(r"\b(both|same|in common|each|either|neither|respective|respectively|together|share|shared)\b",
                     re.IGNORECASE)
# Capitalised words a question opens with or that are no names ("Which", "Are", ...).
_QUESTION_OPENERS = frozenset("""which who what whose when where why how is are was were am do does did
can could will would shall should has have had may might must both between""".split())


def compared(question: str) -> list[str]:
    """The two things a question compares, as it names them, or [] when it compares nothing:
    a choice between two named things ("Which opened first, the Velka Bridge or Ardmore
    Pier?") or a question about both ("Were Ida Brandt and Jon Lindqvist both engineers?",
    "Are X and Y in the same league?"); two names joined by "and" without such a word
    ("built by Velka and Ardmore in 1931") are one fact's, not a comparison. Only named
    things count (capitalised words with their joiners): "apples or pears" is a choice this
    does not see, and the plan's own sub-questions research it."""
    text = " ".join(question.split())
    about_both = bool(_BOTH.search(asking_sentence(text)))
    for match in _PAIR.finditer(text):
        a, b = _trim_name(match.group("a")), _trim_name(match.group("b"))
        if not a or not b or a.lower() == b.lower():
            continue
        if match.group("op") == "or" or about_both:
            return [a, b]
    choice = _choice(text)  # "X and Y were founded when; which came first?"
    if choice:
        return choice
    than = _THAN.search(text)
    if than:
        a, b = _trim_name(than.group("a")), _trim_name(than.group("b"))
        if a and b and a.lower() != b.lower():
            return [a, b]
    return []


# A choice of which came first, or which came later ("Which opened first, ...?", "Who is older,
# ...?"): the words that ask it.
_ORDER_FIRST = re.compile(r"\b(first|earlier|earliest|older|oldest|sooner)\b", re.IGNORECASE)
_ORDER_LATER = re.compile(r"\b(later|latest|younger|youngest|newer|newest|more recent|most recent)\b",
                          re.IGNORECASE)
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")


def asked_order(question: str) -> str:
    """"first" when a question asks which came first (earlier, older), "later" when it asks
    which came later (younger, more recent), "" when it asks neither or both."""
    first, later = bool(_ORDER_FIRST.search(question)), bool(_ORDER_LATER.search(question))
    return "first" if first and not later else "later" if later and not first else ""


def dated_choice(question: str, evidence: str | None) -> str:
    """Check answer-dates: for a choice of which of two came first (or later), the one whose
    earliest year, in the evidence's sentences that name it and not the other, is the earlier
    (or the later): "Ardmore Pier opened in 1887." and "The Velka Bridge was built in 1931."
    decide "Which opened first, the Velka Bridge or Ardmore Pier?" whatever a small model
    makes of the two numbers. "" when the question is no such choice, a choice has no year,
    or the years tie."""
    from ..sources.sentences import split_sentences
    from .names import GENERIC_NAMES, name_found, names

    order = asked_order(question)
    choices = _choice(question) if order and evidence else []
    wanted = [names(c, openers=True, acronyms=False) - GENERIC_NAMES for c in choices]
    if len(choices) != 2 or not all(wanted) or not evidence:
        return ""
    earliest: list[int | None] = [None, None]
    for sentence in split_sentences(evidence):
        said = names(sentence, openers=True)
        which = [i for i, want in enumerate(wanted) if all(name_found(n, said) for n in want)]
        years = [int(y) for y in _YEAR.findall(sentence)]
        if len(which) != 1 or not years:
            continue
        i, seen = which[0], earliest[which[0]]
        earliest[i] = min(years) if seen is None else min(seen, *years)
    a, b = earliest
    if a is None or b is None or a == b:
        return ""
    return choices[0] if (a < b) == (order == "first") else choices[1]


def offered_choice(question: str, switches: Switches = ALL_ON) -> list[str]:
    """Check answer-choice: the two named things a question asks to choose between ("Which
    opened first, the Velka Bridge or Ardmore Pier?" -> ["Velka Bridge", "Ardmore Pier"]), or
    [] when it offers no choice (a question about both, a yes/no question) or the check is off.
    Its answer is then one of them or unknown: a small model asked which of two came first
    answers with the year it read ("in 1931"), which names neither."""
    if not switches.on("answer-choice"):
        return []
    return _choice(question)


# At most this many countries are offered, those the evidence names first.
MAX_COUNTRIES = 12


def named_countries(question: str, evidence: str | None, switches: Switches = ALL_ON) -> list[str]:
    """Check answer-country: for a question asking which country (``asked_kind``), the
    countries ``evidence`` names (``places.countries_named``), or [] when it asks for something
    else, names none, is read from nothing (``evidence`` None) or the check is off. Its answer
    is then one of them or unknown: told to name a country, a small model reading "Brenfield
    is a town in Kessel County, Norway" still answers with the county."""
    if evidence is None or not switches.on("answer-country") or asked_kind(question) not in ("country", "nation"):
        return []
    return countries_named(evidence)[:MAX_COUNTRIES]


@dataclass(frozen=True)
class HeldAnswer:
    """What checks answer-choice and answer-country hold one short answer to: the two things
    the question offers, else the countries its evidence names; empty, the answer is free."""

    choices: list[str] = field(default_factory=list)
    countries: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> list[str]:
        """The answers the grammar admits (besides unknown); [] for any text."""
        return self.choices or self.countries

    def firings(self) -> list[tuple[str, dict[str, list[str]]]]:
        """(check id, what to record) of each check that holds the answer."""
        return ([("answer-choice", {"choices": self.choices})] if self.choices else []) + (
            [("answer-country", {"countries": self.countries})] if self.countries else [])


def held_answer(question: str, evidence: str | None, switches: Switches = ALL_ON) -> HeldAnswer:
    """The answers a short answer to ``question`` read from ``evidence`` is held to: every mode
    that answers (the pipeline's sub-questions and question, the baselines) asks this one."""
    choices = offered_choice(question, switches)
    return HeldAnswer(choices, [] if choices else named_countries(question, evidence, switches))


# A question that asks which of two things is more so ("Which is taller, ...?", "Who sold more
# records, ...?"): a word that ranks, besides the order words of ``asked_order``.
_RANKS = re.compile(r"\b(more|most|less|least|fewer|fewest|better|best|worse|worst|(?:larg|bigg|small|tall|"
                    r"short|long|high|low|great|wid|deep|heavi|light|fast|slow|clos|near|farth|further|"
                    r"rich|popular|famous)(?:er|est))\b", re.IGNORECASE)
# A question that asks for one thing by name ("Which ...", "Who ...", "What author ...").
_ASKS_ONE = re.compile(r"\b(which|who|whom|whose|what)\b", re.IGNORECASE)
# Two names joined by "and" are the things to choose from only where they open the question
# or follow a comma, "between" or "of" ("Between X and Y, which ...", "Which is older, X and
# Y?"); after a verb or "by" they are parts of one fact ("Who founded X and Y first?").
_CHOICE_LEADS = frozenset(("between", "of"))


def _choice(question: str) -> list[str]:
    """The two named things ``question`` asks to choose between: an "X or Y" pair; or, in a
    question asking which one is first, more or -er (never a yes/no question, nor one about
    both, the same or what they share), the two things it names joined by "and" as its subject
    or after "between" / "of" ("The Velka Bridge and Ardmore Pier were built when; which came
    first?", "Between Ida Brandt and Jon Lindqvist, who was born later?"). Two names after a verb
    or "by" are parts of one fact ("Which album by Ida and Jon sold more copies?")."""
    text = " ".join(question.split())
    pairs = []
    for match in _PAIR.finditer(text):
        a, b = _trim_name(match.group("a")), _trim_name(match.group("b"))
        if not a or not b or a.lower() == b.lower():
            continue
        if match.group("op") == "or":
            return [a, b]
        pairs.append((match, a, b))
    asking = asking_sentence(text)
    if not pairs or is_yes_no(asking) or not _ASKS_ONE.search(asking):
        return []
    if not (asked_order(asking) or _RANKS.search(asking)) or _SHARED.search(asking):
        return []
    match, a, b = pairs[0]
    lead = text[:match.start("a") + max(match.group("a").find(a), 0)].split()
    while lead and lead[-1].lower() in ("the", "a", "an"):
        lead.pop()
    if lead and not lead[-1].endswith((",", ";", ":")) and lead[-1].lower() not in _CHOICE_LEADS:
        return []
    return [a, b]


# Where a question written as several sentences starts a new one: after a sentence's end that
# follows a word of three or more characters (not an initial or "Mr."), before a capital.
_SENTENCE_BREAK = re.compile(r"(?<=[\w]{3}[.!?])\s+(?=[A-Z])")


def asking_sentence(question: str) -> str:
    """The sentence that asks, of a question written as several: what the sentences before it
    say is background, not what is asked ("Ida Brandt and Jon Lind met each other in 1901.
    Which of them was born first?" asks to choose one, not about what both share)."""
    return _SENTENCE_BREAK.split(" ".join(question.split()))[-1]


def _trim_name(span: str) -> str:
    """A name without the question's own capitalised openers before it ("Are Tarvik" -> "Tarvik")."""
    words = span.split()
    while words and (words[0].lower() in _QUESTION_OPENERS or words[0].lower() in ("the", "a", "an", "of")):
        words = words[1:]
    while words and words[-1].lower() in _QUESTION_OPENERS | {"the", "of"}:
        words = words[:-1]
    return " ".join(words).strip(" ,?")


_POSSESSIVE = re.compile(r"(\w)['’]s\b")


def names_alone(text: str, item: str, items: list[str]) -> bool:
    """Whether ``text`` names the compared thing ``item`` and none of the other ``items``
    (a sub-question about one side of a comparison): "What is Ida Brandt's trade?" and "Where
    was Ida Marta Brandt born?" name Ida Brandt."""
    from .names import names

    mine = names(item, openers=True, acronyms=False)
    said = names(_POSSESSIVE.sub(r"\1", text), openers=True)
    return mine <= said and not any(names(o, openers=True, acronyms=False) <= said for o in items if o != item)


# A yes/no question about two things that asks whether they share a property ("Are X and Y in
# the same league?"), not whether each has it.
_SAME = re.compile(r"\b(same|in common)\b", re.IGNORECASE)
# A yes/no question that asks about one of two, or compares them, is no conjunction.
_NOT_CONJUNCTION = re.compile(r"\b(either|neither|than|or)\b", re.IGNORECASE)


def _one_thing(a: str, b: str) -> bool:
    """Whether two short answers name one thing: every content word of the shorter is in the
    other, as written ("the Northern League" and "Northern League"; "Kessel County, Norway" and
    "Kessel County"), not merely a stem ("Austria" is not "Australia")."""
    words = sorted((content_words(a), content_words(b)), key=len)
    return bool(words[0]) and words[0] <= words[1]


def composed_answer(question: str, side_answers: list[list[str]]) -> str:
    """Check answer-composed: the yes or no that the answers about each side of a yes/no
    question on two things joined by "and" decide, or "" when they decide nothing.
    ``side_answers`` holds, per compared thing, the answers of the sub-questions about it alone.
    "Are Ida Brandt and Jon Lindqvist both engineers?" is yes only when each side's answer is
    yes; "Are Velka United and Ardmore Town in the same league?" is no when one side's league
    ("Northern League") is not the other's ("Coastal Cup"), yes when both name one thing. A
    small model reading both sides' facts at once often says yes to a question whose two
    halves it has just answered differently."""
    if not is_yes_no(question) or _NOT_CONJUNCTION.search(question) or len(side_answers) != 2:
        return ""
    firsts = [" ".join(a[0].split()).rstrip(".").lower() if a else "" for a in side_answers]
    if not all(firsts):
        return ""
    yes_no = [bool(_YES_NO.fullmatch(a)) for a in firsts]
    if _SAME.search(question):
        if any(yes_no):
            return ""
        return "Yes" if _one_thing(*firsts) else "No"
    if not all(yes_no):
        return ""
    return "Yes" if all(a == "yes" for a in firsts) else "No"


def compared_query(item: str, question: str, others: list[str]) -> str:
    """The search for one compared thing: its name and the question's own content words,
    without the names of the things it is compared with."""
    other_words = {w.lower() for other in others for w in WORD.findall(other)}
    own = {w.lower() for w in WORD.findall(item)}
    words = [w for w in WORD.findall(question)
             if w.lower() not in other_words and w.lower() not in own
             and w.lower() not in STOP_WORDS and w.lower() not in _QUESTION_OPENERS and len(w) >= 3]
    return " ".join([item] + list(dict.fromkeys(words)))
