"""Questions that compare two named things: each thing researched on its own, and a yes or no
about both resting on a verified fact of each. Examples are invented."""

from __future__ import annotations

import json

import pytest

from appliance.config import load_settings
from appliance.contracts import (Extraction, GapQuestions, IterativeStep, Hit, NodeState, Plan, PlanNode, ReportDraft,
                                 SearchQueries, ShortAnswer)
from appliance.embed import get_embedder
from appliance.pipeline.forms import compared, compared_query
from appliance.pipeline.parts import Models
from appliance.pipeline.run import research, with_compared_nodes

from fakes import FakeBackend, FakeEngine, FakeFetcher


@pytest.mark.parametrize("question,things", [
    ("Which opened first, the Velka Bridge or Ardmore Pier?", ["Velka Bridge", "Ardmore Pier"]),
    ("Were Ida Brandt and Jon Lindqvist both engineers?", ["Ida Brandt", "Jon Lindqvist"]),
    ("Are Radio Ardmore and Velka FM in the same network?", ["Radio Ardmore", "Velka FM"]),
    ("Between Port Ardmore and Velka, which town is older?", ["Port Ardmore", "Velka"]),
    ("Which came first, the founding of Radio Ardmore or the birth of Ida Brandt?", ["Radio Ardmore", "Ida Brandt"]),
    ("Is Velka Radio older than Ardmore FM?", ["Velka Radio", "Ardmore FM"]),
    ("What do Ida Brandt and Jon Lindqvist have in common?", ["Ida Brandt", "Jon Lindqvist"]),
    ("The Velka Bridge and Ardmore Pier were built when; which came first?", ["Velka Bridge", "Ardmore Pier"]),
    ("Who sold more records, Ida Brandt and Jon Lindqvist?", ["Ida Brandt", "Jon Lindqvist"]),
    ("Ida Brandt and Jon Lindqvist met each other in 1931. Who was born first?", ["Ida Brandt", "Jon Lindqvist"]),
    # Not comparisons: two names of one fact, or no two names at all; what a sentence before
    # the one that asks says of both is background.
    ("Ida Brandt and Jon Lindqvist were both engineers. Where was Radio Ardmore founded?", []),
    ("Who founded Radio Ardmore and Velka FM first?", []),
    ("Which station was founded by Ida Brandt and Jon Lindqvist in 1931?", []),
    ("Where was the founder of Radio Ardmore born?", []),
    ("Would you rather have apples or pears?", []),
])
def test_what_a_question_compares(question, things):
    assert compared(question) == things


def test_a_compared_thing_is_searched_by_its_name_and_the_question_words_not_the_other():
    query = compared_query("Velka Bridge", "Which opened first, the Velka Bridge or Ardmore Pier?", ["Ardmore Pier"])
    assert query == "Velka Bridge opened first"


def test_each_compared_thing_no_sub_question_researches_alone_gets_a_node():
    question = "Were Ida Brandt and Jon Lindqvist both engineers?"
    # The plan asks about both at once: each gets a node of its own, after the plan's.
    planned = [NodeState(id="q1", question="What were Ida Brandt and Jon Lindqvist?")]
    nodes = with_compared_nodes(planned, question, 2)
    assert [(n.id, n.compares) for n in nodes] == [("q1", ""), ("q2", "Ida Brandt"), ("q3", "Jon Lindqvist")]
    assert all(n.reads_only and not n.depends_on for n in nodes[1:])
    # A plan that researches one of them alone: only the other is added.
    planned = [NodeState(id="q1", question="What did Ida Brandt study?"),
               NodeState(id="q2", question="What were Ida Brandt and Jon Lindqvist?")]
    assert [n.compares for n in with_compared_nodes(planned, question, 2)] == ["", "", "Jon Lindqvist"]
    # A possessive names its owner: both sides researched alone, nothing added.
    planned = [NodeState(id="q1", question="What was Ida Brandt's trade?"),
               NodeState(id="q2", question="What was Jon Lindqvist’s trade?")]
    assert with_compared_nodes(planned, question, 2) == planned
    # Nothing compared, or the knob at 0: the plan as it is.
    assert with_compared_nodes(planned, "Where did Ida Brandt study?", 2) == planned
    assert with_compared_nodes(planned, question, 0) == planned


PAGES = {
    "http://a.test/brandt": "Ida Brandt was a marine engineer who designed the Velka Bridge.",
    "http://b.test/lindqvist": "Jon Lindqvist was a painter of harbour scenes in Port Ardmore.",
    "http://c.test/harbour": "The harbour of Port Ardmore has two piers and a lighthouse.",
}
QUESTION = "Were Ida Brandt and Jon Lindqvist both engineers?"


