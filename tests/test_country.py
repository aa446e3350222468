"""Check answer-country: a question asking which country is answered with one of the countries
its evidence names (or unknown), in the baselines as in the pipeline's node and final answers.
Places and people are invented; the countries are real, as the list of countries is."""

from __future__ import annotations

import pytest

from appliance.config import load_settings
from appliance.contracts import (NO_CHOICE, Extraction, GapQuestions, Hit, IterativeStep, Plan, PlanNode,
                                 ReportDraft, SearchQueries, ShortAnswer, Source)
from appliance.embed import get_embedder
from appliance.evaluation import baselines
from appliance.pipeline.checks import Switches
from appliance.pipeline.forms import held_answer, named_countries
from appliance.pipeline.parts import Models
from appliance.pipeline.places import countries_named
from appliance.pipeline.run import research

from fakes import FakeBackend, FakeEngine, FakeFetcher


@pytest.mark.parametrize("text,names", [
    ("Halvik is a village in Tornby County, Norway.", ["Norway"]),
    # The name the text uses, each once, in the order of first mention.
    ("Born in the U.S., she moved to Canada and back to the U.S. in 1990.", ["U.S.", "Canada"]),
    ("Brenfield, United States of America, and Kessel, United Kingdom.", ["United States of America", "United Kingdom"]),
    # A country's name inside a longer name is not that country.
    ("Santa Rosa is a town in New Mexico near Papua Street.", []),
    ("Port Moresby is the capital of Papua New Guinea.", ["Papua New Guinea"]),
    ("Dubbo lies in New South Wales, Australia.", ["Australia"]),
    ("He was born in the Soviet Union and later lived in Russia.", ["Soviet Union", "Russia"]),
    ("Indiana and Indianapolis name no country; neither does a canadian goose.", []),
    # Its people's name stands for the country, under the country's name.
    ("Halvik was founded by a Dutch sailor who later settled in Canada.", ["Netherlands", "Canada"]),
    ("A Norwegian ship and a ship of Norway.", ["Norway"]),
    ("", []),
])
def test_which_countries_a_text_names(text, names):
    assert countries_named(text) == names


def test_a_country_rests_on_evidence_that_names_only_its_people():
    from appliance.pipeline.forms import answer_rests_on

    assert answer_rests_on("Netherlands", "[c1] Halvik was founded by a Dutch sailor.")
    assert answer_rests_on("United States", "[c1] Ida Brandt is an American engineer.")
    assert not answer_rests_on("Belgium", "[c1] Halvik was founded by a Dutch sailor.")
    # Only a country's own people: a person's name is no country's.
    assert not answer_rests_on("Halvik", "[c1] A Dutch sailor founded it.")


def test_only_a_question_asking_which_country_with_evidence_is_held_to_its_countries():
    evidence = "[c1] Halvik is a village in Tornby County, Norway.\n[c2] Tornby County borders Sweden."
    assert named_countries("In which country is Halvik?", evidence) == ["Norway", "Sweden"]
    assert named_countries("What nation is Halvik in?", evidence) == ["Norway", "Sweden"]
    # Not asked for a country, read from nothing, no country in the evidence, or switched off.
    assert named_countries("In which county is Halvik?", evidence) == []
    assert named_countries("In which country is Halvik?", None) == []
    assert named_countries("In which country is Halvik?", "[c1] Halvik is a village in Tornby County.") == []
    assert named_countries("In which country is Halvik?", evidence, Switches({"answer-country"})) == []


def test_a_held_answer_offers_the_choice_first_and_the_countries_otherwise():
    evidence = "[c1] The Velka Bridge opened in 1931 in Norway. [c2] Ardmore Pier opened in 1920 in Sweden."
    choice = held_answer("Which opened first, the Velka Bridge or Ardmore Pier?", evidence)
    assert choice.allowed == ["Velka Bridge", "Ardmore Pier"] and choice.countries == []
    assert choice.firings() == [("answer-choice", {"choices": ["Velka Bridge", "Ardmore Pier"]})]
    country = held_answer("Which country is the Velka Bridge in?", evidence)
    assert country.choices == [] and country.allowed == ["Norway", "Sweden"]
    assert country.firings() == [("answer-country", {"countries": ["Norway", "Sweden"]})]
    free = held_answer("When did the Velka Bridge open?", evidence)
    assert free.allowed == [] and free.firings() == []
    assert held_answer("Which opened first, the Velka Bridge or Ardmore Pier?", evidence,
                       Switches({"answer-choice"})).allowed == []


class _Collection:
    name = "test"

    def search(self, query, limit):
        return [Hit(url="corpus://t/1", title="Halvik", rank=1)]


class _Fetcher:
    def fetch_many(self, urls):
        return [Source(url=u, title="Halvik", text="Halvik is a village in Tornby County, Norway.") for u in urls]


