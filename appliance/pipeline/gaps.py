"""Gaps: one round only. The nodes' open gaps become at most N new sub-questions; where the
nodes left no gaps (one reading pass each records none), their only gap is the question
itself again, or the gaps give no new sub-question, the next hop is named from what was
verified: one step reads the question and the verified claims' quotes and names the one search
still missing (retrieve, read, retrieve again with what was learnt), which becomes one node.

The round is a single step of the orchestrator, never a loop: the new nodes' own gaps are
not looked at again.
"""

from __future__ import annotations

from ..contracts import GapQuestions, IterativeStep, MergedClaim, NodeState, bounded
from . import prompts
from .forms import echoes_example, restates
from .gather import dedupe_text
from .state import RunContext, ask
from .text import same_question

MAX_KNOWN = 10


def collect_gaps(nodes: list[NodeState]) -> list[str]:
    return dedupe_text([gap for node in nodes for gap in node.gaps])


def gap_nodes(run: RunContext, nodes: list[NodeState], confirmed: list[MergedClaim]) -> list[NodeState]:
    """New sub-questions for the gap round: from the nodes' open gaps, else (no gap, or none
    that gives a new sub-question) the one search the next-search step names; empty when it
    names none or the round is off."""
    limit = run.settings.pipeline.gap_questions
    if limit <= 0:
        return []
    gaps = [gap for gap in collect_gaps(nodes) if not run.checks.applies(
        "gap-restates", lambda: says_the_question_again(gap, run.ctx.question), on=f"gap {gap!r}")]
    if not gaps:
        return next_search_nodes(run, nodes, confirmed)
    known = "\n".join(f"- {c.text}" for c in confirmed[:MAX_KNOWN])
    messages = prompts.gaps(run.ctx, "\n".join(f"- {g}" for g in gaps[:8]), known, limit)
    out = ask(run, run.models.planner, messages, bounded(GapQuestions, questions=(0, limit)),
              max_tokens=prompts.GAPS_TOKENS, purpose="gaps")
    asked = {n.question.lower() for n in nodes}
    new: list[NodeState] = []
    for question in out.questions if out is not None else []:
        question = " ".join(question.split())[:300]
        if run.checks.applies("example-echo", lambda: echoes_example(question, run.ctx.question, known, *gaps),
                              on=f"gap question {question!r}"):
            continue
        if run.checks.applies("gap-restates", lambda: says_the_question_again(question, run.ctx.question),
                              on=f"gap question {question!r}"):
            continue
        if question and question.lower() not in asked and len(new) < limit:
            asked.add(question.lower())
            new.append(NodeState(id=f"g{len(new) + 1}", question=question, from_gap_round=True))
    # Open gaps the prompt turned into nothing new (none, a sub-question already asked, or
    # its call failed) still leave the question unanswered: the next-search step reads what
    # was verified and names the hop still missing, as it does when no gap was left (setting
    # gap_next_search).
    if new or not run.settings.pipeline.gap_next_search:
        return new
    return next_search_nodes(run, nodes, confirmed)


# Verified quotes the next-search step reads at most (best-ranked first).
MAX_STEP_QUOTES = 8


def says_the_question_again(gap: str, question: str) -> bool:
    """Check gap-restates: whether a gap asks the run's question again, in its words or nearly
    (each says the other: "Which river feeds the lake by Tarn?" for "What river feeds the lake
    near Tarn?"). A node that researched the question as asked and found no answer leaves the
    question as its gap; reworded, it is the same search again, while the next-search step
    reads what was verified and names the hop still missing. A gap that asks a part of the
    question ("Which lake is near Tarn?") is a gap."""
    return restates(gap, question) and restates(question, gap)


def next_search_nodes(run: RunContext, nodes: list[NodeState], confirmed: list[MergedClaim]) -> list[NodeState]:
    """The next hop, named from the verified evidence: one step reads the question and the
    confirmed claims' quotes (what the sources say, not the model's wording of it) and names
    the one search that would find what is still missing, or none when they answer the
    question. A plan that never reached the second hop ("Who founded the firm that built the
    Velka bridge?" researched as asked finds the builder, not its founder) gets it here: the
    search names what the first reading found ("Brandt and Sons founder"). The search becomes
    one node of the gap round, searched as it is; a search already run, or one that copies the
    prompt's example, is not."""
    quotes: list[str] = []
    for claim in confirmed:
        for ref in claim.quotes[:1]:
            source = run.sources.get(ref.source_url)
            title = source.title if source is not None else ""
            quotes.append(f"[{len(quotes) + 1}] {title}: {ref.quote}")
        if len(quotes) >= MAX_STEP_QUOTES:
            break
    searches = dedupe_text([q for node in nodes for q in node.queries])
    messages = prompts.iterative_step(run.ctx.question, "\n\n".join(quotes) or "nothing found yet",
                                      searches or [run.ctx.question], run.ctx.today)
    step = ask(run, run.models.planner, messages, IterativeStep, max_tokens=prompts.ITERATIVE_STEP_TOKENS,
               purpose="next-search")
    if step is None:
        return []
    search = " ".join(step.next_search.split())[:150]
    if not search or search.lower() in {q.lower() for q in searches} | {n.question.lower() for n in nodes}:
        return []
    if run.checks.applies("example-echo", lambda: echoes_example(search, run.ctx.question, *quotes),
                          on=f"next search {search!r}"):
        return []
    for node in nodes:
        # The step read every verified quote and found them short of the answer: a node's
        # answer to the whole question, read from fewer of them, is a guess, not a step of
        # the chain the final answer follows.
        if node.answer and run.checks.applies("chain-superseded", lambda: asks_the_question(node, run.ctx.question),
                                              on=f"answer of {node.id}", answer=node.answer):
            node.answer_superseded = True
    return [NodeState(id="g1", question=search, from_gap_round=True)]


def asks_the_question(node: NodeState, question: str) -> bool:
    """Check chain-superseded: whether a sub-question is the question as asked (case and
    spacing aside), as a plan with no fit draw researches it."""
    return same_question(node.question, question)
