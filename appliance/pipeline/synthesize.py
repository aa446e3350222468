"""Synthesize: the writer turns verified claims into the report's text.

The writer sees confirmed claims only, under short ids (c1, c2, ...). A statement may cite
only those ids: other ids are dropped and counted, and a statement left with no citation is
dropped and counted too, so every statement in a report rests on verified, quoted claims.
Words must rest on them as well: a statement, answer or summary whose content words are
mostly absent from its claims (and the question) is dropped and counted.

Without the writer (knob ``write_report`` false, the quick profile), ``outline`` lays the
report out from the run itself, with no model call: the verified claims as worded and checked,
grouped under the sub-question that found them, each citing itself; the summary is the claims
the direct answer rests on.
"""

from __future__ import annotations

from ..contracts import CitedStatement, MergedClaim, NodeState, ReportDraft, Synthesis, answer_schema
from . import prompts
from .anchor import quote_context, source_passages
from .checks import ALL_ON, Firings, Switches
from .forms import (HeldAnswer, answer_rests_on, asked_form, asked_kind, compared, composed_answer, echoes_example,
                    held_answer, is_yes_no, names_alone)
from .gather import answer_checked, dedupe_text
from .names import GENERIC_NAMES, name_found, names, off_subject
from .text import grounded
from .state import RunContext, ask

# Share of a written text's content words that must appear in the claims it rests on. Lower
# than for a claim and its quote: a writer rightly adds linking words of its own.
WRITTEN_SHARE = 1 / 3


def short_ids(claims: list[MergedClaim]) -> dict[str, str]:
    return {f"c{i}": c.id for i, c in enumerate(claims, start=1)}


def claims_listing(claims: list[MergedClaim]) -> str:
    return "\n".join(f"{sid}: {claim.text}" for sid, claim in zip(short_ids(claims), claims))


MAX_ANSWER_QUOTES = 2


def evidence_listing(claims: list[MergedClaim], shown: str = "") -> str:
    """The verified claims with their quotes, numbered, as the short-answer prompt reads them;
    a quote already in ``shown`` (the text around the quotes that follows) is not repeated."""
    lines = []
    for number, claim in enumerate(claims, start=1):
        lines.append(f"[{number}] {claim.text}")
        lines += [f'    "{q.quote}"' for q in claim.quotes[:MAX_ANSWER_QUOTES]
                  if " ".join(q.quote.split()) not in shown]
    return "\n".join(lines)


CONTEXT_TOTAL = 3600


def context_listing(claims: list[MergedClaim], texts: dict[str, str], title: dict[str, str],
                    total: int = CONTEXT_TOTAL) -> str:
    """The text around the verified claims' quotes, one line per source (sources in the order
    of their best-ranked claim): its quoted sentences with their neighbours, overlapping
    stretches once (``anchor.passage_around``); a source whose passage would pass ``total``
    characters in all is left out."""
    by_source: dict[str, list[str]] = {}
    for claim in claims:
        for ref in claim.quotes[:MAX_ANSWER_QUOTES]:
            mine = by_source.setdefault(ref.source_url, [])
            if ref.quote not in mine:
                mine.append(ref.quote)
    return "\n".join(f"- {title.get(url) or 'untitled'}: {passage}"
                     for url, passage in source_passages(by_source, texts, total, quotes_alone=False))


def _source_texts(run: RunContext) -> tuple[dict[str, str], dict[str, str]]:
    with run.sources_lock:
        texts = {url: s.text for url, s in run.sources.items() if s.ok}
        titles = {url: s.title for url, s in run.sources.items()}
    return texts, titles


def claim_contexts(run: RunContext, claims: list[MergedClaim]) -> dict[str, str]:
    """Per claim id, the text around its quotes in their sources (see ``quote_context``), each
    after its source's title (a page names its subject in its title, "he" after it)."""
    texts, titles = _source_texts(run)
    return {c.id: "\n".join(f"{titles.get(q.source_url) or ''}\n{quote_context(texts.get(q.source_url, ''), q.quote)}"
                            for q in c.quotes[:MAX_ANSWER_QUOTES]) for c in claims}


