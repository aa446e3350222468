"""Rendering: the report as markdown (numbered citations into a de-duplicated source list)
and as JSON with everything (plan, claims with quotes, votes, stats).

Text that comes from models or pages is escaped so it cannot break out of the markdown
around it: no stray links, headings, tables or code spans.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote as url_quote

from .contracts import MergedClaim, ReportData, RunStatus

STATUS_TEXT = {
    RunStatus.complete: "complete",
    RunStatus.inconclusive: "inconclusive: no claim survived verification",
    RunStatus.no_evidence: "no evidence: no source gave a claim with a quote found in its text",
    RunStatus.no_sources: "no sources: the searches found nothing that could be read",
    RunStatus.plan_failed: "failed: the question could not be planned",
    RunStatus.synthesis_failed: "partial: the report could not be written; verified claims are listed as they are",
    RunStatus.error: "failed part-way: an unexpected error stopped the run; what was finished is shown",
    RunStatus.cancelled: "cancelled: stopped on request; what was finished is shown",
}

# Characters that change how a line renders wherever they stand: escapes, code, emphasis,
# links and images (a bracket: "(" and "!" are inert without one), raw HTML and autolinks,
# strikethrough and table cells. Entities and line-start markers are handled apart, so
# ordinary text such as "Ashman (born 1964)" stays as it reads.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<|~])")
_ENTITY = re.compile(r"&(?=#?\w+;)")
# Control characters (a page's terminal escape sequences would act on `cat report.md`) and the
# bidirectional overrides that make text display in another order than it reads.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Schemes that become links; any other "URL" is shown as text.
_LINK_SCHEMES = ("http://", "https://", "corpus://", "file://")


def plain_line(text: str) -> str:
    """One line of text safe for a terminal: no control or bidirectional characters, no newlines."""
    return " ".join(_INVISIBLE.sub(" ", str(text)).split())


def md_inline(text: str) -> str:
    """One line of text made inert for markdown (escapes, no newlines, no leading list marks)."""
    text = plain_line(text)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = _ENTITY.sub(r"\\&", text)
    # A line may not start a list, a setext underline or a quote: escape the marker itself
    # ("1\." - a backslash before the digit would not be an escape and would show).
    text = re.sub(r"^(\d+)([.)])", r"\1\\\2", text)
    return re.sub(r"^([-=>#+])", r"\\\1", text)


def md_url(url: str) -> str:
    """A URL that stays one autolink: no spaces, angle brackets or quotes survive unescaped.

    Only http(s), corpus and file URLs become links; anything else (no scheme, javascript:...) is
    shown as escaped text, since ``<word>`` would otherwise be raw HTML.
    """
    quoted = url_quote(_INVISIBLE.sub("", url.strip()), safe=":/?#[]@!$&'()*+,;=%-._~")
    if not quoted.lower().startswith(_LINK_SCHEMES):
        return md_inline(url)
    return "<" + quoted + ">"


class Citations:
    """Numbers sources in order of first citation; each keeps the quotes actually used."""

    def __init__(self, data: ReportData):
        self.data = data
        self.numbers: dict[str, int] = {}
        self.quotes: dict[str, list[str]] = {}

    def cite(self, claim_id: str) -> list[int]:
        claim = self.data.claims[claim_id]
        numbers: list[int] = []
        for ref in claim.quotes:
            n = self.numbers.setdefault(ref.source_url, len(self.numbers) + 1)
            used = self.quotes.setdefault(ref.source_url, [])
            if ref.quote not in used:
                used.append(ref.quote)
            if n not in numbers:
                numbers.append(n)
        return sorted(numbers)

    def marks(self, claim_ids: list[str]) -> tuple[str, list[int]]:
        numbers = sorted({n for cid in claim_ids for n in self.cite(cid)})
        return "".join(f"[{n}]" for n in numbers), numbers


def _confirmed(data: ReportData) -> list[MergedClaim]:
    return [data.claims[cid] for cid, v in data.verdicts.items() if v.confirmed]


def _refuted(data: ReportData) -> list[MergedClaim]:
    return [data.claims[cid] for cid, v in data.verdicts.items() if not v.confirmed]


def render_markdown(data: ReportData) -> str:
    cites = Citations(data)
    out = [f"# Deep Dive: {md_inline(data.question)}", "",
           f"*{data.date} · model {md_inline(data.model)} · profile {data.profile} · "
           f"status: {STATUS_TEXT[data.status]}*", ""]
    out += _answer_sections(data, cites)
    out += ["## Findings", ""] + _findings(data, cites)
    out += ["## Open Questions", ""] + _open_questions(data)
    out += ["## Sources", ""] + _sources(data, cites)
    out += ["## Run statistics", ""] + _stats_table(data)
    return "\n".join(out).rstrip() + "\n"


def _answer_sections(data: ReportData, cites: Citations) -> list[str]:
    syn = data.synthesis
    short = md_inline(data.short_answer).rstrip(".").strip()
    marks, _ = cites.marks([cid for cid in data.answer_claims if cid in data.claims])
    direct = f"**{short}.**{' ' + marks if marks else ''}" if short else ""
    if syn is not None:
        answer = " ".join(part for part in (direct, md_inline(syn.answer)) if part)
        return ["## Answer", "", answer or "_No answer was written._", "",
                "## Executive Summary", "", md_inline(syn.executive_summary) or "_None._", ""]
    explain = {
        RunStatus.inconclusive: "Inconclusive. Claims were found, but none survived adversarial "
                        "verification (refuted, or too few valid votes); they are listed below "
                        "with their votes.",
        RunStatus.no_evidence: "No answer: sources were read, but none gave a claim whose quote could be "
                       "found in the source text.",
        RunStatus.no_sources: "No answer: the searches found no source that could be read.",
        RunStatus.plan_failed: "No answer: the research could not start because planning failed.",
        RunStatus.synthesis_failed: "The report text could not be written; the verified claims are "
                            "listed below as they are, each with its sources.",
    }.get(data.status, "No answer.")
    summary = md_inline(data.error) if data.error else "See the run statistics below for what was tried."
    explain = f"{direct} {explain}" if direct else explain
    return ["## Answer", "", explain, "", "## Executive Summary", "", summary, ""]


def _findings(data: ReportData, cites: Citations) -> list[str]:
    lines: list[str] = []
    syn = data.synthesis
    if syn is not None and syn.findings:
        for theme, statements in syn.findings:
            lines += [f"### {md_inline(theme)}", ""]
            for st in statements:
                marks, _ = cites.marks(st.claim_ids)
                lines.append(f"- {md_inline(st.text)} {marks}")
            lines.append("")
        return lines
    confirmed = _confirmed(data)
    if confirmed:
        lines += ["### Verified claims", ""]
        for claim in confirmed:
            marks, _ = cites.marks([claim.id])
            lines.append(f"- {md_inline(claim.text)} {marks}")
        lines.append("")
    refuted = _refuted(data)
    if data.status == RunStatus.inconclusive and refuted:
        lines += ["### Claims not confirmed", ""]
        for claim in refuted:
            marks, _ = cites.marks([claim.id])
            verdict = data.verdicts[claim.id]
            reasons = "; ".join(md_inline(v.reason) for v in verdict.votes if v.reason)
            lines.append(f"- {md_inline(claim.text)} {marks} (refutations {verdict.refutations}, "
                         f"valid votes {verdict.valid_votes}: {reasons or 'no reasons'})")
        lines.append("")
    return lines or ["_No verified findings._", ""]


# Gaps of the sub-questions listed as open questions when the writer gave none.
MAX_OPEN_QUESTIONS = 5  # as many as the writer's draft may hold (contracts.ReportDraft)


def open_questions(data: ReportData) -> list[str]:
    """The writer's open questions, else the sub-questions' gaps, each once, at most
    ``MAX_OPEN_QUESTIONS``: the one list the markdown and the JSON both show. Two questions
    that differ only in case, articles or punctuation are one ("Where was the author born?" and
    "Where was the Author born"): sub-questions of one run often leave both."""
    if data.synthesis and data.synthesis.open_questions:
        asked = list(data.synthesis.open_questions)
    else:
        asked = [g for n in data.nodes for g in n.gaps]
    kept: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for question in asked:
        key = _question_key(question)
        if key and key not in seen:
            seen.add(key)
            kept.append(" ".join(question.split()))
    return kept[:MAX_OPEN_QUESTIONS]


_ARTICLES = frozenset({"a", "an", "the"})


def _question_key(question: str) -> tuple[str, ...]:
    """The words of a question, lower-cased, without punctuation or articles."""
    words = re.findall(r"\w+", question.lower())
    return tuple(w for w in words if w not in _ARTICLES)


def _open_questions(data: ReportData) -> list[str]:
    questions = open_questions(data)
    return [f"- {md_inline(q)}" for q in questions] + [""] if questions else ["_None recorded._", ""]


def _sources(data: ReportData, cites: Citations) -> list[str]:
    if not cites.numbers:
        return ["_No source was cited._", ""]
    lines: list[str] = []
    for url, n in sorted(cites.numbers.items(), key=lambda kv: kv[1]):
        src = data.sources.get(url)
        title = md_inline(src.title if src and src.title else url)
        quality = src.quality.value if src and src.quality else "unrated"
        published = md_inline(src.published) if src and src.published else "date unknown"
        # A local document is linked as its file, at the cited page where it has one.
        lines.append(f"[{n}] {title} - {md_url(src.link if src and src.link else url)}  ")
        lines.append(f"quality: {quality} · published: {published}")
        lines.append("")
        for quote in cites.quotes.get(url, []):
            lines.append(f"> \"{md_inline(quote)}\"")
            lines.append("")
    return lines


STAT_ROWS = [
    ("nodes", "sub-questions researched"), ("gap_nodes", "of which from the gap round"),
    ("nodes_failed", "sub-questions failed"), ("plan_repairs", "plan repairs"),
    ("plan_draws", "plans drawn"),
    ("searches", "searches"), ("search_errors", "search errors"), ("hits", "search hits"),
    ("url_duplicates", "URL duplicates"), ("budget_drops", "fetch budget drops"),
    ("node_cap_drops", "hits over a node's source cap"),
    ("sources_fetched", "sources read"), ("sources_failed", "sources failed"),
    ("sources_off_topic", "sources not read (no sentence near the research)"),
    ("claims_extracted", "claims extracted"), ("quotes_rejected", "quotes rejected (not in source)"),
    ("claims_from_quote", "claims restated as their quote (wording not in it)"),
    ("extraction_failures", "extractions failed"), ("claims_merged", "claims merged as duplicates"),
    ("claims_after_dedup", "distinct claims"),
    ("claims_tangential", "claims not verified (tangential to their sub-question)"),
    ("claims_off_subject", "claims not verified (about other named things than the research)"),
    ("verified", "claims verified"),
    ("confirmed", "claims confirmed"),
    ("confirmed_verbatim", "of which the very sentence they quote (no vote needed)"),
    ("claims_restated", "of which a killed claim's quoted sentence, kept"),
    ("killed", "claims killed"),
    ("votes_valid", "valid votes"), ("votes_invalid", "failed or abstaining votes"),
    ("votes_skipped", "votes not cast (outcome already decided)"),
    ("citations_dropped", "citations dropped (not verified)"),
    ("statements_dropped", "statements dropped (no verified citation, or not resting on it)"),
    ("texts_dropped", "answer or summary dropped (not resting on the verified claims)"),
    ("calls", "structured model calls"), ("cache_hits", "of which replayed from the call cache"),
    ("model_calls", "model generations run (retries included)"),
    ("model_failures", "model outputs invalid after retries"),
    ("tokens_submitted", "prompt tokens submitted"), ("tokens_evaluated", "prompt tokens evaluated"),
    ("tokens_generated", "tokens generated"), ("tokens_sampled", "of which sampled"),
    ("tokens_forced", "of which fast-forwarded (forced by the grammar)"),
    ("repetition_stops", "outputs stopped as repetitive"),
    ("mask_seconds", "grammar mask seconds"), ("decode_seconds", "model decode seconds"),
    ("llm_seconds", "model busy seconds"),
    ("wall_seconds", "wall seconds"), ("llm_busy_share", "model busy share of wall time"),
]


def stat_lines(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value as shown) for each stat of ``STAT_ROWS`` the run has, then the seconds
    per phase: the rows the markdown report and the HTML export both show."""
    rows = [(label, f"{stats[key]:.2f}" if isinstance(stats[key], float) else str(stats[key]))
            for key, label in STAT_ROWS if key in stats]
    phases = stats.get("phase_seconds") or {}
    if isinstance(phases, dict) and phases:
        rows.append(("seconds per phase", ", ".join(f"{k} {v:.1f}" for k, v in phases.items()
                                                     if isinstance(v, (int, float)))))
    return rows