def _script(answer: str, with_lindqvist: bool = True, sides: bool = False):
    def extract(messages, seed):
        text = messages[-1]["content"]
        claims = []
        if "Ida Brandt was a marine engineer" in text:
            claims = [{"claim": "Ida Brandt was a marine engineer.",
                       "quote": "Ida Brandt was a marine engineer who designed the Velka Bridge", "importance": "central"}]
        elif "Jon Lindqvist was a painter" in text and with_lindqvist:
            claims = [{"claim": "Jon Lindqvist was a painter.",
                       "quote": "Jon Lindqvist was a painter of harbour scenes in Port Ardmore", "importance": "central"}]
        return Extraction(source_quality="primary", claims=claims)

    def node_answer(messages, seed):
        if not sides:
            return ShortAnswer(answer="engineers")
        return ShortAnswer(answer="No" if "Was Jon Lindqvist" in messages[-1]["content"] else "Yes")

    both = [PlanNode(id="q1", question="Which professions did Ida Brandt and Jon Lindqvist have?"),
            PlanNode(id="q2", question="Were Ida Brandt and Jon Lindqvist engineers?")]
    each = [PlanNode(id="q1", question="Was Ida Brandt an engineer?"),
            PlanNode(id="q2", question="Was Jon Lindqvist an engineer?")]
    return {
        # The plan asks about both at once (the compared nodes research each side), or with
        # ``sides`` about each side alone.
        "plan": lambda m, s: Plan(effort=1, nodes=each if sides else both),
        "queries": lambda m, s: SearchQueries(queries=["brandt lindqvist"]),
        "extract": extract,
        "node-answer": node_answer,
        "answer": lambda m, s: ShortAnswer(answer=answer),
        "vote": lambda m, s: {"reason": "the quote states it", "verdict": "supported"},
        "gaps": lambda m, s: GapQuestions(questions=[]),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(answer="", executive_summary="", findings=[], open_questions=[]),
    }


def _run(tmp_path, answer: str, with_lindqvist: bool = True, disabled=(), question: str = QUESTION,
         sides: bool = False):
    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")}, overrides={
        "pipeline.quote_sentences": False, "pipeline.question_sources": 0, "pipeline.gap_questions": 0,
        "pipeline.relevance_threshold": 0.0, "checks.disabled": list(disabled)})
    harbour = [Hit(url="http://c.test/harbour", title="Harbour", rank=1)]
    hits = {"Which professions did Ida Brandt and Jon Lindqvist have?": harbour,
            "Were Ida Brandt and Jon Lindqvist engineers?": harbour,
            "Was Ida Brandt an engineer?": [Hit(url="http://a.test/brandt", title="Ida Brandt", rank=1)],
            "Was Jon Lindqvist an engineer?": [Hit(url="http://b.test/lindqvist", title="Jon Lindqvist", rank=1)],
            "Ida Brandt engineers": [Hit(url="http://a.test/brandt", title="Ida Brandt", rank=1)],
            "Jon Lindqvist engineers": [Hit(url="http://b.test/lindqvist", title="Jon Lindqvist", rank=1)]}
    for name, url in (("Ida Brandt", "http://a.test/brandt"), ("Jon Lindqvist", "http://b.test/lindqvist")):
        other = ["Jon Lindqvist" if name == "Ida Brandt" else "Ida Brandt"]
        hits.setdefault(compared_query(name, question, other), [Hit(url=url, title=name, rank=1)])
    engine = FakeEngine(_script(answer, with_lindqvist, sides))
    backend = FakeBackend(hits)
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    result = research(question, settings, models=models, backend=backend, fetcher=FakeFetcher(PAGES),
                      embedder=get_embedder(settings), out_dir=tmp_path / "reports")
    return result, backend, engine


def test_each_side_is_researched_and_a_no_cites_a_verified_fact_of_each(tmp_path):
    result, backend, engine = _run(tmp_path, "no")
    report = result.report
    compared_nodes = [n for n in report["plan"]["nodes"] if n["compares"]]
    assert [n["compares"] for n in compared_nodes] == ["Ida Brandt", "Jon Lindqvist"]
    assert {"Ida Brandt engineers", "Jon Lindqvist engineers"} <= set(backend.queries)
    # No answer of their own: node answers are the plan's nodes' only (q1 and q2 read the
    # harbour page and found nothing, so none).
    assert sum(1 for purpose, _ in engine.calls if purpose == "node-answer") <= 2
    assert report["short_answer"] == "no"
    cited = {c["id"]: c["text"] for c in report["claims"] if c["id"] in report["answer_claims"]}
    assert any("Ida Brandt" in t for t in cited.values()) and any("Jon Lindqvist" in t for t in cited.values())
    assert "answer-both-sides" not in report["stats"]["checks"]