def short_answer(run: RunContext, confirmed: list[MergedClaim], nodes: list[NodeState] | None = None) -> str:
    """The direct answer (yes/no, a name, date or number) drawn from the verified claims, their
    quotes and the text around the quotes, by the same short-answer prompt the one-call
    baselines use; "" when the model gives none or one that does not rest on that evidence
    (counted as dropped text). With ``pipeline.answer_chain``, the sub-questions' answers that
    rest on that evidence come last: the chain the plan followed ("In which country is Port
    Ardmore? Ruritania"), which a small model reading a list of claims ("Port Ardmore is in
    Velka province.") does not rebuild on its own."""
    context = context_listing(confirmed, *_source_texts(run))
    evidence = evidence_listing(confirmed, context)
    if context:
        evidence += "\n\nAround the quotes, in their sources:\n" + context
    chain = (chain_listing(nodes or [], evidence, run.checks.switches)
             if run.settings.pipeline.answer_chain else "")
    if chain:
        evidence += "\n\nSub-questions answered from this evidence:\n" + chain
    held = held_answer(run.ctx.question, evidence, run.checks.switches)
    for check_id, detail in held.firings():
        run.checks.fired(check_id, on="answer", **detail)
    messages = prompts.short_answer(run.ctx.question, evidence, run.ctx.today, held.choices)
    out = ask(run, run.models.writer, messages, answer_schema(held.allowed), max_tokens=prompts.ANSWER_TOKENS,
              purpose="answer", temperature=run.settings.llm.answer_temperature)
    if out is None:
        record_answer(run, evidence, held, None, "")
        return ""
    answer = answer_checked(run, out.answer, evidence, run.ctx.question, on="answer")
    items = compared(run.ctx.question)
    composed = composed_answer(run.ctx.question, side_answers(nodes or [], items))
    if composed and run.checks.applies("answer-composed", lambda: composed.lower() != answer.lower(),
                                       on="answer", answer=answer, composed=composed):
        answer = composed
    if answer and is_yes_no(run.ctx.question) and run.checks.applies(
            "answer-both-sides", lambda: not both_sides(confirmed, items), on="answer", answer=answer):
        answer = ""
    if not answer and out.answer.strip():
        run.stats.add(texts_dropped=1)
    record_answer(run, evidence, held, out.answer, answer)
    return answer


def record_answer(run: RunContext, evidence: str, held: HeldAnswer, raw: str | None, answer: str) -> None:
    """The run folder's ``answer.json``: what the final answer call read and said, beside what
    the run kept, so a reader can tell why an answer is what it is (the checks that acted on
    it are the ``checks.jsonl`` entries on "answer"). ``raw`` None: the call gave no valid
    output."""
    run.recorder.write_json(run.recorder.ANSWER, {
        "question": run.ctx.question, "evidence": evidence, "choices": held.choices,
        "allowed": held.allowed, "raw": raw, "answer": answer})


def contradicted(node: NodeState, nodes: list[NodeState], question: str, answer: str) -> bool:
    """Check chain-contradicted decides on this: whether ``node`` answers the question's last
    step and the run's ``answer`` differs from it. A sub-question that no other builds on and
    that asks for the same form and kind of answer as the question ("Who founded the Ardmore
    Press?" under "Who founded the press that printed Harbour Notes?") answers what the run's
    answer answers; read from fewer claims, a different answer of it is the guess the run's
    answer overruled, and shown beside it the report would say two things. Never for a yes or
    no, or a question comparing two things (each side's sub-question answers a part), or with
    no run answer."""
    if not (answer and node.answer) or node.reads_only or is_yes_no(question) or compared(question):
        return False
    if any(node.id in other.depends_on for other in nodes):
        return False
    if (asked_form(node.asked), asked_kind(node.asked)) != (asked_form(question), asked_kind(question)):
        return False
    return not (answer_rests_on(node.answer, answer) or answer_rests_on(answer, node.answer))


def side_answers(nodes: list[NodeState], items: list[str]) -> list[list[str]]:
    """Per compared thing, the answers of the sub-questions about it alone, in plan order
    (a sub-question whose answer was superseded, or that has none, gives none)."""
    return [[n.answer for n in nodes if n.answer and not n.answer_superseded and not n.reads_only
             and names_alone(n.asked, item, items)] for item in items]


