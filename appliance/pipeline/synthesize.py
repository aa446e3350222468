"""Synthesize: the writer turns verified claims into the report's text.

The writer sees confirmed claims only, under short ids (c1, c2, ...). A statement may cite
only those ids: other ids are dropped and counted, and a statement left with no citation is
dropped and counted too, so every statement in a report rests on verified, quoted claims.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..contracts import MergedClaim, ReportDraft
from . import prompts
from .state import RunContext


@dataclass
class CitedStatement:
    text: str
    claim_ids: list[str]


@dataclass
class Synthesis:
    answer: str
    executive_summary: str
    findings: list[tuple[str, list[CitedStatement]]] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)


def short_ids(claims: list[MergedClaim]) -> dict[str, str]:
    return {f"c{i}": c.id for i, c in enumerate(claims, start=1)}


def claims_listing(claims: list[MergedClaim]) -> str:
    return "\n".join(f"{sid}: {claim.text}" for sid, claim in zip(short_ids(claims), claims))


def synthesize(run: RunContext, confirmed: list[MergedClaim]) -> Synthesis:
    """Ask the writer for the report (raises ModelOutputError; the caller falls back)."""
    messages = prompts.synthesize(run.ctx, claims_listing(confirmed))
    draft = run.models.writer.structured(messages, ReportDraft, max_tokens=prompts.REPORT_TOKENS,
                                         purpose="synthesize")
    return check_citations(run, draft, short_ids(confirmed), claims_listing(confirmed))


def check_citations(run: RunContext, draft: ReportDraft, ids: dict[str, str],
                    claims_text: str = "") -> Synthesis:
    """Keep statements that cite verified claims; count what is dropped.

    Text that echoes the prompt's worked example instead of the claims is dropped too.
    """
    def echo(text: str) -> bool:
        return prompts.echoes_example(text, run.ctx.question, claims_text)

    findings: list[tuple[str, list[CitedStatement]]] = []
    for finding in draft.findings:
        kept: list[CitedStatement] = []
        for statement in finding.statements:
            cited: list[str] = []
            for raw in statement.claim_ids:
                key = raw.strip().strip("[]").lower()
                if key in ids and ids[key] not in cited:
                    cited.append(ids[key])
                else:
                    run.stats.add(citations_dropped=1)
            text = " ".join(statement.text.split())
            if cited and text and not echo(text):
                kept.append(CitedStatement(text=text, claim_ids=cited))
            else:
                run.stats.add(statements_dropped=1)
        if kept:
            findings.append((" ".join(finding.theme.split()) or "Findings", kept))
    answer = " ".join(draft.answer.split())
    summary = " ".join(draft.executive_summary.split())
    return Synthesis(answer="" if echo(answer) else answer,
                     executive_summary="" if echo(summary) else summary,
                     findings=findings,
                     open_questions=[q for q in (" ".join(x.split()) for x in draft.open_questions)
                                     if q and not echo(q)])
