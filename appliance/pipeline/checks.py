"""The checks: every rule of the pipeline that drops, rewrites, demotes or redraws something.

Each check has an id, the phase it acts in, one sentence saying what it does, the one function
that decides it, the settings that tune it, and its own counter (``RunStats.checks``, by id).
``[checks] disabled`` switches any switchable check off; ``appliance checks`` lists them, and
``appliance eval --without ID`` measures what one earns. A check that cannot be switched off
is a guarantee of the product (every quote verbatim, every statement cited), not a heuristic.

This module imports nothing of the pipeline, so the settings can validate against it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

PHASES = ("plan", "gather", "verify", "answer", "write", "any")


@dataclass(frozen=True)
class Check:
    id: str
    phase: str
    does: str
    decides: str                     # "module:function" under appliance.pipeline
    settings: tuple[str, ...] = ()   # the settings (section.key) or constants that tune it
    switchable: bool = True


CHECKS: tuple[Check, ...] = (
    # plan
    Check("plan-structure", "plan",
          "Repairs a plan so it can run: drops empty and repeated sub-questions, renames repeated ids, "
          "cuts nodes over the limit, drops dependencies on unknown nodes and those that close a cycle.",
          "plan:check_plan", ("pipeline.hard_max_nodes",), switchable=False),
    Check("plan-invented-name", "plan",
          "Redraws a plan whose sub-question names something the question does not.",
          "plan:invented_names", ("pipeline.plan_draws",)),
    Check("plan-unanchored", "plan",
          "Redraws a plan whose sub-question names nothing of the question, uses no earlier answer "
          "and depends on no other.",
          "plan:unanchored", ("pipeline.plan_draws",)),
    Check("plan-definition", "plan",
          "Redraws a plan whose sub-question asks only what or who something is, whose answer "
          "(a description) no later step can search with.",
          "plan:asks_definition", ("pipeline.plan_draws",)),
    Check("plan-whole-first", "plan",
          "Redraws a plan in which a sub-question other nodes wait on is the whole question again.",
          "plan:whole_question_first", ("pipeline.plan_draws",)),
    Check("plan-whole-last", "plan",
          "Makes a sub-question that is the whole question again wait on the sub-questions that "
          "waited on it without using its answer: the parts are asked before the whole.",
          "plan:whole_question_last"),
    Check("plan-dropped-name", "plan",
          "Redraws a plan in which some name of the question is in no sub-question.",
          "plan:dropped_names", ("pipeline.plan_draws",)),
    # any phase
    Check("example-echo", "any",
          "Drops model text (a sub-question, query, gap, vote reason, answer or statement) that "
          "names words of a prompt's worked example its input did not have, and a short answer "
          "made of the answer instruction's own words.",
          "forms:echoes_example"),
    # gather
    Check("search-named-first", "gather",
          "Reads first, of a search's hits, those whose title and snippet name more of the names "
          "the query asks about; the search's own order stands among equals and for the question as asked.",
          "gather:named_first"),
    Check("page-gate", "gather",
          "Does not read a page none of whose sentences comes near in meaning to what the run "
          "asks; the page is given back for a later node.",
          "gather:bears_on", ("pipeline.relevance_threshold",)),
    Check("quote-anchor", "gather",
          "Drops a claim whose quote is not in its source (case, spacing and small edits forgiven); "
          "the kept quote is the source's own span.",
          "anchor:find_quote", ("pipeline.quote_similarity",), switchable=False),
    Check("claim-relevance", "gather",
          "Demotes to tangential a claim whose text and quote are both far in meaning from what "
          "the run asks, read alone and after their page's title.",
          "gather:relevance_to", ("pipeline.relevance_threshold",)),
    Check("nearest-sentence", "gather",
          "Adds to a page's claims its sentence nearest in meaning to what the run asks, read "
          "alone and after the page's title, when the extractor did not pick it and it is near "
          "enough: a small model choosing sentences often passes over the one that answers.",
          "gather:nearest_sentence", ("pipeline.relevance_threshold",)),
    Check("claim-ungrounded", "gather",
          "Replaces a claim by the sentence it quotes when fewer than half of its content words "
          "are in that sentence.",
          "text:grounded", ("text.GROUNDED_SHARE",)),
    Check("claim-names-unsupported", "gather",
          "Replaces a claim by the sentence it quotes when the claim names something the quote "
          "and the text around it never name.",
          "names:names_unsupported", ("anchor.CONTEXT_CHARS",)),
    Check("node-about", "gather",
          "A sub-question's answer reads only the claims about something its question names.",
          "names:off_subject", ("pipeline.name_check",)),
    # verify
    Check("verify-tangential", "verify",
          "Neither verifies nor answers with a claim rated (or demoted to) tangential.",
          "run:relevant_claims"),
    Check("verify-off-subject", "verify",
          "Neither verifies nor answers with a claim about other named things than the question, "
          "its sub-questions and the answers later steps build on.",
          "names:off_subject", ("pipeline.name_check",)),
    Check("question-subject", "verify",
          "Keeps on subject a claim read for the question as asked when the question itself names "
          "nothing, whatever the plan's sub-questions and answers name: a plan gone astray costs "
          "only its own nodes.",
          "names:names_nothing"),
    Check("verbatim-confirmed", "verify",
          "Confirms without votes a claim that is word for word a sentence it quotes.",
          "verify:is_verbatim", ("pipeline.vote_verbatim",)),
    Check("vote-no-reason", "verify",
          "Counts a vote that gives no reason as an abstention.",
          "verify:cast_vote"),
    Check("restate-killed", "verify",
          "Keeps a claim refuted as worded as the sentence it quotes, when that sentence is still "
          "about the research.",
          "run:verify", ("pipeline.restate_killed", "pipeline.refutations_to_kill")),
    Check("gap-restates", "gather",
          "Leaves out of the gap round a gap, or a sub-question drawn from the gaps, that asks the "
          "run's question again: the next-search step names the missing hop instead when nothing "
          "else is left.",
          "gaps:says_the_question_again", ("pipeline.gap_questions",)),
    # answer
    Check("answer-choice", "answer",
          "Holds the answer to a question that asks to choose between two named things to one of "
          "them or unknown (the answer's grammar allows nothing else).",
          "forms:offered_choice"),
    Check("answer-country", "answer",
          "Holds the answer to a question asking which country to one of the countries its evidence "
          "names, or unknown, when the evidence names any (the answer's grammar allows nothing else).",
          "forms:named_countries", ("forms.MAX_COUNTRIES",)),
    Check("answer-dates", "answer",
          "Answers a choice of which of two came first (or later) with the one whose earliest year, "
          "in the evidence's sentences naming it and not the other, decides it, when both have one.",
          "forms:dated_choice"),
    Check("answer-none", "answer",
          "Drops an answer that says there is none (unknown, not stated, cannot be determined).",
          "forms:says_no_answer"),
    Check("answer-restates", "answer",
          "Drops an answer that only says the question again.",
          "forms:restates"),
    Check("answer-form", "answer",
          "Drops an answer not of the form asked for: yes or no for a yes/no question only, a date "
          "for when, a number for how many, a name for who or where.",
          "forms:has_asked_form"),
    Check("answer-rests", "answer",
          "Drops an answer fewer than half of whose content words are in the evidence it read "
          "(word forms forgiven).",
          "forms:answer_rests_on"),
    Check("chain-rests", "answer",
          "Shows the final answer a sub-question's answer only when that answer rests on the "
          "verified evidence.",
          "forms:answer_rests_on", ("pipeline.answer_chain",)),
    Check("chain-superseded", "answer",
          "Leaves out of the final answer's chain the answer of a sub-question that asks the whole "
          "question when the gap round's step found the verified evidence short of answering it "
          "and named a further search.",
          "gaps:asks_the_question", ("pipeline.gap_questions", "pipeline.answer_chain")),
    Check("chain-contradicted", "answer",
          "Leaves out of the quick report's headings and the answer's citations the answer of a "
          "sub-question that asks for what the question asks for (the same form and kind of "
          "answer, no later sub-question built on it) when the run's answer differs from it.",
          "synthesize:contradicted"),
    Check("answer-composed", "answer",
          "Answers a yes/no question about two named things joined by and with what the answers "
          "of the sub-questions about each alone decide: yes only if both are yes, and for a "
          "question whether the two share something, no unless their two answers name one thing.",
          "forms:composed_answer"),
    Check("answer-both-sides", "answer",
          "Drops a yes or no answer to a question comparing two named things unless a verified "
          "claim names each of them.",
          "synthesize:both_sides"),
    Check("answer-cites-on-subject", "answer",
          "Cites beside the answer only claims about something the research names, not merely "
          "carrying the answer's words.",
          "names:off_subject", ("pipeline.name_check",)),
    Check("answer-cites-side", "answer",
          "Cites for a yes/no sub-question about one of the things the question compares, and lists "
          "under its heading in the report without the writer, only its claims that name that thing.",
          "synthesize:side_claims"),
    # write
    Check("cite-unknown", "write",
          "Drops a citation to anything but a verified claim of the run.",
          "synthesize:check_citations", switchable=False),
    Check("statement-uncited", "write",
          "Drops a report statement left without a citation.",
          "synthesize:check_citations", switchable=False),
    Check("written-grounded", "write",
          "Drops a statement, answer or summary fewer than a third of whose content words are in "
          "the claims it cites and the question.",
          "text:grounded", ("synthesize.WRITTEN_SHARE",)),
)

BY_ID: dict[str, Check] = {c.id: c for c in CHECKS}
SWITCHABLE: tuple[str, ...] = tuple(c.id for c in CHECKS if c.switchable)


# Checks that were measured, earned nothing and went: id -> why. A config that still switches
# one off is told so by name instead of being told the id is unknown.
RETIRED: dict[str, str] = {
    "answer-part": "it changed no answer's F1 on either dev set, all lines, and is removed",
}


def check_disabled(ids: list[str] | tuple[str, ...]) -> list[str]:
    """``ids`` as given, each checked: ValueError naming an unknown, retired or unswitchable one."""
    for check_id in ids:
        if check_id in RETIRED:
            raise ValueError(f"check {check_id!r} no longer exists ({RETIRED[check_id]}): "
                             "take it out of [checks] disabled")
        if check_id not in BY_ID:
            raise ValueError(f"unknown check {check_id!r} (see `appliance checks` for the ids)")
        if not BY_ID[check_id].switchable:
            raise ValueError(f"check {check_id!r} cannot be switched off: it is a guarantee of the report")
    return list(ids)


class Switches:
    """Which checks are on: every registered one but those disabled."""

    def __init__(self, disabled: frozenset[str] | set[str] | tuple[str, ...] | list[str] = ()):
        self.disabled = frozenset(disabled)

    def on(self, check_id: str) -> bool:
        if check_id not in BY_ID:
            raise KeyError(f"no check {check_id!r} in the registry")
        return check_id not in self.disabled

    @classmethod
    def of(cls, settings) -> "Switches":
        return cls(settings.checks.disabled)


ALL_ON = Switches()


class Firings:
    """The checks of one run: which are on, how often each fired and on what (in order).
    ``record`` receives each firing as it happens (the run folder's checks.jsonl)."""

    def __init__(self, switches: Switches = ALL_ON, record: Callable[[dict[str, Any]], None] | None = None):
        self.switches = switches
        self.counts: dict[str, int] = {}
        self.log: list[dict[str, Any]] = []
        self._record = record
        self._lock = threading.Lock()

    def on(self, check_id: str) -> bool:
        return self.switches.on(check_id)

    def fired(self, check_id: str, on: str, **detail: Any) -> None:
        """Count one firing of ``check_id`` and record what it fired ``on``."""
        if check_id not in BY_ID:
            raise KeyError(f"no check {check_id!r} in the registry")
        entry = {"check": check_id, "on": on, **detail}
        with self._lock:
            self.counts[check_id] = self.counts.get(check_id, 0) + 1
            self.log.append(entry)
        if self._record is not None:
            self._record(entry)

    def applies(self, check_id: str, decide: Callable[[], bool], on: str, **detail: Any) -> bool:
        """True when ``check_id`` is on and ``decide()`` says it fires (the firing counted and
        recorded). A check switched off is not decided at all."""
        if not self.on(check_id) or not decide():
            return False
        self.fired(check_id, on, **detail)
        return True
