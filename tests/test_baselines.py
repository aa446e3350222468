"""The eval baselines' control flow (a scripted model over a tiny in-memory collection): the
iterative rounds, and the answer checks every mode shares with the pipeline. The real model
runs them end to end in tests/test_eval.py."""

from __future__ import annotations

import pytest

from appliance.contracts import Hit, IterativeStep, ShortAnswer, Source
from appliance.errors import ModelOutputError
from appliance.evaluation import baselines

from fakes import FakeEngine

PAGES = {
    "u1": ("Lake Ormund", "Lake Ormund lies in the Varn Valley. The lake was dammed by Edda Vask in 1911."),
    "u2": ("Edda Vask", "Edda Vask was an engineer born in Trelby."),
    "u3": ("Trelby", "Trelby is a town on the coast of Norland."),
}


KEYWORDS = {"u1": {"lake", "ormund", "dammed"}, "u2": {"edda", "vask"}, "u3": {"trelby", "norland"}}


class Collection:
    """Search by keywords: the pages sharing a word with the query, in page order."""

    name = "test"

    def __init__(self):
        self.queries: list[str] = []

    def search(self, query: str, limit: int) -> list[Hit]:
        self.queries.append(query)
        words = set(query.lower().replace("?", "").split())
        return [Hit(url=u, title=PAGES[u][0]) for u in PAGES if words & KEYWORDS[u]][:limit]


class Fetcher:
    def fetch_many(self, urls):
        return [Source(url=u, title=PAGES[u][0], text=PAGES[u][1]) for u in urls]


QUESTION = "Where was the engineer who dammed Lake Ormund born?"


def run_iterative(steps, answer="Trelby"):
    queue = list(steps)
    engine = FakeEngine({"iterative-step": lambda m, s: queue.pop(0),
                         "iterative-answer": lambda m, s: ShortAnswer(answer=answer)})
    backend = Collection()
    out = baselines.iterative(QUESTION, writer=engine, backend=backend, fetcher=Fetcher(), temperature=0.0)
    return out, engine, backend


def test_iterative_searches_again_with_what_it_read():
    out, engine, backend = run_iterative([IterativeStep(known="Edda Vask dammed it.", next_search="Edda Vask"),
                                          IterativeStep(known="Born in Trelby.", next_search="")])
    assert out.searches == [QUESTION, "Edda Vask"]
    assert out.cited_urls == ["u1", "u2"]
    assert out.answer == "Trelby"
    assert [p for p, _ in engine.calls] == ["iterative-step", "iterative-step", "iterative-answer"]
    # The answer read every passage found, in the order found.
    assert backend.queries == [QUESTION, "Edda Vask"]


def test_iterative_stops_at_three_searches_and_never_repeats_one():
    out, engine, _ = run_iterative([IterativeStep(known="", next_search="Edda Vask"),
                                    IterativeStep(known="", next_search="Trelby Norland")])
    assert out.searches == [QUESTION, "Edda Vask", "Trelby Norland"]
    assert [p for p, _ in engine.calls].count("iterative-step") == 2  # no step after the last search
    again, engine, _ = run_iterative([IterativeStep(known="", next_search=QUESTION.upper())])
    assert again.searches == [QUESTION]
    assert [p for p, _ in engine.calls] == ["iterative-step", "iterative-answer"]


def test_a_failed_step_still_answers_from_what_was_found():
    out, engine, _ = run_iterative([ModelOutputError("iterative-step: invalid output")])
    assert out.searches == [QUESTION] and out.cited_urls == ["u1"]
    assert [p for p, _ in engine.calls] == ["iterative-step", "iterative-answer"]


def test_baselines_answers_pass_the_pipelines_answer_checks():
    # An answer naming what no passage read names is no answer, as in the pipeline.
    out, _, _ = run_iterative([IterativeStep(known="", next_search="")], answer="Oslo")
    assert out.answer == "" and out.raw == "Oslo"
    engine = FakeEngine({"rag-answer": lambda m, s: ShortAnswer(answer="unknown"),
                         "closed-book-answer": lambda m, s: ShortAnswer(answer="Yes")})
    rag = baselines.rag(QUESTION, writer=engine, backend=Collection(), fetcher=Fetcher(), temperature=0.0)
    assert rag.answer == "" and rag.raw == "unknown" and rag.fired == ["answer-none"]
    assert out.fired == ["answer-rests"]
    # Yes answers only a yes/no question; from memory nothing is read, so only the form counts.
    assert baselines.closed_book(QUESTION, writer=engine, temperature=0.0).answer == ""
    engine = FakeEngine({"closed-book-answer": lambda m, s: ShortAnswer(answer="Trelby.")})
    kept = baselines.closed_book(QUESTION, writer=engine, temperature=0.0)
    assert kept.answer == "Trelby" and kept.fired == []