def _stats_table(data: ReportData) -> list[str]:
    stats = data.stats
    lines = ["| stat | value |", "| --- | --- |"] + [f"| {label} | {value} |" for label, value in stat_lines(stats)]
    for message in stats.get("search_error_messages", [])[:5]:
        lines.append(f"| search error | {md_inline(message)} |")
    if stats.get("unresponsive_engines"):
        lines.append("| unresponsive engines | " + md_inline(", ".join(stats["unresponsive_engines"])) + " |")
    return lines + [""]


def render_json(data: ReportData) -> dict[str, Any]:
    """Everything: the report text with its citations, plan, claims, votes, sources, stats."""
    cites = Citations(data)
    # In the markdown's order: the direct answer's citations are numbered first.
    answer_ids = [cid for cid in data.answer_claims if cid in data.claims]
    answer_numbers = cites.marks(answer_ids)[1] if data.short_answer else []
    findings = []
    if data.synthesis is not None and data.synthesis.findings:
        for theme, statements in data.synthesis.findings:
            findings.append({"theme": theme, "statements": [
                {"text": st.text, "claim_ids": st.claim_ids, "citations": cites.marks(st.claim_ids)[1]}
                for st in statements]})
    elif _confirmed(data):
        # As the markdown does: with no usable statement, the verified claims are the findings.
        findings.append({"theme": "Verified claims", "statements": [
            {"text": claim.text, "claim_ids": [claim.id], "citations": cites.marks([claim.id])[1]}
            for claim in _confirmed(data)]})
    if data.status == RunStatus.inconclusive:
        for claim in _refuted(data):
            cites.marks([claim.id])
    return {
        "question": data.question, "status": RunStatus(data.status).value, "date": data.date, "model": data.model,
        "profile": data.profile, "run_id": data.run_id, "error": data.error or None,
        "short_answer": data.short_answer,
        "answer_claims": answer_ids if data.short_answer else [],
        "answer_citations": answer_numbers,
        "answer": data.synthesis.answer if data.synthesis else "",
        "executive_summary": data.synthesis.executive_summary if data.synthesis else "",
        "findings": findings,
        "open_questions": open_questions(data),
        "sources": [_source_json(data, url, n, cites) for url, n in
                    sorted(cites.numbers.items(), key=lambda kv: kv[1])],
        "plan": {"effort": data.effort, "repairs": data.repairs,
                 "nodes": [n.model_dump(mode="json") for n in data.nodes]},
        "claims": [{**c.model_dump(mode="json"), "support": c.support,
                    "verdict": data.verdicts[c.id].model_dump(mode="json") if c.id in data.verdicts else None}
                   for c in data.claims.values()],
        "checks": {"disabled": data.checks_disabled, "counts": data.stats.get("checks", {}),
                   "fired": data.checks_fired},
        "stats": data.stats,
    }


def _source_json(data: ReportData, url: str, n: int, cites: Citations) -> dict[str, Any]:
    src = data.sources.get(url)
    return {"n": n, "url": url, "link": src.link if src and src.link else url, "title": src.title if src else "",
            "quality": src.quality.value if src and src.quality else None,
            "published": src.published if src else None, "quotes": cites.quotes.get(url, [])}


__all__ = ["render_markdown", "render_json", "md_inline", "md_url", "plain_line"]