def test_a_country_question_is_answered_with_a_country_of_its_evidence_in_every_mode():
    """rag (and iterative, which shares its answer) under a grammar of the evidence's countries;
    closed-book reads nothing, so no list; switched off, free text again."""
    seen = {}

    def answer(messages, seed):
        seen["system"] = messages[0]["content"]
        return {"answer": "Norway"}

    question = "In which country is Halvik?"
    engine = FakeEngine({"rag-answer": answer, "closed-book-answer": lambda m, s: {"answer": "Norway"}})
    out = baselines.rag(question, writer=engine, backend=_Collection(), fetcher=_Fetcher(), temperature=0.0)
    assert out.answer == "Norway" and "answer-country" in out.fired
    assert engine.schemas[-1][1].model_json_schema()["properties"]["answer"]["enum"] == ["Norway", NO_CHOICE]
    # The grammar holds the answer; the instructions are those of any question asking a
    # country and list none (listed, they draw a small model to the one written out).
    assert seen["system"].startswith("Answer with the name of the country the question asks for, nothing else.")
    assert "Norway" not in seen["system"]

    closed = baselines.closed_book(question, writer=engine, temperature=0.0)
    assert engine.schemas[-1][1] is ShortAnswer and "answer-country" not in closed.fired

    off = baselines.rag(question, writer=engine, backend=_Collection(), fetcher=_Fetcher(), temperature=0.0,
                        switches=Switches({"answer-country"}))
    assert engine.schemas[-1][1] is ShortAnswer and "answer-country" not in off.fired


PAGES = {"http://a.test/halvik": "Halvik is a village in Tornby County. It has a harbour.",
         "http://b.test/tornby": "Tornby County is a county on the west coast of Norway."}
QUESTION = "In which country is the county that holds Halvik?"


def _run(tmp_path, disabled=()):
    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")}, overrides={
        "pipeline.quote_sentences": False, "pipeline.question_sources": 0, "pipeline.gap_questions": 0,
        "pipeline.relevance_threshold": 0.0, "checks.disabled": list(disabled)})
    script = {
        "plan": lambda m, s: Plan(effort=1, nodes=[
            PlanNode(id="q1", question="In which county is Halvik?"),
            PlanNode(id="q2", question="In which country is the county of Halvik?", depends_on=["q1"])]),
        "queries": lambda m, s: SearchQueries(queries=["halvik"]),
        "extract": lambda m, s: Extraction(source_quality="primary", claims=[
            {"claim": "Tornby County is in Norway.",
             "quote": "Tornby County is a county on the west coast of Norway", "importance": "central"}
            if "west coast" in m[-1]["content"] else
            {"claim": "Halvik is in Tornby County.",
             "quote": "Halvik is a village in Tornby County", "importance": "central"}]),
        # A small model names the county for a country; the grammar leaves it only the country.
        "node-answer": lambda m, s: ShortAnswer(answer="Norway" if "country" in m[-1]["content"] else "Tornby County"),
        "answer": lambda m, s: ShortAnswer(answer="Norway"),
        "vote": lambda m, s: {"reason": "the quote states it", "verdict": "supported"},
        "gaps": lambda m, s: GapQuestions(questions=[]),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(answer="", executive_summary="", findings=[], open_questions=[]),
    }
    engine = FakeEngine(script)
    halvik = Hit(url="http://a.test/halvik", title="Halvik", rank=1)
    tornby = Hit(url="http://b.test/tornby", title="Tornby County", rank=1)
    hits = {"In which county is Halvik?": [halvik], QUESTION: [halvik, tornby],
            "In which country is the county of Halvik?": [tornby],
            "In which country is the county of Halvik? Tornby County": [tornby]}
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    result = research(QUESTION, settings, models=models, backend=FakeBackend(hits), fetcher=FakeFetcher(PAGES),
                      embedder=get_embedder(settings), out_dir=tmp_path / "reports")
    return result, engine


def test_the_pipeline_holds_node_and_final_answers_to_the_countries_of_their_evidence(tmp_path):
    result, engine = _run(tmp_path)
    report = result.report
    assert report["short_answer"] == "Norway"
    for purpose in ("node-answer", "answer"):
        enums = [schema.model_json_schema()["properties"]["answer"].get("enum")
                 for p, schema in engine.schemas if p == purpose]
        assert ["Norway", NO_CHOICE] in enums, purpose
    fired = [f for f in report["checks"]["fired"] if f["check"] == "answer-country"]
    assert {"check": "answer-country", "on": "answer", "countries": ["Norway"]} in fired
    # The county's node asks no country: its answer is free.
    assert [f["on"] for f in fired if f["on"].startswith("answer of")] == ["answer of q2"]
    assert report["stats"]["checks"]["answer-country"] == len(fired)

    off, engine = _run(tmp_path / "off", disabled=["answer-country"])
    assert {schema for p, schema in engine.schemas if p in ("node-answer", "answer")} == {ShortAnswer}
    assert "answer-country" not in off.report["stats"]["checks"]