def test_a_choice_is_answered_with_one_of_its_two_in_every_mode():
    """Check answer-choice: a question asking which of two named things is answered under a
    grammar that allows only those two names (or unknown), in the baselines as in the pipeline,
    and the check is named on the answer; switched off, the answer is free text again."""
    from appliance.contracts import NO_CHOICE
    from appliance.pipeline.checks import Switches
    from appliance.pipeline.forms import offered_choice

    question = "Which was dammed first, Lake Ormund or Lake Tarn?"
    assert offered_choice(question) == ["Lake Ormund", "Lake Tarn"]
    assert offered_choice("Were Lake Ormund and Lake Tarn both dammed?") == []
    assert offered_choice("Is Lake Ormund older than Lake Tarn?") == []
    assert offered_choice(question, Switches({"answer-choice"})) == []

    seen = {}

    def answer(messages, seed):
        seen["system"] = messages[0]["content"]
        return {"answer": "Lake Ormund"}

    engine = FakeEngine({"rag-answer": answer})
    out = baselines.rag(question, writer=engine, backend=Collection(), fetcher=Fetcher(), temperature=0.0)
    assert out.answer == "Lake Ormund" and out.fired == ["answer-choice"]
    enum = engine.schemas[-1][1].model_json_schema()["properties"]["answer"]["enum"]
    assert enum == ["Lake Ormund", "Lake Tarn", NO_CHOICE]
    assert "answer with Lake Ormund or with Lake Tarn" in seen["system"]

    off = baselines.rag(question, writer=engine, backend=Collection(), fetcher=Fetcher(), temperature=0.0,
                        switches=Switches({"answer-choice"}))
    assert engine.schemas[-1][1] is ShortAnswer and off.fired == []


@pytest.mark.parametrize("question,choices", [
    # Two names joined by "and" offer a choice where the question asks which one is first,
    # more or -er, and names them as its subject or after "between", "of" or a comma.
    ("Lake Ormund and Lake Tarn were dammed in which years; which was dammed first?", ["Lake Ormund", "Lake Tarn"]),
    ("Between Lake Ormund and Lake Tarn, which is deeper?", ["Lake Ormund", "Lake Tarn"]),
    ("Which of Lake Ormund and Lake Tarn holds more water?", ["Lake Ormund", "Lake Tarn"]),
    ("Who was born later, Ida Brandt and Jon Lindqvist?", ["Ida Brandt", "Jon Lindqvist"]),
    # A question written as two sentences: the first is background, the second asks. What the
    # background says of both ("each other") does not make the question one about both.
    ("Lake Ormund and Lake Tarn were dammed within a year of each other. Which was dammed first?",
     ["Lake Ormund", "Lake Tarn"]),
    # No choice: nothing ranked, a question about both or what they share, a yes/no question,
    # or two names that are parts of one fact.
    ("Between Lake Ormund and Lake Tarn, which town lies?", []),
    ("Which river feeds both Lake Ormund and Lake Tarn more water?", []),
    ("Which county are Lake Ormund and Lake Tarn in, the larger one?", []),
    ("Are Lake Ormund and Lake Tarn deeper than the sea?", []),
    ("Which engineer dammed Lake Ormund and Lake Tarn first?", []),
    ("Which dam, built by Ida Brandt and Jon Lindqvist, is the largest?", []),
    ("Lake Ormund and Lake Tarn were dammed first. Which town lies between them?", []),
    ("Which of Lake Ormund and Lake Tarn did Mr. Brandt dam first, each in its year?", []),
])
def test_a_choice_named_with_and_is_offered_only_when_the_question_ranks_the_two(question, choices):
    from appliance.pipeline.forms import offered_choice

    assert offered_choice(question) == choices