def test_a_yes_or_no_with_a_verified_fact_of_one_side_only_is_no_answer(tmp_path):
    result, _, _ = _run(tmp_path, "yes", with_lindqvist=False)
    report = result.report
    assert report["short_answer"] == ""
    assert report["stats"]["checks"]["answer-both-sides"] == 1
    fired = [e for e in report["checks"]["fired"] if e["check"] == "answer-both-sides"]
    assert fired == [{"check": "answer-both-sides", "on": "answer", "answer": "yes"}]
    # Switched off, the answer stands on the one side.
    again, _, _ = _run(tmp_path / "off", "yes", with_lindqvist=False, disabled=["answer-both-sides"])
    assert again.report["short_answer"] == "yes"
    assert "answer-both-sides" not in again.report["stats"]["checks"]
    records = [json.loads(line) for line in (again.run_dir / "checks.jsonl").read_text().splitlines()]
    assert all(r["check"] != "answer-both-sides" for r in records)


def test_a_choice_between_two_is_answered_with_one_of_them(tmp_path):
    """Check answer-choice in the pipeline: the run's answer call for a question asking which
    of two has a grammar that allows only the two names (or unknown), the check is named in the
    report, and switched off the answer call is free text again."""
    from appliance.contracts import NO_CHOICE

    question = "Which was an engineer, Ida Brandt or Jon Lindqvist?"
    result, _, engine = _run(tmp_path, "Ida Brandt", question=question)
    report = result.report
    assert report["short_answer"] == "Ida Brandt"
    answer_schemas = [schema for purpose, schema in engine.schemas if purpose == "answer"]
    assert len(answer_schemas) == 1
    assert answer_schemas[0].model_json_schema()["properties"]["answer"]["enum"] == [
        "Ida Brandt", "Jon Lindqvist", NO_CHOICE]
    assert report["stats"]["checks"]["answer-choice"] >= 1
    assert {"check": "answer-choice", "on": "answer", "choices": ["Ida Brandt", "Jon Lindqvist"]} in \
        report["checks"]["fired"]
    off, _, engine = _run(tmp_path / "off", "Ida Brandt", question=question, disabled=["answer-choice"])
    assert [schema for purpose, schema in engine.schemas if purpose == "answer"] == [ShortAnswer]
    assert "answer-choice" not in off.report["stats"]["checks"]


def test_a_choice_of_which_came_first_is_decided_by_the_years_of_each_side():
    """Check answer-dates: each side's earliest year in the evidence sentences that name it
    alone decides a first/earlier/older (or later/younger) choice; a side without a year, a
    tie, a sentence naming both, or a question that asks no order leaves the answer as it is."""
    from appliance.pipeline.checks import Switches
    from appliance.pipeline.forms import asked_order, checked_answer, dated_choice

    evidence = ("[c1] Ardmore Pier opened in 1887 and was lengthened in 1960.\n"
                "[c2] The Velka Bridge was built in 1931.\n"
                "[c3] In 1850 the Velka Bridge and Ardmore Pier were both only plans.")
    first = "Which opened first, the Velka Bridge or Ardmore Pier?"
    assert asked_order(first) == "first" and asked_order("Who is younger, Ida Brandt or Jon Lindqvist?") == "later"
    assert asked_order("Which is older and which is newer, A or B?") == ""
    assert dated_choice(first, evidence) == "Ardmore Pier"
    assert dated_choice("Which opened later, the Velka Bridge or Ardmore Pier?", evidence) == "Velka Bridge"
    assert dated_choice("Which is longer, the Velka Bridge or Ardmore Pier?", evidence) == ""
    assert dated_choice(first, "[c1] Ardmore Pier opened in 1887.\n[c2] The Velka Bridge is long.") == ""
    assert dated_choice(first, "[c1] Ardmore Pier opened in 1931.\n[c2] The Velka Bridge opened in 1931.") == ""
    assert dated_choice(first, None) == ""

    assert checked_answer("Velka Bridge", evidence, first) == ("Ardmore Pier", ["answer-dates"])
    assert checked_answer("unknown", evidence, first) == ("Ardmore Pier", ["answer-dates"])
    assert checked_answer("Ardmore Pier", evidence, first) == ("Ardmore Pier", [])
    assert checked_answer("Velka Bridge", evidence, first, Switches({"answer-dates"})) == ("Velka Bridge", [])