def about_item(claim: MergedClaim, item: str) -> bool:
    """Whether a claim (its text or a quote) names the compared thing ``item``: each word of its
    name, not its initials ("Ida Marta Brandt" names Ida Brandt)."""
    wanted = item_names(item)
    said = names(" ".join([claim.text] + [q.quote for q in claim.quotes]), openers=True)
    return bool(wanted) and all(name_found(n, said) for n in wanted)


def item_names(item: str) -> set[str]:
    """The names that make a claim about the compared thing ``item``."""
    return names(item, openers=True, acronyms=False) - GENERIC_NAMES


def side_claims(claims: list[MergedClaim], node: NodeState, items: list[str]) -> list[MergedClaim]:
    """Check answer-cites-side: of the claims of a sub-question that asks a yes or no about one
    of the compared ``items`` alone ("Is Ida Brandt a painter?" under "Are Ida Brandt and Jon
    Lind both painters?"), those that name that one. A claim found by that sub-question about
    someone else ("Karl Brandt is a sculptor") says nothing of its yes or no. All of them when
    it asks about no compared thing alone, or that thing has no name to look for."""
    subject = [item for item in items if names_alone(node.asked, item, items)]
    if len(subject) != 1 or not item_names(subject[0]):
        return claims
    return [c for c in claims if about_item(c, subject[0])]


def both_sides(confirmed: list[MergedClaim], items: list[str]) -> bool:
    """Check answer-both-sides: whether every compared thing has a verified claim naming it
    (a yes or no about two things rests on a fact of each)."""
    return all(any(about_item(c, item) for c in confirmed) for item in items)


def chain_listing(nodes: list[NodeState], evidence: str, switches: Switches = ALL_ON) -> str:
    """Each answered sub-question with its answer, one per line, when the answer rests on
    ``evidence`` (check chain-rests: a node's answer was read before the votes, and one whose
    claims were all killed is left out)."""
    keep = not switches.on("chain-rests")
    return "\n".join(f"- {n.asked} {n.answer}" for n in nodes
                     if n.answer and not n.answer_superseded and (keep or answer_rests_on(n.answer, evidence)))


# Claims the direct answer cites per step of its chain (each answered sub-question, then the
# answer itself): the best-ranked ones that carry that step's answer.
ANSWER_CITES_PER_STEP = 2


def answer_support(confirmed: list[MergedClaim], nodes: list[NodeState], answer: str,
                   around: dict[str, str] | None = None, asked: str | None = None,
                   checks: Switches | Firings = ALL_ON, items: list[str] | None = None,
                   for_question: set[str] | None = None) -> list[str]:
    """The confirmed claims the direct answer rests on, best-ranked first: for each answered
    sub-question, its claims whose text or quotes carry its answer (any of its claims when the
    answer is yes or no), then the claims that carry the final answer. A multi-hop answer so
    cites each hop that led to it, not only the last. ``around`` (claim id to the text around
    its quotes, which the answer also read) counts as the claim's text when no claim's own
    words carry a step's answer. With ``asked`` (the question, its sub-questions as researched
    and their answers but the final one) a claim must also be about something they name
    (``names.off_subject``): carrying the answer's word is not enough ("Jon Marta Lindqvist
    was a Ruritanian sailor" beside "Ruritania" for the country of the painter Marta Olsen).
    With ``items`` (the things the question compares), a yes or no cites first a verified
    claim about each of them, and a yes/no sub-question about one of them alone cites only its
    claims that name that one (check answer-cites-side). The claims of the nodes in
    ``for_question`` (those that read the question as asked, when check question-subject keeps
    them on subject) are not held to ``asked``.

    Given the run's ``Firings`` as ``checks``, each claim a check kept out of the citations
    (one the answer would cite with that check off) is counted and recorded against it."""
    around = around or {}
    for_question = for_question or set()
    items = items or []
    on_subject = confirmed
    if asked is not None and checks.on("answer-cites-on-subject"):
        on_subject = [c for c in confirmed if for_question & set(c.node_ids) or not off_subject(
            " ".join([c.text] + [q.quote for q in c.quotes]), asked, around.get(c.id, ""))]
    side = checks.on("answer-cites-side")
    chosen = _cited(on_subject, nodes, answer, around, items, side)
    if isinstance(checks, Firings):
        if on_subject is not confirmed:
            for cid in _cited(confirmed, nodes, answer, around, items, side):
                if cid not in chosen:
                    checks.fired("answer-cites-on-subject", on=f"claim {cid}")
        if side:
            for cid in _cited(on_subject, nodes, answer, around, items, False):
                if cid not in chosen:
                    checks.fired("answer-cites-side", on=f"claim {cid}")
    return chosen


