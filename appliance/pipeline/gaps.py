"""Gaps: one round only. The nodes' open gaps become at most N new sub-questions.

The round is a single step of the orchestrator, never a loop: the new nodes' own gaps are
not looked at again.
"""

from __future__ import annotations

from ..contracts import GapQuestions, MergedClaim, NodeState, bounded
from . import prompts
from .forms import echoes_example
from .gather import dedupe_text
from .state import RunContext, ask

MAX_KNOWN = 10


def collect_gaps(nodes: list[NodeState]) -> list[str]:
    return dedupe_text([gap for node in nodes for gap in node.gaps])


def gap_nodes(run: RunContext, nodes: list[NodeState], confirmed: list[MergedClaim]) -> list[NodeState]:
    """New sub-questions for the gap round (empty when there are no gaps or the round is off)."""
    limit = run.settings.pipeline.gap_questions
    gaps = collect_gaps(nodes)
    if limit <= 0 or not gaps:
        return []
    known = "\n".join(f"- {c.text}" for c in confirmed[:MAX_KNOWN])
    messages = prompts.gaps(run.ctx, "\n".join(f"- {g}" for g in gaps[:8]), known, limit)
    out = ask(run, run.models.planner, messages, bounded(GapQuestions, questions=(0, limit)),
              max_tokens=prompts.GAPS_TOKENS, purpose="gaps")
    if out is None:
        return []
    asked = {n.question.lower() for n in nodes}
    new: list[NodeState] = []
    for question in out.questions:
        question = " ".join(question.split())[:300]
        if run.checks.applies("example-echo", lambda: echoes_example(question, run.ctx.question, known, *gaps),
                       on=f"gap question {question!r}"):
            continue
        if question and question.lower() not in asked and len(new) < limit:
            asked.add(question.lower())
            new.append(NodeState(id=f"g{len(new) + 1}", question=question, from_gap_round=True))
    return new