@pytest.mark.parametrize("question,sides,answer", [
    ("Were Ida Brandt and Jon Lindqvist both engineers?", [["Yes"], ["No"]], "No"),
    ("Were Ida Brandt and Jon Lindqvist both engineers?", [["yes."], ["Yes"]], "Yes"),
    ("Are Velka United and Ardmore Town in the same league?", [["Northern League"], ["Coastal Cup"]], "No"),
    ("Are Velka United and Ardmore Town in the same league?", [["the Northern League"], ["Northern League"]], "Yes"),
    # Nothing decided: a side unanswered, answers of the wrong kind, a question about one of
    # the two or comparing them, or no yes/no question at all.
    ("Were Ida Brandt and Jon Lindqvist both engineers?", [["Yes"], []], ""),
    ("Were Ida Brandt and Jon Lindqvist both engineers?", [["Yes"], ["a painter"]], ""),
    ("Are Velka United and Ardmore Town in the same league?", [["Yes"], ["No"]], ""),
    ("Was either Ida Brandt or Jon Lindqvist an engineer?", [["Yes"], ["No"]], ""),
    ("Is Velka United older than Ardmore Town?", [["Yes"], ["No"]], ""),
    ("Which league are Velka United and Ardmore Town in?", [["Northern League"], ["Coastal Cup"]], ""),
])
def test_a_yes_or_no_about_two_is_what_the_answers_about_each_side_decide(question, sides, answer):
    from appliance.pipeline.forms import composed_answer

    assert composed_answer(question, sides) == answer


def test_the_sides_answers_overrule_the_models_yes_in_the_pipeline(tmp_path):
    """Check answer-composed in a run: the plan asks about each side alone, their answers are
    yes and no, and the model's yes to "both" becomes no, citing a verified fact of each side;
    switched off, the model's answer stands."""
    result, _, _ = _run(tmp_path, "Yes", sides=True)
    report = result.report
    assert [n["answer"] for n in report["plan"]["nodes"] if n["id"] in ("q1", "q2")] == ["Yes", "No"]
    assert report["short_answer"] == "No"
    assert {"check": "answer-composed", "on": "answer", "answer": "Yes", "composed": "No"} in report["checks"]["fired"]
    cited = [c["text"] for c in report["claims"] if c["id"] in report["answer_claims"]]
    assert any("Ida Brandt" in t for t in cited) and any("Jon Lindqvist" in t for t in cited)
    off, _, _ = _run(tmp_path / "off", "Yes", sides=True, disabled=["answer-composed"])
    assert off.report["short_answer"] == "Yes" and "answer-composed" not in off.report["stats"]["checks"]
    # The model already agreeing with the sides: nothing fires.
    agreed, _, _ = _run(tmp_path / "agreed", "No", sides=True)
    assert agreed.report["short_answer"] == "No" and "answer-composed" not in agreed.report["stats"]["checks"]


def test_a_side_named_in_full_with_a_middle_name_is_still_that_side():
    """The compared thing's words, not its initials, must be named: "Ida Marta Brandt" is Ida
    Brandt for the sub-questions about one side, the facts cited for each side, and the years
    that decide which came first."""
    from appliance.contracts import MergedClaim, QuoteRef
    from appliance.pipeline.forms import dated_choice, names_alone
    from appliance.pipeline.synthesize import about_item, both_sides

    items = ["Ida Brandt", "Jon Lindqvist"]
    assert names_alone("Where was Ida Marta Brandt born?", "Ida Brandt", items)
    assert not names_alone("Where were Ida Marta Brandt and Jon Erik Lindqvist born?", "Ida Brandt", items)
    def merged(cid: str, text: str, url: str) -> MergedClaim:
        return MergedClaim(id=cid, text=text, importance="central", source_quality="secondary",
                           quotes=[QuoteRef(source_url=url, quote=text)], members=[cid], node_ids=["q1"])

    claim = merged("m1", "Ida Marta Brandt (1901-1980) was a marine engineer.", "http://a.test/brandt")
    assert about_item(claim, "Ida Brandt") and not about_item(claim, "Jon Lindqvist")
    other = merged("m2", "Jon Erik Lindqvist was a painter.", "http://b.test/lindqvist")
    assert both_sides([claim, other], items)
    assert dated_choice("Who was born first, Ida Brandt or Jon Lindqvist?",
                        "Ida Marta Brandt was born in 1901.\nJon Erik Lindqvist was born in 1899.") == "Jon Lindqvist"