def _cited(confirmed: list[MergedClaim], nodes: list[NodeState], answer: str, around: dict[str, str],
           items: list[str], side: bool) -> list[str]:
    """``answer_support``'s choice among ``confirmed``; ``side``: check answer-cites-side is on."""

    def carrying(pool: list[MergedClaim], step_answer: str) -> list[MergedClaim]:
        own = [c for c in pool
               if answer_rests_on(step_answer, " ".join([c.text] + [q.quote for q in c.quotes]))]
        return own or [c for c in pool if answer_rests_on(step_answer, around.get(c.id, ""))]

    chosen: list[str] = []

    def take(claims: list[MergedClaim]) -> None:
        fresh = [c.id for c in claims if c.id not in chosen]
        chosen.extend(fresh[:ANSWER_CITES_PER_STEP])

    if items and answer.strip().lower().rstrip(".") in ("yes", "no"):
        # A yes or no about two things cites a verified fact of each.
        for item in items:
            take([c for c in confirmed if about_item(c, item)])

    for node in nodes:
        if not node.answer or node.answer_superseded:
            continue
        own = [c for c in confirmed if node.id in c.node_ids]
        if node.answer.strip().lower().rstrip(".") in ("yes", "no"):
            take(side_claims(own, node, items) if side else own)
        else:
            take(carrying(own, node.answer))
    take(carrying(confirmed, answer))
    return chosen


def synthesize(run: RunContext, confirmed: list[MergedClaim], direct_answer: str = "") -> Synthesis:
    """Ask the writer for the report (raises ModelOutputError; the caller falls back)."""
    messages = prompts.synthesize(run.ctx, claims_listing(confirmed), direct_answer)
    draft = run.models.writer.structured(messages, ReportDraft, max_tokens=prompts.REPORT_TOKENS,
                                         purpose="synthesize")
    return check_citations(run, draft, confirmed)


OTHER_CLAIMS = "Other verified claims"


def outline(confirmed: list[MergedClaim], nodes: list[NodeState], resting: list[str] | None = None,
            items: list[str] | None = None, checks: Switches | Firings = ALL_ON) -> Synthesis:
    """The report's text without the writer: one finding per sub-question that has confirmed
    claims (in plan order; its theme the sub-question as researched, with its answer where it
    has one), each confirmed claim a statement citing itself, listed once, under the first
    sub-question that found it; claims of no listed sub-question come last. With ``items``
    (the things the question compares), a sub-question answered yes or no about one of them
    alone lists only its claims that name that one (check answer-cites-side): under the
    heading "Is Ida Brandt a painter? Yes", a claim it found about Karl Brandt would read as
    support for that yes; such a claim goes under the next sub-question that found it, or last.

    The summary is the verified sentences the direct answer rests on (``resting``, the ids of
    the claims it cites, in their order), so it states the chain the answer was drawn from,
    word for word as checked: a sub-question's own answer can differ from that chain (a
    magazine "published by the Ardmore Press on behalf of the Harbour Society": the
    sub-question answers the society, the answer goes through the press). A run with no such
    claims (no direct answer) has the sub-questions' answers in plan order instead ("Who founded
    the Ardmore Press? Marta Olsen."). The report's own answer is the direct answer it already
    shows."""
    order = {node.id: index for index, node in enumerate(nodes)}
    side = bool(items) and checks.on("answer-cites-side")

    def fits(claim: MergedClaim, node: NodeState) -> bool:
        if not side or node.answer.strip().lower().rstrip(".") not in ("yes", "no"):
            return True
        return bool(side_claims([claim], node, items or []))

    groups: dict[int, list[CitedStatement]] = {}
    for claim in confirmed:
        found = sorted(order[n] for n in claim.node_ids if n in order)
        home = next((i for i in found if fits(claim, nodes[i])), len(nodes))
        if found and home != found[0] and isinstance(checks, Firings):
            checks.fired("answer-cites-side", on=f"claim {claim.id} under {nodes[found[0]].id}")
        groups.setdefault(home, []).append(CitedStatement(text=claim.text, claim_ids=[claim.id]))
    findings: list[tuple[str, list[CitedStatement]]] = []
    for index in sorted(groups):
        if index == len(nodes):
            theme = OTHER_CLAIMS
        else:
            node = nodes[index]
            answer = node.answer if node.answer and not node.answer_superseded else ""
            theme = with_answer(node.asked, answer)
        findings.append((" ".join(theme.split()), groups[index]))
    by_id = {claim.id: claim for claim in confirmed}
    summary = [as_sentence(by_id[cid].text) for cid in resting or [] if cid in by_id]
    if not summary:
        summary = [with_answer(n.asked, n.answer.rstrip(".")) + "." for n in nodes
                   if n.answer and not n.answer_superseded and not n.reads_only]
    return Synthesis(answer="", executive_summary=" ".join(dedupe_text(summary)), findings=findings)


