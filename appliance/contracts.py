"""The contracts at phase boundaries: what each model call must return (its JSON Schema becomes
a llama.cpp grammar) and the records that flow between phases. Read this file first.

Model-output schemas keep strings and lists bounded so that a small model cannot ramble past
its output budget, and carry labels as enums (rule 4) so downstream code ranks by label alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any
from typing import Literal, Optional, TypeVar, cast, get_args

from pydantic import BaseModel, ConfigDict, Field


# ---------------------------------------------------------------- names used everywhere

# Each is defined here once; settings, the CLI's choices and the code import them.
Profile = Literal["quick", "standard", "deep"]
Backend = Literal["auto", "searxng", "corpus"]
Role = Literal["planner", "extractor", "verifier", "writer"]
EvalMode = Literal["pipeline", "rag", "iterative", "closed-book"]
PROFILES: tuple[str, ...] = get_args(Profile)
BACKENDS: tuple[str, ...] = get_args(Backend)
ROLES: tuple[str, ...] = get_args(Role)
EVAL_MODES: tuple[str, ...] = get_args(EvalMode)


class RunStatus(StrEnum):
    """How a run ended. ``plan_failed`` and ``error`` are failures (non-zero exit, counted as
    failed by batch); the others are reports that answer, or say plainly why they cannot."""

    complete = "complete"
    inconclusive = "inconclusive"
    no_evidence = "no_evidence"
    no_sources = "no_sources"
    synthesis_failed = "synthesis_failed"
    plan_failed = "plan_failed"
    error = "error"
    # Stopped on request (a served job's cancel) at its next model call; the report holds
    # what was done until then. Not a failure: nobody's run broke.
    cancelled = "cancelled"

    @property
    def failed(self) -> bool:
        return self in (RunStatus.plan_failed, RunStatus.error)


class SourceQuality(str, Enum):
    primary = "primary"
    secondary = "secondary"
    blog = "blog"
    forum = "forum"
    unreliable = "unreliable"


class Importance(str, Enum):
    central = "central"
    supporting = "supporting"
    tangential = "tangential"


QUALITY_RANK = {q: i for i, q in enumerate(SourceQuality)}
IMPORTANCE_RANK = {v: i for i, v in enumerate(Importance)}


class _Out(BaseModel):
    """Base of model outputs: no extra keys, so the grammar and the validator agree."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- model outputs

class PlanNode(_Out):
    id: str = Field(max_length=12, description="short id such as q1")
    question: str = Field(max_length=300)
    depends_on: list[str] = Field(default_factory=list, max_length=4)


class Plan(_Out):
    effort: int = Field(ge=1, le=5, description="search queries per sub-question, 1 simple to 5 complex")
    nodes: list[PlanNode] = Field(min_length=1, max_length=12)


class SearchQueries(_Out):
    queries: list[str] = Field(min_length=1, max_length=5)


class ExtractedClaim(_Out):
    claim: str = Field(max_length=300)
    quote: str = Field(max_length=400)
    importance: Importance


class Extraction(_Out):
    source_quality: SourceQuality
    publish_date: Optional[str] = Field(default=None, max_length=40)
    claims: list[ExtractedClaim] = Field(default_factory=list, max_length=5)


class Reflection(_Out):
    insights: list[str] = Field(default_factory=list, max_length=3)
    gaps: list[str] = Field(default_factory=list, max_length=3)
    contradictions: list[str] = Field(default_factory=list, max_length=3)
    queries: list[str] = Field(default_factory=list, max_length=5)


class VoteVerdict(str, Enum):
    """What one vote found: the quotes state the claim, contradict it, or say neither."""

    supported = "supported"
    refuted = "refuted"
    insufficient = "insufficient"


class Vote(_Out):
    # The reason comes first, so the verdict the grammar asks for next is conditioned on it.
    # One short sentence: every token of it is sampled, and votes are the most frequent call.
    reason: str = Field(max_length=200)
    verdict: VoteVerdict


class GapQuestions(_Out):
    questions: list[str] = Field(default_factory=list, max_length=3)


class Statement(_Out):
    text: str = Field(max_length=400)
    claim_ids: list[str] = Field(default_factory=list, max_length=6)


class Finding(_Out):
    theme: str = Field(max_length=120)
    statements: list[Statement] = Field(min_length=1, max_length=6)


class ReportDraft(_Out):
    answer: str = Field(max_length=400)
    executive_summary: str = Field(max_length=1500)
    findings: list[Finding] = Field(default_factory=list, max_length=6)
    open_questions: list[str] = Field(default_factory=list, max_length=5)


