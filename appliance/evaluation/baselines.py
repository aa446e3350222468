"""The baselines the pipeline must beat, with the same model, corpus and answer checks.

- ``rag``: one search for the question, its top passages, one short-answer call.
- ``iterative``: retrieve, read, retrieve again with what was learnt (IRCoT / Self-Ask
  style): up to ``ITERATIVE_ROUNDS`` searches, each followed by one call that says what the
  passages so far establish and names the next search (or none), then the short-answer call
  over every passage found.
- ``closed-book``: the short-answer call alone, from the model's memory.

Every answer goes through ``forms.checked_answer``, the checks the pipeline's own
direct answer passes (the asked form, no restating of the question, no "unknown", yes or no
only for a yes/no question, the part of a sentence that answers; and, where passages were
read, resting on them), so all modes are scored on one set of terms. The raw model answer is
kept beside the checked one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import questions
from ..contracts import IterativeStep, Source, answer_schema
from ..errors import ModelOutputError
from ..pipeline import prompts
from ..pipeline.anchor import passages_text
from ..pipeline.checks import ALL_ON, Switches
from ..pipeline.forms import checked_answer, held_answer

RAG_PASSAGES = 5
ITERATIVE_ROUNDS = 3


@dataclass
class BaselineAnswer:
    """A baseline's checked answer, the model's raw one, and the passages it read."""

    answer: str
    raw: str
    cited_urls: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)  # the answer checks that fired on it
    read: str | None = None  # the evidence its answer call read (None: closed-book)


def _answer(writer, question: str, evidence: str | None, purpose: str, temperature: float,
            switches: Switches) -> tuple[str, str, list[str]]:
    """The checked answer, the raw one, and the ids of the answer checks that fired."""
    held = held_answer(question, evidence, switches)
    messages = prompts.short_answer(question, evidence, _today(), held.choices)
    out = writer.structured(messages, answer_schema(held.allowed), max_tokens=prompts.ANSWER_TOKENS,
                            purpose=purpose, temperature=temperature)
    answer, fired = checked_answer(out.answer, evidence, question, switches)
    return answer, out.answer, [check_id for check_id, _ in held.firings()] + fired


def _read(backend, fetcher, query: str, seen: list[str]) -> list[Source]:
    """The top passages of ``query`` not read before (a page is read once per question);
    their URLs are added to ``seen`` in rank order."""
    urls = [h.url for h in backend.search(query, RAG_PASSAGES) if h.url not in seen]
    seen.extend(urls)
    return [s for s in fetcher.fetch_many(urls) if s.ok] if urls else []


def rag(question: str, *, writer, backend, fetcher, temperature: float,
        switches: Switches = ALL_ON) -> BaselineAnswer:
    """One retrieval of the question's top passages and one short-answer call."""
    hits = backend.search(question, RAG_PASSAGES)
    sources = [s for s in fetcher.fetch_many([h.url for h in hits]) if s.ok]
    evidence = passages_text(sources)
    answer, raw, fired = _answer(writer, question, evidence, "rag-answer", temperature, switches)
    return BaselineAnswer(answer, raw, [h.url for h in hits], [question], fired, evidence)


def iterative(question: str, *, writer, backend, fetcher, temperature: float,
              rounds: int = ITERATIVE_ROUNDS, switches: Switches = ALL_ON) -> BaselineAnswer:
    """Search, read, and search again with what was read, up to ``rounds`` searches; then the
    short answer from every passage found. A step that fails to give valid output ends the
    searching (the answer is still read from what was found); a search repeated is not run."""
    seen: list[str] = []
    sources: list[Source] = []
    searches: list[str] = []
    query = question
    for round_number in range(1, rounds + 1):
        searches.append(query)
        sources += _read(backend, fetcher, query, seen)
        if round_number == rounds:
            break
        messages = prompts.iterative_step(question, passages_text(sources), searches, _today())
        try:
            step = writer.structured(messages, IterativeStep, max_tokens=prompts.ITERATIVE_STEP_TOKENS,
                                     purpose="iterative-step", temperature=temperature)
        except ModelOutputError:
            break
        query = " ".join(step.next_search.split())
        if not query or query.lower() in (s.lower() for s in searches):
            break
    evidence = passages_text(sources)
    answer, raw, fired = _answer(writer, question, evidence, "iterative-answer", temperature, switches)
    return BaselineAnswer(answer, raw, seen, searches, fired, evidence)


def closed_book(question: str, *, writer, temperature: float, switches: Switches = ALL_ON) -> BaselineAnswer:
    """The model alone: no passages (the answer's form is checked, not its grounding)."""
    answer, raw, fired = _answer(writer, question, None, "closed-book-answer", temperature, switches)
    return BaselineAnswer(answer, raw, fired=fired)


def _today() -> str:
    return questions.today().isoformat()