def with_answer(asked: str, answer: str) -> str:
    """A sub-question followed by its answer, as a heading reads it: "Where was Ida Brandt
    born? Ardmore". A node of the gap round searched as named ("Ida Brandt birthplace") is no
    question, so a colon parts it from its answer."""
    asked, answer = " ".join(asked.split()), " ".join(answer.split())
    if not answer:
        return asked
    return f"{asked} {answer}" if asked.endswith("?") else f"{asked}: {answer}"


def as_sentence(text: str) -> str:
    """``text`` with its spaces folded and a full stop at its end when it has no closing
    punctuation of its own (a quoted sentence often lacks one), so that several read as prose."""
    text = " ".join(text.split())
    closed = text.rstrip("\"'”’)]")
    return text if not text or closed.endswith((".", "!", "?")) else text + "."


def check_citations(run: RunContext, draft: ReportDraft, confirmed: list[MergedClaim]) -> Synthesis:
    """Keep statements that cite verified claims; count what is dropped.

    Text that echoes the prompt's worked example instead of the claims is dropped too, and an
    open question asked twice is listed once.
    """
    ids = short_ids(confirmed)
    by_id = dict(zip(ids, (c.text for c in confirmed)))
    claims_text = claims_listing(confirmed)

    def echo(text: str, on: str) -> bool:
        return run.checks.applies("example-echo", lambda: echoes_example(text, run.ctx.question, claims_text), on=on)

    def rests_on(text: str, short: list[str], on: str) -> bool:
        basis = " ".join([run.ctx.question] + [by_id[s] for s in short])
        return not run.checks.applies("written-grounded", lambda: not grounded(text, basis, WRITTEN_SHARE), on=on)

    findings: list[tuple[str, list[CitedStatement]]] = []
    for finding in draft.findings:
        kept: list[CitedStatement] = []
        for statement in finding.statements:
            cited: list[str] = []
            short: list[str] = []
            for raw in statement.claim_ids:
                key = raw.strip().strip("[]").lower()
                if key in ids and ids[key] not in cited:
                    cited.append(ids[key])
                    short.append(key)
                else:
                    run.stats.add(citations_dropped=1)
                    run.checks.fired("cite-unknown", on=f"citation {raw!r}")
            text = " ".join(statement.text.split())
            on = f"statement {text[:80]!r}"
            if not cited:
                run.checks.fired("statement-uncited", on=on)
            if cited and text and not echo(text, on) and rests_on(text, short, on):
                kept.append(CitedStatement(text=text, claim_ids=cited))
            else:
                run.stats.add(statements_dropped=1)
        if kept:
            findings.append((" ".join(finding.theme.split()) or "Findings", kept))
    answer = " ".join(draft.answer.split())
    summary = " ".join(draft.executive_summary.split())
    every = list(by_id)
    kept_answer = answer if answer and not echo(answer, "report answer") and rests_on(answer, every, "report answer") else ""
    kept_summary = (summary if summary and not echo(summary, "summary") and rests_on(summary, every, "summary")
                    else "")
    run.stats.add(texts_dropped=(answer != kept_answer) + (summary != kept_summary))
    return Synthesis(answer=kept_answer, executive_summary=kept_summary,
                     findings=findings,
                     open_questions=[q for q in dedupe_text(draft.open_questions)
                                     if not echo(q, f"open question {q[:80]!r}")])