class ShortAnswer(_Out):
    """One-call answers (the rag and closed-book baselines)."""

    answer: str = Field(max_length=200)


# What a choice answer may also say: that the evidence does not decide (check answer-none drops it).
NO_CHOICE = "unknown"


def answer_schema(choices: list[str] | tuple[str, ...] = ()) -> type[ShortAnswer]:
    """ShortAnswer, or for a question offering a choice (``forms.offered_choice``) one whose
    answer the grammar holds to one of ``choices`` or NO_CHOICE."""
    if not choices:
        return ShortAnswer
    from pydantic import create_model

    allowed: Any = Literal[tuple(dict.fromkeys([*choices, NO_CHOICE]))]  # type: ignore[valid-type]
    return cast(type[ShortAnswer], create_model("ChoiceAnswer", __base__=ShortAnswer, answer=(allowed, ...)))


class IterativeStep(_Out):
    """One reading step of the iterative baseline: what the passages so far establish, and
    the next search ("" when they already answer the question)."""

    known: str = Field(max_length=300)
    next_search: str = Field(max_length=150)


# ---------------------------------------------------------------- records that flow

class _Rec(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Hit(_Rec):
    """One search result from any backend."""

    url: str
    title: str = ""
    snippet: str = ""
    engine: str = ""
    rank: int = 0
    query: str = ""


class Source(_Rec):
    """The outcome of fetching one URL: extracted text, or the reason it failed."""

    url: str
    norm_url: str = ""
    title: str = ""
    text: str = ""
    published: Optional[str] = None
    content_type: str = ""
    ok: bool = True
    error: Optional[str] = None
    # The page was longer than fetch.max_bytes and only its beginning was read.
    truncated: bool = False
    from_cache: bool = False
    quality: Optional[SourceQuality] = None
    # Where a reader opens it when that is not ``url``: a local document's file at its page
    # (file:///.../report.pdf#page=17) for a corpus passage.
    link: str = ""


class QuoteRef(_Rec):
    source_url: str
    quote: str


class Claim(_Rec):
    """A claim as extracted from one source, its quote checked against the source text."""

    id: str
    node_id: str
    text: str
    quote: str
    source_url: str
    source_title: str = ""
    importance: Importance
    source_quality: SourceQuality
    published: Optional[str] = None


class MergedClaim(_Rec):
    """Claims merged by meaning; support is the number of distinct sources."""

    id: str
    text: str
    importance: Importance
    source_quality: SourceQuality
    quotes: list[QuoteRef]
    members: list[str]
    node_ids: list[str]
    # The id of the claim the votes killed as worded, when this one is its quoted sentence.
    restated_from: Optional[str] = None

    @property
    def support(self) -> int:
        return len({q.source_url for q in self.quotes})


class VoteRecord(_Rec):
    """One vote as cast. ``valid`` is False for an abstention: an ``insufficient`` verdict, a
    failed call, an empty reason or one copied from the prompt's example."""

    claim_id: str
    seed: int
    valid: bool
    verdict: Optional[VoteVerdict] = None
    reason: str = ""
    # The check that made a cast vote an abstention (example-echo, vote-no-reason), if any.
    check: Optional[str] = None

    @property
    def supports(self) -> bool:
        return self.valid and self.verdict == VoteVerdict.supported

    @property
    def refutes(self) -> bool:
        return self.valid and self.verdict == VoteVerdict.refuted


class Verdict(_Rec):
    """The tally of a claim's votes: confirmed iff supporting votes >= min_valid_votes and
    refutations < refutations_to_kill. ``skipped`` votes were not cast because the outcome
    was already decided by the votes before them. A ``verbatim`` claim is word for word a
    sentence it quotes: confirmed with no vote, since the quote check has shown the quotes
    state it."""

    claim_id: str
    confirmed: bool
    supports: int = 0
    refutations: int
    valid_votes: int
    skipped: int = 0
    votes: list[VoteRecord]
    verbatim: bool = False


class NodeState(_Rec):
    """One sub-question as it moves through gather."""

    @property
    def asked(self) -> str:
        """The question its prompts and searches use: resolved once its parents are done."""
        return self.resolved or self.question

    @property
    def reads_only(self) -> bool:
        """A node added beside the plan (the question as asked, a compared thing): searched as
        given, read, its claims verified, no answer of its own (they go to the run's answer)."""
        return self.whole_question or bool(self.compares)


    id: str
    question: str
    depends_on: list[str] = []
    # The question as researched: references to earlier answers (#1, #2) filled in.
    resolved: str = ""
    status: str = "pending"
    queries: list[str] = []
    # The node's short answer (a name, date, number...), "" while unknown: children search with it.
    answer: str = ""
    findings: str = ""
    gaps: list[str] = []
    from_gap_round: bool = False
    # Its answer is left out of the final answer's chain: it asks the whole question, and the
    # gap round found the evidence short of answering it (check chain-superseded).
    answer_superseded: bool = False
    # The question as asked, researched beside the plan's sub-questions (see run.py).
    whole_question: bool = False
    # One of the things the question compares, researched on its own (see run.py).
    compares: str = ""
    error: Optional[str] = None


@dataclass
class CheckedPlan:
    """A plan after validation and repair; every repair is listed."""

    nodes: list[NodeState]
    effort: int
    repairs: list[str] = field(default_factory=list)


@dataclass
class CitedStatement:
    """A statement of the report and the ids of the confirmed claims it rests on."""

    text: str
    claim_ids: list[str]


@dataclass
class Synthesis:
    """The writer's text, its statements checked against the confirmed claims they cite."""

    answer: str
    executive_summary: str
    findings: list[tuple[str, list[CitedStatement]]] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything a report shows: built by the orchestrator, rendered by report.py."""

    question: str
    status: RunStatus
    date: str
    model: str
    profile: str
    run_id: str
    synthesis: Synthesis | None = None
    # The direct answer (yes/no, a name, date or number) drawn from the confirmed claims.
    short_answer: str = ""
    # The confirmed claims the direct answer rests on (each hop of a multi-hop chain): cited beside it.
    answer_claims: list[str] = field(default_factory=list)
    claims: dict[str, MergedClaim] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    nodes: list[NodeState] = field(default_factory=list)
    sources: dict[str, Source] = field(default_factory=dict)
    effort: int = 0
    repairs: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    # The checks switched off, and what each check that fired fired on (pipeline.checks).
    checks_disabled: list[str] = field(default_factory=list)
    checks_fired: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


# ---------------------------------------------------------------- per-run bounds

_BOUNDED: dict[tuple, type[BaseModel]] = {}


O = TypeVar("O", bound=BaseModel)


def bounded(schema: type[O], **limits: tuple[int, int]) -> type[O]:
    """``schema`` with tighter list lengths, e.g. ``bounded(Plan, nodes=(2, 3))``.

    The profile's limits then reach the grammar itself: a small model cannot spend tokens on
    items that would be cut anyway. Classes are cached, so each grammar compiles once.
    A bounded list is required, as the grammar makes it: a default would let the validator
    accept an answer the grammar rejects (a plan with no nodes, whatever ``low`` says).
    """
    key = (schema, tuple(sorted(limits.items())))
    if key not in _BOUNDED:
        from pydantic import create_model

        fields: dict[str, Any] = {}
        for name, (low, high) in limits.items():
            field = schema.model_fields[name]
            fields[name] = (field.annotation, Field(min_length=low, max_length=high,
                                                    description=field.description))
        suffix = "_".join(f"{n}{lo}to{hi}" for n, (lo, hi) in sorted(limits.items()))
        _BOUNDED[key] = create_model(f"{schema.__name__}_{suffix}", __base__=cast(type[BaseModel], schema),
                                     **fields)
    return cast("type[O]", _BOUNDED[key])


def quoting_extraction(max_claims: int, sentences: tuple[str, ...], restate: bool = True) -> type[Extraction]:
    """``Extraction`` whose quotes can only be whole sentences of the source (``sentences``).

    The grammar then admits nothing but a verbatim sentence: a small model cannot paraphrase
    its quote. The quote comes before the claim, so the claim restates the chosen sentence.
    ``restate`` false: no claim is written at all, the chosen sentence is the claim (each
    item's ``claim`` is its quote).
    """
    from typing import Literal

    from pydantic import create_model

    if restate:
        quoted = create_model("QuotedClaim", __base__=_Out,
                              quote=(Literal[sentences], ...),  # type: ignore[valid-type,arg-type]
                              claim=(str, Field(max_length=300)),
                              importance=(Importance, ...))
    else:
        quoted = create_model("QuotedSentence", __base__=_QuotedSentence,
                              quote=(Literal[sentences], ...))  # type: ignore[valid-type,arg-type]
    name = f"Extraction_quoted_{'claims' if restate else 'sentences'}0to{max_claims}"
    return create_model(name, __base__=Extraction,
                        claims=(list[quoted], Field(min_length=0, max_length=max_claims)))  # type: ignore[valid-type]


class _QuotedSentence(_Out):
    """A sentence of the source chosen as evidence, with no restatement: it is the claim."""

    quote: str
    importance: Importance

    @property
    def claim(self) -> str:
        return self.quote
