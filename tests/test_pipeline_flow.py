"""Control flow of the pipeline with a scripted model (the real model runs in test_research_e2e.py):
voting arithmetic, plan repair, each fail-soft path, the single gap round, the barrier."""

from __future__ import annotations

import json
import re

import pytest

from appliance.config import load_settings
from appliance.contracts import (Extraction, NodeState, GapQuestions, IterativeStep, Hit, Importance, Plan, PlanNode,
                                 ReportDraft, SearchQueries, ShortAnswer, VoteRecord, VoteVerdict)
from appliance.embed import get_embedder
from appliance.pipeline.plan import check_plan, plan_faults, plan_research, topo_order
from appliance.pipeline.anchor import quotable_sentences
from appliance.pipeline import forms
from appliance.pipeline.checks import Firings, Switches
from appliance.pipeline.parts import Models
from appliance.pipeline.run import research
from appliance.questions import clean_question, run_id_for, slugify
from appliance.pipeline.verify import VoteRule, tally
from appliance.errors import UsageError

from fakes import FakeBackend, FakeEngine, FakeFetcher, fail, quoting_extract

PAGES = {
    "http://a.test/one": "Alpha Corp was founded in 1901 by Jane Roe in Springfield. It makes pumps.",
    "http://b.test/two": "Jane Roe was born in 1870 in Lisbon and studied engineering at Porto.",
    "http://c.test/three": "Springfield is a city with a large harbour and a museum of pumps.",
}
HITS = [Hit(url=u, title=u, rank=i + 1) for i, u in enumerate(PAGES)]


def _plan(messages, seed):
    return Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?"),
                                 PlanNode(id="q2", question="Where was the founder born?", depends_on=["q1"])])


def _extract(messages, seed):
    text = messages[-1]["content"]
    if "Alpha Corp was founded" in text:
        return Extraction(source_quality="primary", claims=[
            {"claim": "Alpha Corp was founded in 1901 by Jane Roe.", "quote": "Alpha Corp was founded in 1901 by Jane Roe", "importance": "central"},
            {"claim": "Alpha Corp makes rockets.", "quote": "Alpha Corp makes rockets to the moon", "importance": "supporting"}])
    if "Jane Roe was born" in text:
        return Extraction(source_quality="secondary", claims=[
            {"claim": "Jane Roe was born in Lisbon in 1870.", "quote": "Jane Roe was born in 1870 in Lisbon", "importance": "central"}])
    return Extraction(source_quality="blog", claims=[])


def script(votes=None, **over):
    votes = votes or (lambda messages, seed: {"reason": "the quote states it", "verdict": "supported"})
    base = {
        "plan": _plan,
        "queries": lambda m, s: SearchQueries(queries=["jane roe birthplace"]),
        "extract": _extract,
        "node-answer": lambda m, s: ShortAnswer(answer="Jane Roe"),
        "answer": lambda m, s: ShortAnswer(answer="Lisbon"),
        "vote": votes,
        "gaps": lambda m, s: GapQuestions(questions=[]),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(
            answer="Jane Roe, born in Lisbon.", executive_summary="Jane Roe founded Alpha Corp in 1901.",
            findings=[{"theme": "Founder", "statements": [
                {"text": "Jane Roe founded Alpha Corp.", "claim_ids": ["c1", "c99"]},
                {"text": "Uncited statement.", "claim_ids": ["c42"]}]}],
            open_questions=["What did she study?"]),
    }
    base.update(over)
    return base


@pytest.fixture
def flow_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    # Free quotes: these scripts quote fragments, some not in the page, to test the quote check.
    # No relevance check: every page answers every query here, so which node reads which page
    # is arbitrary (test_off_topic_claims_are_tangential checks it on its own).
    # No node for the question as asked: these scripts count each sub-question's calls and
    # pages (the question node's own tests below turn it on).
    # The writer's call on: these scripts test its citation checks (the quick profile's report
    # without it has tests of its own).
    return load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                         overrides={"pipeline.gap_questions": 1, "pipeline.quote_sentences": False,
                                    "pipeline.relevance_threshold": 0.0, "pipeline.question_sources": 0,
                                    "pipeline.write_report": True})


@pytest.fixture
def voting_settings(flow_settings):
    """Every claim voted on: the scripts' founding claim is word for word its quote, which by
    default is confirmed without votes."""
    return flow_settings.with_overrides({"pipeline.vote_verbatim": True})


def run_fake(settings, tmp_path, engine, hits=HITS, pages=PAGES):
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    return research("Where was the founder of Alpha Corp born?", settings, models=models,
                    backend=FakeBackend(hits), fetcher=FakeFetcher(pages),
                    embedder=get_embedder(settings), out_dir=tmp_path / "reports")


# ------------------------------------------------------------------ voting arithmetic

RULE = VoteRule(votes=3, min_valid=2, kill_at=2)
_OUTCOMES = {"keep": (True, VoteVerdict.supported), "refute": (True, VoteVerdict.refuted),
             "unsure": (False, VoteVerdict.insufficient), "abstain": (False, None)}


def _votes(*outcomes):
    return [VoteRecord(claim_id="m1", seed=i, valid=_OUTCOMES[o][0], verdict=_OUTCOMES[o][1], reason="r")
            for i, o in enumerate(outcomes)]


@pytest.mark.parametrize("outcomes,survives", [
    (("abstain", "abstain", "abstain"), False),
    (("keep", "abstain", "abstain"), False),
    (("keep", "keep", "refute"), True),
    (("keep", "keep", "keep"), True),
    (("keep", "refute", "refute"), False),
    (("refute", "refute", "refute"), False),
    (("keep", "keep", "abstain"), True),
    (("keep", "refute", "abstain"), False),   # one supporting vote is not enough
    (("keep", "unsure", "unsure"), False),    # doubt is not support...
    (("keep", "keep", "unsure"), True),       # ...and does not kill a true claim
    (("unsure", "unsure", "unsure"), False),
])
def test_tally(outcomes, survives):
    assert tally("m1", _votes(*outcomes), RULE).confirmed is survives


def test_an_early_stop_never_changes_the_verdict():
    """Votes stop once the outcome is decided: for every sequence of three votes, the verdict
    on the votes actually cast equals the verdict on all three."""
    import itertools

    for rule in (RULE, VoteRule(votes=5, min_valid=3, kill_at=2), VoteRule(votes=3, min_valid=1, kill_at=1)):
        for outcomes in itertools.product(_OUTCOMES, repeat=rule.votes):
            votes = _votes(*outcomes)
            cast = []
            for index, vote in enumerate(votes):
                supports = sum(v.supports for v in cast)
                refutations = sum(v.refutes for v in cast)
                if rule.decided(supports, refutations, rule.votes - index):
                    break
                cast.append(vote)
            assert tally("m1", cast, rule).confirmed is tally("m1", votes, rule).confirmed, outcomes


def test_all_abstain_never_survives_in_a_run(voting_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: fail("vote")))
    result = run_fake(voting_settings, tmp_path, engine)
    stats = result.report["stats"]
    assert result.status == "inconclusive"
    assert stats["confirmed"] == 0
    # Two failed votes leave too few for two supporting ones: the third is not cast.
    assert stats["votes_invalid"] == stats["verified"] * 2 and stats["votes_skipped"] == stats["verified"]
    assert stats["model_failures"] >= stats["votes_invalid"]
    assert "## Answer" in result.markdown_path.read_text()


def test_insufficient_is_an_abstention_not_a_refutation(voting_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"reason": "The quote names no such thing.",
                                                   "verdict": "insufficient"}))
    result = run_fake(voting_settings, tmp_path, engine)
    assert result.status == "inconclusive"
    for claim in result.report["claims"]:
        if claim["verdict"]:
            assert claim["verdict"]["refutations"] == 0 and claim["verdict"]["valid_votes"] == 0


def test_empty_reason_is_an_abstention(voting_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"reason": "  ", "verdict": "supported"}))
    result = run_fake(voting_settings, tmp_path, engine)
    assert result.report["stats"]["confirmed"] == 0


def test_a_vote_that_copies_the_example_is_an_abstention(voting_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"reason": "The quote calls Dune a novel by Frank Herbert.",
                                                   "verdict": "supported"}))
    result = run_fake(voting_settings, tmp_path, engine)
    assert result.report["stats"]["confirmed"] == 0
    assert result.report["stats"]["votes_valid"] == 0


def test_the_vote_schema_asks_for_the_reason_first():
    from appliance.contracts import Vote

    assert list(Vote.model_json_schema()["properties"]) == ["reason", "verdict"]
    assert set(Vote.model_json_schema()["$defs"]["VoteVerdict"]["enum"]) == {"supported", "refuted", "insufficient"}


def test_votes_on_a_claim_run_back_to_back_with_distinct_seeds(flow_settings, tmp_path):
    cast: list[tuple[str, int]] = []

    def vote(messages, seed):
        cast.append((messages[-1]["content"], seed))
        return {"reason": "the quote states it", "verdict": "supported"}

    run_fake(flow_settings, tmp_path, FakeEngine(script(votes=vote)))
    claims = list(dict.fromkeys(prompt for prompt, _ in cast))
    assert claims
    for claim in claims:
        positions = [i for i, (prompt, _) in enumerate(cast) if prompt == claim]
        # Two supporting votes decide a claim: the third is never cast.
        assert len(positions) == 2 and positions[1] == positions[0] + 1
        assert len({cast[i][1] for i in positions}) == 2


def test_two_supports_confirm_two_refutations_kill(voting_settings, tmp_path):
    """Per claim, votes in order: Lisbon gets supported, refuted, supported (confirmed with one
    refutation); the founding claim gets supported, refuted, refuted (killed)."""
    plans = {"Lisbon": ["supported", "refuted", "supported"], "founded": ["supported", "refuted", "refuted"]}
    cast: dict[str, int] = {}

    def split(m, s):
        claim = m[-1]["content"].split("Claim: ")[-1]
        key = "Lisbon" if "Lisbon" in claim else "founded"
        n = cast[key] = cast.get(key, 0) + 1
        return {"reason": "checked against the quote", "verdict": plans[key][n - 1]}

    engine = FakeEngine(script(votes=split))
    result = run_fake(voting_settings, tmp_path, engine)
    verdicts = {c["text"]: c["verdict"] for c in result.report["claims"] if c["verdict"]}
    lisbon = next(v for t, v in verdicts.items() if "Lisbon" in t)
    founded = next(v for t, v in verdicts.items() if "founded" in t)
    assert lisbon["confirmed"] and lisbon["refutations"] == 1 and lisbon["supports"] == 2
    assert not founded["confirmed"] and founded["refutations"] == 2


def test_a_claim_that_is_its_quote_is_confirmed_without_votes(flow_settings, tmp_path):
    """"Alpha Corp was founded in 1901 by Jane Roe." quotes that very sentence: the votes could
    only ask whether the quote states it, so none is cast; the paraphrased Lisbon claim is
    voted on as before."""
    voted = []

    def vote(messages, seed):
        voted.append(messages[-1]["content"].split("Claim: ")[-1])
        return {"reason": "the quote states it", "verdict": "supported"}

    result = run_fake(flow_settings, tmp_path, FakeEngine(script(votes=vote)))
    claims = {c["text"]: c for c in result.report["claims"]}
    founded = claims["Alpha Corp was founded in 1901 by Jane Roe."]["verdict"]
    assert founded["confirmed"] and founded["verbatim"] and founded["votes"] == []
    assert not any("founded" in v for v in voted)
    lisbon = claims["Jane Roe was born in Lisbon in 1870."]["verdict"]
    assert lisbon["confirmed"] and not lisbon["verbatim"] and lisbon["supports"] == 2
    assert any("Lisbon" in v for v in voted)
    stats = result.report["stats"]
    assert stats["confirmed_verbatim"] >= 1 and stats["confirmed"] == stats["confirmed_verbatim"] + 1


def test_a_claim_refuted_as_worded_is_kept_as_its_quote(flow_settings, tmp_path):
    """The votes kill "Jane Roe was born in Lisbon in 1870." (the wording); the sentence it
    quotes is kept as a claim of its own, confirmed as verbatim, and the report is complete.
    The killed claim stays in the report with its votes."""
    engine = FakeEngine(script(votes=lambda m, s: {"reason": "the quote gives another year", "verdict": "refuted"}))
    result = run_fake(flow_settings, tmp_path, engine)
    claims = {c["text"]: c for c in result.report["claims"]}
    killed = claims["Jane Roe was born in Lisbon in 1870."]
    assert not killed["verdict"]["confirmed"] and killed["verdict"]["refutations"] == 2
    kept = claims["Jane Roe was born in 1870 in Lisbon"]
    assert kept["restated_from"] == killed["id"] and kept["verdict"]["verbatim"] and kept["verdict"]["confirmed"]
    assert kept["quotes"] == killed["quotes"][:1]
    assert result.status == "complete" and result.report["stats"]["claims_restated"] == 1
    off = run_fake(flow_settings.with_overrides({"pipeline.restate_killed": False}), tmp_path / "off", engine)
    assert "Jane Roe was born in 1870 in Lisbon" not in {c["text"] for c in off.report["claims"]}
    assert off.report["stats"]["claims_restated"] == 0


def test_off_topic_claims_are_tangential(flow_settings, tmp_path):
    """Labelled central by the model but far in meaning from every question of the run: the
    claim is tangential (not verified), its relevance recorded."""
    settings = flow_settings.with_overrides({"pipeline.relevance_threshold": 0.4})

    def extract(messages, seed):
        out = _extract(messages, seed)
        if "harbour" in messages[-1]["content"]:
            return Extraction(source_quality="blog", claims=[
                {"claim": "Springfield has a large harbour.", "quote": "Springfield is a city with a large harbour",
                 "importance": "central"}])
        return out

    # The page's first sentence bears on the research, so the page is read (see the next test).
    pages = {**PAGES, "http://c.test/three": "Springfield is the city where Jane Roe founded Alpha Corp. "
                                            + PAGES["http://c.test/three"]}
    result = run_fake(settings, tmp_path, FakeEngine(script(extract=extract)), pages=pages)
    records = [json.loads(line) for line in (result.run_dir / "claims.jsonl").read_text().splitlines()]
    harbour = [r for r in records if "harbour" in r["claim"]]
    founded = [r for r in records if "founded" in r["claim"]]
    assert harbour and all(r["off_topic"] and r["relevance"] < 0.4 for r in harbour)
    assert founded and all(not r.get("off_topic") and r["relevance"] >= 0.4 for r in founded)
    verified = {c["text"] for c in result.report["claims"] if c["verdict"]}
    assert "Springfield has a large harbour." not in verified and verified
    assert result.report["stats"]["claims_tangential"] >= 1


def test_a_claim_is_judged_as_its_page_says_it_after_the_title(flow_settings, tmp_path):
    """"She was the eldest of four daughters of a sea captain." alone is far from every
    question of the run; on a page titled "Jane Roe" it is the founder's own page speaking of
    her, as the page gate reads it too, and the claim is not demoted. Titled "p5", the same
    claim is off topic. (The page gate is off here, so both pages are read.)"""
    sentence = "She was the eldest of four daughters of a sea captain."
    for url, titled in (("http://e.test/Jane Roe", True), ("http://e.test/p5", False)):
        def extract(messages, seed):
            if sentence in messages[-1]["content"]:
                return Extraction(source_quality="secondary", claims=[
                    {"claim": sentence, "quote": sentence, "importance": "central"}])
            return _extract(messages, seed)

        where = tmp_path / str(titled)
        settings = flow_settings.with_overrides({"pipeline.relevance_threshold": 0.4,
                                                 "checks.disabled": ["page-gate"],
                                                 "state.home": str(where / "home")})
        result = run_fake(settings, where, FakeEngine(script(extract=extract)),
                          hits=[*HITS, Hit(url=url, rank=4)], pages={**PAGES, url: sentence})
        records = [json.loads(line) for line in (result.run_dir / "claims.jsonl").read_text().splitlines()]
        mine = [r for r in records if r["claim"] == sentence]
        assert mine and all(bool(r.get("off_topic")) is not titled for r in mine)
        assert all((r["relevance"] >= 0.4) is titled for r in mine)
        assert all(("claim-relevance" in r["checks"]) is not titled for r in mine)


def test_a_page_s_sentence_nearest_the_question_is_a_claim_when_the_extractor_passed_it_over(flow_settings, tmp_path):
    """The extractor picks "The newsletter is printed on blue paper." from a page whose next
    sentence, "Jane Roe was born in 1870 in Lisbon.", is what the run asks: check
    nearest-sentence adds that sentence as a claim of its own (rated supporting, the sentence
    itself, so confirmed as verbatim with no vote) and the answer reads it. Switched off, the
    page gives only the extractor's pick; when the extractor picks the nearest sentence itself,
    nothing is added."""
    url = "http://e.test/notes"
    page = "The newsletter is printed on blue paper. Jane Roe was born in 1870 in Lisbon."
    for picks, disabled, added in (("The newsletter is printed on blue paper.", [], True),
                                   ("The newsletter is printed on blue paper.", ["nearest-sentence"], False),
                                   ("Jane Roe was born in 1870 in Lisbon.", [], False)):
        def extract(messages, seed, picks=picks):
            # The quick profile's extraction: whole sentences of the page, no restatement.
            text = messages[-1]["content"]
            if "printed on blue paper" in text:
                return {"source_quality": "secondary", "claims": [{"quote": picks, "importance": "central"}]}
            if "Alpha Corp was founded" in text:
                return {"source_quality": "primary", "claims": [
                    {"quote": "Alpha Corp was founded in 1901 by Jane Roe in Springfield.", "importance": "central"}]}
            return {"source_quality": "blog", "claims": []}

        where = tmp_path / f"{len(disabled)}-{picks[:4]}"
        settings = flow_settings.with_overrides({"pipeline.relevance_threshold": 0.4, "pipeline.quote_sentences": True,
                                                 "checks.disabled": ["page-gate", *disabled],
                                                 "state.home": str(where / "home")})
        result = run_fake(settings, where, FakeEngine(script(extract=extract)),
                          hits=[*HITS, Hit(url=url, rank=4)], pages={**PAGES, url: page})
        records = [json.loads(line) for line in (result.run_dir / "claims.jsonl").read_text().splitlines()]
        nearest = [r for r in records if "nearest-sentence" in r["checks"]]
        born = "Jane Roe was born in 1870 in Lisbon"  # the source's span, as the quote check keeps it
        assert [r["claim"] for r in nearest if r["source_url"] == url] == ([born] if added else [])
        assert all(r["importance"] == "supporting" and r["relevance"] >= 0.4 and r["accepted"] for r in nearest)
        assert (result.report["checks"]["counts"].get("nearest-sentence", 0) >= 1) is added
        # Counted with the extractor's claims: every line of claims.jsonl is one extracted claim.
        assert result.report["stats"]["claims_extracted"] == len(records)
        if added:
            claim = next(c for c in result.report["claims"] if c["text"] == born)
            assert claim["verdict"]["confirmed"] and claim["verdict"]["verbatim"]
            answered = json.loads((result.run_dir / "answer.json").read_text())
            assert born in answered["evidence"]


def test_the_page_gate_and_claim_relevance_read_a_sentence_after_its_title_in_one_form():
    """Both checks read a sentence after its page's title through ``after_title``: the title's
    spacing folded, nothing added for an untitled page, so the two never judge one sentence in
    two forms."""
    from appliance.pipeline.gather import after_title

    texts = ["The river joins the sea at Port Ardmore.", "It floods each spring."]
    assert after_title("Velka  River\n", texts) == ["Velka River: The river joins the sea at Port Ardmore.",
                                                    "Velka River: It floods each spring."]
    assert after_title("", texts) == [] and after_title(None, texts) == [] and after_title(" \t", texts) == []


def test_a_source_with_no_sentence_near_the_research_is_not_read(flow_settings, tmp_path):
    """"Springfield is a city with a large harbour and a museum of pumps." comes near none of
    the run's questions: the page is not sent to the extractor (no model call), it is recorded
    with its relevance and counted. Jane Roe's birth page, found by "Who founded Alpha Corp?"
    before anyone knew the founder's name, is given back unread and read by "Where was the
    founder born?" once its focus holds "Jane Roe". With the check off every page is read by
    the node that found it."""
    for threshold in (0.4, 0.0):
        read: list[tuple[str, str]] = []

        def extract(messages, seed):
            prompt = messages[-1]["content"]
            read.append((re.search(r"Sub-question: (.*)", prompt).group(1), prompt))
            if "Jane Roe was born in 1870" in prompt:  # the birth page, whoever reads it
                return Extraction(source_quality="secondary", claims=[
                    {"claim": "Jane Roe was born in Lisbon in 1870.", "quote": "Jane Roe was born in 1870 in Lisbon",
                     "importance": "central"}])
            return _extract(messages, seed)

        settings = flow_settings.with_overrides({"pipeline.relevance_threshold": threshold,
                                                 "state.home": str(tmp_path / str(threshold) / "home")})
        result = run_fake(settings, tmp_path / str(threshold), FakeEngine(script(extract=extract)))
        sources = [json.loads(line) for line in (result.run_dir / "sources.jsonl").read_text().splitlines()]
        skipped = [r for r in sources if r.get("off_topic")]
        stats = result.report["stats"]
        birth = [(node, prompt) for node, prompt in read if "Jane Roe was born" in prompt]
        assert len(birth) == 1 and any("Alpha Corp was founded" in prompt for _, prompt in read)
        if threshold:
            assert not any("harbour" in prompt for _, prompt in read)
            assert {r["url"] for r in skipped} == {"http://b.test/two", "http://c.test/three"}
            assert all(r["relevance"] < threshold for r in skipped)
            assert [r["node"] for r in skipped if r["url"] == "http://b.test/two"] == ["q1"]
            assert "founder born" in birth[0][0]
            assert stats["sources_off_topic"] == len(skipped)
            assert stats["sources_fetched"] == len(sources) - len(skipped)
        else:
            assert any("harbour" in prompt for _, prompt in read)
            assert not skipped and stats["sources_off_topic"] == 0
            assert "founded" in birth[0][0]
        assert any(c["text"] == "Jane Roe was born in Lisbon in 1870." for c in result.report["claims"])


def test_a_page_naming_its_subject_only_in_its_title_is_read(flow_settings, tmp_path):
    """"It was started in 1901 by an engineer ..." names nothing the run asks about; titled
    "Alpha Corp", the page is about the company and is read. Titled "p4", it is given back."""
    page = "It was started in 1901 by an engineer and moved to Springfield later."
    for url, titled in (("http://d.test/Alpha Corp", True), ("http://d.test/p4", False)):
        read: list[str] = []

        def extract(messages, seed):
            read.append(messages[-1]["content"])
            return _extract(messages, seed)

        where = tmp_path / str(titled)
        settings = flow_settings.with_overrides({"pipeline.relevance_threshold": 0.4,
                                                 "state.home": str(where / "home")})
        # The scripted fetcher titles a page with its URL's last part.
        result = run_fake(settings, where, FakeEngine(script(extract=extract)),
                          hits=[Hit(url=url, rank=1)], pages={url: page})
        assert any("started in 1901" in prompt for prompt in read) is titled
        assert (result.report["stats"]["sources_off_topic"] > 0) is not titled


def test_tangential_claims_are_not_verified(flow_settings, tmp_path):
    def extract(messages, seed):
        out = _extract(messages, seed)
        if "It makes pumps" in messages[-1]["content"]:
            out.claims.append(Extraction.model_validate({"claims": [
                {"claim": "Alpha Corp makes pumps.", "quote": "It makes pumps", "importance": "tangential"}],
                "source_quality": "primary"}).claims[0])
        return out

    engine = FakeEngine(script(extract=extract))
    result = run_fake(flow_settings, tmp_path, engine)
    stats = result.report["stats"]
    assert stats["claims_tangential"] >= 1
    claims = result.report["claims"]
    assert any(c["text"] == "Alpha Corp makes pumps." and c["importance"] == "tangential" for c in claims)
    verified = [c for c in claims if c["verdict"]]
    assert verified and all(c["importance"] != "tangential" for c in verified)


def test_claims_about_other_named_things_are_not_verified(flow_settings, tmp_path):
    """Rated central by the model but naming only things the research never names (not the
    question, a sub-question or an answer): not verified, counted."""
    pages = dict(PAGES, **{"http://d.test/four": "Blokker was born in Amsterdam in 1930. He sold toys."})
    hits = HITS + [Hit(url="http://d.test/four", title="Jaap Blokker", rank=4)]
    settings = flow_settings.with_overrides({"pipeline.sources_per_node": 4})

    def extract(messages, seed):
        if "Blokker was born" in messages[-1]["content"]:
            return Extraction(source_quality="primary", claims=[
                {"claim": "Blokker was born in Amsterdam.", "quote": "Blokker was born in Amsterdam in 1930",
                 "importance": "central"}])
        return _extract(messages, seed)

    result = run_fake(settings, tmp_path, FakeEngine(script(extract=extract)), hits=hits, pages=pages)
    texts = {c["text"]: c for c in result.report["claims"]}
    assert "Blokker was born in Amsterdam." in texts and not texts["Blokker was born in Amsterdam."]["verdict"]
    assert texts["Jane Roe was born in Lisbon in 1870."]["verdict"]["confirmed"]
    assert result.report["stats"]["claims_off_subject"] >= 1


def test_a_claim_putting_the_subject_on_anothers_fact_becomes_its_quote(flow_settings, tmp_path):
    """The claim names Jane Roe, its quote and source only Blokker: the quote is the claim,
    which is then off subject and not verified."""
    pages = dict(PAGES, **{"http://d.test/four": "Blokker was born in Amsterdam in 1930. He sold toys."})
    hits = HITS + [Hit(url="http://d.test/four", title="Jaap Blokker", rank=4)]
    settings = flow_settings.with_overrides({"pipeline.sources_per_node": 4})

    def extract(messages, seed):
        if "Blokker was born" in messages[-1]["content"]:
            return Extraction(source_quality="primary", claims=[
                {"claim": "Jane Roe was born in Amsterdam.", "quote": "Blokker was born in Amsterdam in 1930",
                 "importance": "central"}])
        return _extract(messages, seed)

    result = run_fake(settings, tmp_path, FakeEngine(script(extract=extract)), hits=hits, pages=pages)
    records = [json.loads(line) for line in (result.run_dir / "claims.jsonl").read_text().splitlines()]
    swapped = [r for r in records if r["claim"] == "Jane Roe was born in Amsterdam."]
    assert swapped and all(r["claim_from_quote"] == "Blokker was born in Amsterdam in 1930" for r in swapped)
    texts = {c["text"]: c for c in result.report["claims"]}
    assert "Jane Roe was born in Amsterdam." not in texts
    assert not texts["Blokker was born in Amsterdam in 1930"]["verdict"]
    assert texts["Jane Roe was born in Lisbon in 1870."]["verdict"]["confirmed"]


# ------------------------------------------------------------------ plan repair

def test_cyclic_and_oversize_plan_is_repaired():
    plan = Plan(effort=5, nodes=[
        PlanNode(id="q1", question="A?", depends_on=["q3"]),
        PlanNode(id="q2", question="B?", depends_on=["q1", "q9", "q2"]),
        PlanNode(id="q3", question="C?", depends_on=["q2"]),
        PlanNode(id="q3", question="D?"),
        PlanNode(id="q5", question="A?"),
        PlanNode(id="q6", question="E?"),
    ])
    checked = check_plan(plan, max_nodes=4, min_queries=1, max_queries=2)
    ids = [n.id for n in checked.nodes]
    assert len(ids) == len(set(ids)) == 4
    assert checked.effort == 2
    text = " | ".join(checked.repairs)
    for expected in ("cycle", "no such node", "self-dependency", "renamed duplicate", "repeats", "cut", "clamped"):
        assert expected in text, (expected, checked.repairs)
    order = [n.id for n in topo_order(checked.nodes)]
    position = {n: i for i, n in enumerate(order)}
    for node in checked.nodes:
        for dep in node.depends_on:
            assert position[dep] < position[node.id]


def _nodes(*questions):
    """Nodes q1, q2, ... each depending on the one before when its question uses #n."""
    return [NodeState(id=f"q{i}", question=q, depends_on=[f"q{int(m)}" for m in re.findall(r"#(\d)", q)])
            for i, q in enumerate(questions, start=1)]


MIDWAY = "In which country is Midway, in the same county as McRae in the same state as KAGH-FM?"


@pytest.mark.parametrize("question, subs, fault", [
    # A guess: Hawaii is in no word of the question, and its names are in no sub-question.
    (MIDWAY, ["What is the capital of Hawaii?", "What county is #1 in?"], "names hawaii"),
    (MIDWAY, ["What is the capital of Hawaii?", "What county is #1 in?"], "no sub-question names kagh-fm, mcrae, midway"),
    # Tied to nothing of the question: no name of it, no earlier answer, no parent.
    ("Who wrote the book named after the artist known as the most remarkable creation of MTV?",
     ["What is the name of the book?", "Who wrote the book about MTV's creation?"], "names nothing of the question"),
    # A dropped hop: Saving Private Ryan is never searched.
    ("What part of the state, in which the character played by the actor who also played Captain Miller "
     "in Saving Private Ryan is stuck in The Terminal, is Rochester in?",
     ["What part of the state is Rochester in?", "Who is stuck in The Terminal in #1?"],
     "no sub-question names captain, miller, private, ryan, saving"),
    # A description asked for, where the next hop needs a fact: which company, where born.
    ("What year did the company Novair International Airways is part of dissolve?",
     ["What is Novair International Airways?", "When did #1 dissolve?"], "asks only what it names is"),
    ("Which region is Corey Taylor's city of birth located?",
     ["Who is Corey Taylor?", "Where is #1's city of birth?"], "asks only what it names is"),
    # The whole question first, its part after it.
    ("What kind of plane dropped the bomb on Akinoshu Kenji's birthplace?",
     ["What kind of plane dropped the bomb on Akinoshu Kenji's birthplace?", "Where was Akinoshu Kenji born?"],
     "is the whole question, yet other sub-questions wait on it"),
])
def test_plan_faults_name_what_is_wrong(question, subs, fault):
    nodes = _nodes(*subs)
    if "Akinoshu" in question:
        nodes[1].depends_on = ["q1"]
    assert any(fault in line for line in plan_faults(nodes, question)), plan_faults(nodes, question)


@pytest.mark.parametrize("question, subs", [
    ("Who was the first president of the association which published Journal of Psychotherapy Integration?",
     ["Which association published Journal of Psychotherapy Integration?", "Who was the first president of #1?"]),
    # Word forms and kinds of thing are forgiven: "Pan-African" is the question's, "County" a kind.
    ("In which country is the representative of the country where Mount Sulivan is located in the city "
     "where the first Pan-African conference was held?",
     ["In which country is Mount Sulivan?", "Where was the first Pan-African conference held?",
      "Where is the representative of #1 in #2?"]),
    ("What county shares a border with the county in which Johnnycake, West Virginia is located?",
     ["What County is Johnnycake, West Virginia in?", "What county borders #1?"]),
    # A question with no names: nothing to tie to, so no fault for that.
    ("Who formed and first arrived to the colony that became the state whose official sport is jousting?",
     ["Which state has jousting as its official sport?", "Who formed the colony that became #1?"]),
    # Capitalised kinds of thing are not names to tie to ("City", "State").
    ("What is the largest City in the State whose capital stands on a lake?",
     ["Which state has its capital on a lake?", "What is the largest city in #1?"]),
    # Asking what a thing is is fine when that is the question; a fact of it is no definition.
    ("Who is Corey Taylor?", ["Who is Corey Taylor?", "What band does Corey Taylor sing in?"]),
    ("What is the capital of the country where Ceelmakoile is?",
     ["What is the country of Ceelmakoile?", "What is the capital of #1?"]),
    # The whole question as the last node is a plan's usual close, not a fault.
    ("Where did the band form that made the live album Maiden Japan?",
     ["Who made the live album Maiden Japan?", "Where did the band that made Maiden Japan form?"]),
])
def test_fit_plans_have_no_faults(question, subs):
    assert plan_faults(_nodes(*subs), question) == []


def _planner(*plans):
    """A planner that gives ``plans`` in turn, one per draw, recording each draw's seed and temperature."""
    draws = []

    def plan(messages, seed):
        draws.append(seed)
        return plans[min(len(draws), len(plans)) - 1]
    return plan, draws


GUESS = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Beta Inc?"),
                               PlanNode(id="q2", question="Where was #1 born?", depends_on=["q1"])])
FIT = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?"),
                             PlanNode(id="q2", question="Where was #1 born?", depends_on=["q1"])])


def test_a_plan_with_faults_is_drawn_again_with_a_fresh_seed():
    plan, draws = _planner(GUESS, FIT)
    engine = FakeEngine(script(plan=plan))
    ctx_question = "Where was the founder of Alpha Corp born?"
    from appliance.pipeline.prompts import Context
    drawn, checked = plan_research(engine, Context(question=ctx_question, today="2026-01-01"), 2, 3, 1, 1,
                                   draws=3, base_seed=7, temperature=0.7)
    assert [n.question for n in checked.nodes] == ["Who founded Alpha Corp?", "Where was #1 born?"]
    assert len(drawn) == 2 and draws[0] is None and draws[1] is not None  # draw 1: the call's own seed
    assert [t for p, t in engine.temperatures] == [None, 0.7]
    assert any("plan draw 1 set aside" in r and "beta" in r for r in checked.repairs)


def test_no_fit_plan_in_the_draws_researches_the_question_itself(flow_settings, tmp_path):
    plan, draws = _planner(GUESS)
    engine = FakeEngine(script(plan=plan))
    result = run_fake(flow_settings, tmp_path, engine)
    assert len(draws) == flow_settings.pipeline.plan_draws == 3 and len(set(draws)) == 3
    nodes = [n["question"] for n in result.report["plan"]["nodes"] if not n["from_gap_round"]]
    assert nodes == ["Where was the founder of Alpha Corp born?"]
    repairs = result.report["plan"]["repairs"]
    assert sum("set aside" in r for r in repairs) == 3 and "researching the question itself" in repairs[-1]
    assert result.report["stats"]["plan_draws"] == 3


def test_one_plan_draw_keeps_the_first_plan_whatever_its_faults():
    plan, draws = _planner(GUESS, FIT)
    engine = FakeEngine(script(plan=plan))
    from appliance.pipeline.prompts import Context
    drawn, checked = plan_research(engine, Context(question="Where was the founder of Alpha Corp born?",
                                                   today="2026-01-01"), 2, 3, 1, 1, draws=1)
    assert len(drawn) == 1
    assert [n.question for n in checked.nodes] == ["Who founded Beta Inc?", "Where was #1 born?"]
    assert any("kept with faults" in r and "beta" in r for r in checked.repairs)


def test_cyclic_plan_in_a_run_is_repaired(flow_settings, tmp_path):
    cyclic = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?", depends_on=["q2"]),
                                   PlanNode(id="q2", question="Where was the founder born?", depends_on=["q1"])])
    engine = FakeEngine(script(plan=lambda m, s: cyclic))
    result = run_fake(flow_settings, tmp_path, engine)
    assert any("cycle" in r for r in result.report["plan"]["repairs"])
    assert result.report["stats"]["plan_repairs"] >= 1
    assert result.status == "complete"


def test_plan_size_reaches_the_grammar(flow_settings, tmp_path):
    """The profile's node limit is part of the schema the model is constrained by."""
    big = Plan(effort=1, nodes=[PlanNode(id=f"q{i}", question=f"Question {i}?") for i in range(1, 13)])
    engine = FakeEngine(script(plan=lambda m, s: big))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "plan_failed"


def test_plan_that_copies_the_example_is_repaired(flow_settings, tmp_path):
    echo = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who wrote Dune?"),
                                 PlanNode(id="q2", question="Who founded Alpha Corp?")])
    engine = FakeEngine(script(plan=lambda m, s: echo))
    result = run_fake(flow_settings, tmp_path, engine)
    assert [n["question"] for n in result.report["plan"]["nodes"] if not n["from_gap_round"]] == ["Who founded Alpha Corp?"]
    assert any("example" in r for r in result.report["plan"]["repairs"])


def test_plan_with_no_usable_node_researches_the_question_itself(flow_settings, tmp_path):
    echo = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who wrote Dune?"),
                                 PlanNode(id="q2", question="Who wrote Dune?")])
    engine = FakeEngine(script(plan=lambda m, s: echo))
    result = run_fake(flow_settings, tmp_path, engine)
    nodes = [n for n in result.report["plan"]["nodes"] if not n["from_gap_round"]]
    assert [n["question"] for n in nodes] == ["Where was the founder of Alpha Corp born?"]
    assert any("researching the question itself" in r for r in result.report["plan"]["repairs"])
    assert result.status == "complete"


# ------------------------------------------------------------------ fail-soft paths

def test_complete_report_cites_only_verified_claims(flow_settings, tmp_path):
    engine = FakeEngine(script())
    result = run_fake(flow_settings, tmp_path, engine)
    report = result.report
    assert result.status == "complete"
    assert report["stats"]["quotes_rejected"] >= 1          # "makes rockets" is not in the page
    assert report["stats"]["citations_dropped"] == 2          # c99 and c42
    assert report["stats"]["statements_dropped"] == 1
    md = result.markdown_path.read_text()
    for heading in ("# Deep Dive:", "## Answer", "## Executive Summary", "## Findings", "## Open Questions",
                    "## Sources", "## Run statistics"):
        assert heading in md
    for source in report["sources"]:
        for quote in source["quotes"]:
            assert quote in PAGES[source["url"]]
    assert "[1]" in md


def test_plan_failure_gives_an_error_report(flow_settings, tmp_path):
    engine = FakeEngine(script(plan=lambda m, s: fail("plan")))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "plan_failed" and result.exit_code == 4  # a model-output failure
    assert result.markdown_path.exists() and result.json_path.exists()
    assert "planning failed" in result.markdown_path.read_text()
    assert json.loads((result.run_dir / "stats.json").read_text())["model_calls"] == 1


def test_no_sources_report(flow_settings, tmp_path):
    engine = FakeEngine(script())
    result = run_fake(flow_settings, tmp_path, engine, hits=[])
    assert result.status == "no_sources"
    assert result.report["stats"]["sources_fetched"] == 0
    assert "## Run statistics" in result.markdown_path.read_text()


def test_every_claim_refuted_is_inconclusive_and_lists_them(voting_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"reason": "quote does not say so", "verdict": "refuted"}))
    result = run_fake(voting_settings.with_overrides({"pipeline.restate_killed": False}), tmp_path, engine)
    assert result.status == "inconclusive"
    md = result.markdown_path.read_text()
    assert "### Claims not confirmed" in md and "quote does not say so" in md
    assert result.report["sources"], "refuted claims keep their sources"


def test_report_with_every_statement_dropped_lists_verified_claims_in_both_files(flow_settings, tmp_path):
    """A synthesis whose statements all cite unverified claims keeps its answer, and the
    verified claims become the findings: in the markdown and in the JSON alike, with the
    same numbered sources."""
    draft = ReportDraft(answer="Jane Roe.", executive_summary="Jane Roe founded Alpha Corp.",
                        findings=[{"theme": "Founder", "statements": [
                            {"text": "Uncited statement.", "claim_ids": ["c42"]}]}])
    result = run_fake(flow_settings, tmp_path, FakeEngine(script(synthesize=lambda m, s: draft)))
    report = result.report
    assert result.status == "complete" and report["stats"]["statements_dropped"] == 1
    md = result.markdown_path.read_text()
    assert "### Verified claims" in md
    [finding] = report["findings"]
    confirmed = {c["id"] for c in report["claims"] if c["verdict"] and c["verdict"]["confirmed"]}
    assert finding["theme"] == "Verified claims"
    assert {cid for st in finding["statements"] for cid in st["claim_ids"]} == confirmed
    listed = {int(n) for n in re.findall(r"^\[(\d+)\] .+ - <.+>", md.split("## Sources")[1], flags=re.M)}
    assert listed == {s["n"] for s in report["sources"]} and listed


def test_written_text_must_rest_on_the_verified_claims(flow_settings, tmp_path):
    """A statement citing a verified claim but saying something else, and an answer that
    none of the claims bears out, are dropped and counted; grounded text stays."""
    draft = ReportDraft(
        answer="2018-04-23 11:52:51 12:52:51", executive_summary="Jane Roe founded Alpha Corp in 1901.",
        findings=[{"theme": "Founder", "statements": [
            {"text": "Jane Roe founded Alpha Corp.", "claim_ids": ["c1"]},
            {"text": "Dustin Smith won the 1944 Olympic marathon in Paris.", "claim_ids": ["c1"]}]}])
    result = run_fake(flow_settings, tmp_path, FakeEngine(script(synthesize=lambda m, s: draft)))
    report = result.report
    stats = report["stats"]
    assert stats["texts_dropped"] == 1 and stats["statements_dropped"] == 1
    assert report["answer"] == "" and report["executive_summary"] == "Jane Roe founded Alpha Corp in 1901."
    texts = [st["text"] for f in report["findings"] for st in f["statements"]]
    assert texts == ["Jane Roe founded Alpha Corp."]
    md = result.markdown_path.read_text()
    assert "Dustin" not in md and "2018-04-23" not in md
    # The prose answer is gone; the direct answer drawn from the claims stays.
    assert md.split("## Answer")[1].split("##")[0].strip() == "**Lisbon.** [1][2]"


# ------------------------------------------------------------------ the report without the writer

def test_the_quick_profile_writes_no_report_call_and_the_standard_one_does():
    assert load_settings(profile="quick", env={}).pipeline.write_report is False
    assert load_settings(profile="standard", env={}).pipeline.write_report is True
    assert load_settings(profile="deep", env={}).pipeline.write_report is True


def test_without_the_writer_the_report_lists_the_verified_claims_by_sub_question(flow_settings, tmp_path):
    # The writer's call would fail: without it, nothing asks it and the run is complete.
    settings = flow_settings.with_overrides({"pipeline.write_report": False})
    engine = FakeEngine(script(synthesize=lambda m, s: fail("synthesize")))
    result = run_fake(settings, tmp_path, engine)
    report = result.report
    assert result.status == "complete" and result.exit_code == 0
    assert "synthesize" not in [purpose for purpose, _ in engine.calls]
    assert "synthesize" in report["stats"]["phase_seconds"]
    confirmed = {c["id"]: c["text"] for c in report["claims"] if c.get("verdict") and c["verdict"]["confirmed"]}
    statements = [st for f in report["findings"] for st in f["statements"]]
    # Every confirmed claim once, as worded and checked, citing itself; nothing else.
    assert sorted(st["text"] for st in statements) == sorted(confirmed.values())
    assert all(st["claim_ids"] == [cid] for st in statements for cid in confirmed if confirmed[cid] == st["text"])
    assert all(st["citations"] for st in statements)
    # Each under the sub-question that found it, with that sub-question's answer.
    themes = [f["theme"] for f in report["findings"]]
    assert themes[0] == "Who founded Alpha Corp? Jane Roe"
    assert any("Jane Roe was born in Lisbon in 1870." == st["text"] for st in report["findings"][-1]["statements"])
    assert report["answer"] == "" and report["short_answer"] == "Lisbon"
    # The summary: the verified sentences the direct answer cites, in its order, as checked.
    assert report["answer_claims"]
    assert report["executive_summary"] == " ".join(confirmed[cid] for cid in report["answer_claims"])
    assert report["executive_summary"] == "Alpha Corp was founded in 1901 by Jane Roe. Jane Roe was born in Lisbon in 1870."
    assert report["stats"]["citations_dropped"] == 0 and report["stats"]["statements_dropped"] == 0
    md = result.markdown_path.read_text()
    assert md.split("## Answer")[1].split("##")[0].strip().startswith("**Lisbon.** [")
    assert "### Who founded Alpha Corp? Jane Roe" in md and "- Jane Roe was born in Lisbon in 1870. [" in md
    # The direct answer and what it cites are those of the run with the writer.
    writer = run_fake(flow_settings, tmp_path / "writer", FakeEngine(script()))
    assert writer.report["short_answer"] == report["short_answer"]
    assert writer.report["answer_claims"] == report["answer_claims"]


def _verified(cid, text, *nodes):
    """A confirmed claim that is its own quote, found by ``nodes``."""
    from appliance.contracts import Importance, MergedClaim, QuoteRef, SourceQuality

    return MergedClaim(id=cid, text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                       quotes=[QuoteRef(source_url=f"http://{cid}.test", quote=text)], members=[cid],
                       node_ids=list(nodes))


def test_the_outline_groups_claims_under_the_first_sub_question_that_found_them():
    from appliance.pipeline.synthesize import OTHER_CLAIMS, outline

    nodes = [NodeState(id="q1", question="Who founded the Ardmore Press?", answer="Marta Olsen"),
             NodeState(id="q2", question="Where was #1 born?", resolved="Where was Marta Olsen born?",
                       answer="Kessel", depends_on=["q1"]),
             NodeState(id="q3", question="Where was the founder of the Ardmore Press born?", whole_question=True,
                       answer="Velka"),
             NodeState(id="q4", question="What did she print?", answer="Maps", answer_superseded=True)]
    confirmed = [_verified("m2", "Marta Olsen was born in Kessel.", "q2", "q1"),
                 _verified("m1", "Marta Olsen founded the Ardmore Press.", "q1"),
                 _verified("m3", "The Ardmore Press printed maps.", "q4"),
                 _verified("m4", "Kessel lies on the Velka.", "g9")]
    syn = outline(confirmed, nodes)
    assert [(theme, [(st.text, st.claim_ids) for st in sts]) for theme, sts in syn.findings] == [
        ("Who founded the Ardmore Press? Marta Olsen", [("Marta Olsen was born in Kessel.", ["m2"]),
                                                        ("Marta Olsen founded the Ardmore Press.", ["m1"])]),
        ("What did she print?", [("The Ardmore Press printed maps.", ["m3"])]),
        (OTHER_CLAIMS, [("Kessel lies on the Velka.", ["m4"])])]
    # The summary: the plan's answers in order, resolved; not a node that only reads, nor a
    # superseded answer.
    assert syn.executive_summary == "Who founded the Ardmore Press? Marta Olsen. Where was Marta Olsen born? Kessel."
    assert syn.answer == "" and syn.open_questions == []
    assert outline([], nodes).findings == []
    # A node of the gap round searched as named is no question: a colon parts it from its answer.
    searched = NodeState(id="g1", question="Marta Olsen  birthplace", answer="Kessel.", from_gap_round=True)
    syn = outline([_verified("m5", "Marta Olsen was born in Kessel.", "g1")], [searched])
    assert syn.findings[0][0] == "Marta Olsen birthplace: Kessel."
    assert syn.executive_summary == "Marta Olsen birthplace: Kessel."


def test_the_outline_summary_is_the_chain_the_answer_rests_on_not_a_sub_questions_other_answer():
    from appliance.pipeline.synthesize import as_sentence, outline

    # The first sub-question answers the society; the answer was drawn through the press.
    nodes = [NodeState(id="q1", question="Which body publishes Harbour Notes?", answer="the Harbour Society"),
             NodeState(id="q2", question="Who first led #1?", resolved="Who first led the Harbour Society?",
                       depends_on=["q1"]),
             NodeState(id="q3", question="Who first led the body that publishes Harbour Notes?",
                       whole_question=True)]
    confirmed = [_verified("m1", "Harbour Notes is published by the Ardmore Press on behalf of the Harbour Society", "q1"),
                 _verified("m2", "The Harbour Society meets in Kessel.", "q2"),
                 _verified("m3", "Marta Olsen, the first head of the Ardmore Press (1901-1920)", "q3")]
    syn = outline(confirmed, nodes, ["m1", "m3", "m9"])
    # Each cited sentence once, as checked, closed with a full stop; an id not confirmed is
    # left out; the sub-question's own answer is not the summary.
    assert syn.executive_summary == ("Harbour Notes is published by the Ardmore Press on behalf of the Harbour "
                                     "Society. Marta Olsen, the first head of the Ardmore Press (1901-1920).")
    assert outline(confirmed, nodes, ["m1", "m1"]).executive_summary.count("Harbour Notes") == 1
    # With nothing the answer cites, the sub-questions' answers, as before.
    assert outline(confirmed, nodes, []).executive_summary == "Which body publishes Harbour Notes? the Harbour Society."
    assert outline(confirmed, nodes, ["m9"]).executive_summary == "Which body publishes Harbour Notes? the Harbour Society."
    assert as_sentence('She wrote "Tides."') == 'She wrote "Tides."'
    assert as_sentence("Is it tidal?") == "Is it tidal?"
    assert as_sentence("It opened (in  1901)") == "It opened (in 1901)."
    assert as_sentence("") == ""


def test_synthesis_failure_lists_verified_claims(flow_settings, tmp_path):
    engine = FakeEngine(script(synthesize=lambda m, s: fail("synthesize")))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "synthesis_failed"
    md = result.markdown_path.read_text()
    assert "### Verified claims" in md and "Jane Roe was born in Lisbon in 1870." in md
    assert result.report["stats"]["confirmed"] >= 1


def test_extraction_failures_are_counted_not_fatal(flow_settings, tmp_path):
    engine = FakeEngine(script(extract=lambda m, s: fail("extract")))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "no_evidence"
    assert result.report["stats"]["extraction_failures"] == result.report["stats"]["sources_fetched"] > 0


def test_unexpected_error_still_writes_a_report(flow_settings, tmp_path):
    def boom(m, s):
        raise RuntimeError("disk controller on fire")
    engine = FakeEngine(script(gaps=boom, **{"node-answer": lambda m, s: ShortAnswer(answer="unknown")}))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "error" and result.exit_code == 1
    assert "disk controller on fire" in result.markdown_path.read_text()


@pytest.mark.parametrize("status, code", [("complete", 0), ("no_sources", 0), ("inconclusive", 0),
                                          ("plan_failed", 4), ("error", 3)])
def test_research_command_exit_code_follows_the_report(status, code, monkeypatch, tmp_path):
    """A failed run still prints its report's path, but exits non-zero with one error line,
    so a shell script or Makefile sees the failure; an empty-handed run is not a failure."""
    from click.testing import CliRunner

    from appliance.cli import main
    from appliance.pipeline import parts as parts_module
    from appliance.pipeline import run as run_module
    from appliance.pipeline.run import ResearchResult

    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(parts_module, "open_run_parts", lambda settings: (None, None, FakeFetcher({}), None))
    md = tmp_path / "r.md"

    def fake_research(question, settings, **kwargs):
        return ResearchResult(status=status, markdown_path=md, json_path=tmp_path / "r.json", run_dir=tmp_path,
                              report={"status": status, "error": "model weights are damaged" if code else None},
                              exit_code=code)

    monkeypatch.setattr(run_module, "research", fake_research)
    result = CliRunner().invoke(main, ["research", "Who founded Alpha Corp?", "--no-progress"])
    assert result.exit_code == code, result.output
    assert result.stdout.strip() == str(md), "the report's path is printed either way"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == (1 if code else 0)
    if code:
        assert status in errors[0] and "damaged" in errors[0]


# ------------------------------------------------------------------ quotes limited to the source's sentences

def _quote_sentences(messages, seed):
    """A model that keeps to the grammar: each quote is a whole sentence of the page."""
    text = messages[-1]["content"]
    if "Alpha Corp was founded" in text:
        return {"source_quality": "primary", "claims": [
            {"quote": "Alpha Corp was founded in 1901 by Jane Roe in Springfield.",
             "claim": "Jane Roe founded Alpha Corp in 1901.", "importance": "central"}]}
    if "Jane Roe was born" in text:
        return {"source_quality": "secondary", "claims": [
            {"quote": "Jane Roe was born in 1870 in Lisbon and studied engineering at Porto.",
             "claim": "Jane Roe was born in Lisbon in 1870.", "importance": "central"}]}
    return {"source_quality": "blog", "claims": []}


def test_quotes_are_limited_to_the_source_sentences(flow_settings, tmp_path):
    """With pipeline.quote_sentences (the default) the extraction schema, hence the grammar,
    admits as a quote only a sentence of the page shown: every quote is accepted verbatim."""
    settings = flow_settings.with_overrides({"pipeline.quote_sentences": True, "pipeline.restate_claims": True})
    engine = FakeEngine(script(extract=_quote_sentences))
    result = run_fake(settings, tmp_path, engine)
    schemas = [schema for purpose, schema in engine.schemas if purpose == "extract"]
    assert schemas
    for schema in schemas:
        quote = schema.model_json_schema()["$defs"]["QuotedClaim"]["properties"]["quote"]
        admitted = quote.get("enum") or [quote["const"]]  # one sentence is written as a const
        assert set(admitted) <= {s for page in PAGES.values() for s in quotable_sentences(page)}
        assert list(schema.model_json_schema()["$defs"]["QuotedClaim"]["properties"])[0] == "quote"
    stats = result.report["stats"]
    assert stats["claims_extracted"] >= 2 and stats["quotes_rejected"] == 0
    assert result.status == "complete"


def test_an_ungrounded_claim_becomes_its_quote(flow_settings, tmp_path):
    """A claim whose wording is not in its quote (here the prompt's example, echoed) is
    replaced by the quoted sentence, counted, and recorded beside the model's wording."""
    settings = flow_settings.with_overrides({"pipeline.quote_sentences": True, "pipeline.restate_claims": True})
    sentence = "Alpha Corp was founded in 1901 by Jane Roe in Springfield."

    def echo(messages, seed):
        if "Alpha Corp was founded" not in messages[-1]["content"]:
            return {"source_quality": "blog", "claims": []}
        return {"source_quality": "primary", "claims": [
            {"quote": sentence, "claim": "Frank Herbert wrote Dune.", "importance": "central"}]}

    result = run_fake(settings, tmp_path, FakeEngine(script(extract=echo)))
    stats = result.report["stats"]
    assert stats["claims_from_quote"] >= 1 and stats["quotes_rejected"] == 0
    texts = [c["text"] for c in result.report["claims"]]
    kept = sentence.removesuffix(".")  # the source's span, as the quote check keeps it
    assert kept in texts and not any("Dune" in t for t in texts)
    records = [json.loads(line) for line in (result.run_dir / "claims.jsonl").read_text().splitlines()]
    assert any(r["claim"] == "Frank Herbert wrote Dune." and r.get("claim_from_quote") == kept for r in records)
    assert "claims restated as their quote" in result.markdown_path.read_text()


def test_a_paraphrased_quote_cannot_pass_the_sentence_schema(flow_settings, tmp_path):
    """What the grammar prevents for the real model, the validator refuses for any engine: a
    quote that is not one of the page's sentences fails the extraction, counted as such."""
    settings = flow_settings.with_overrides({"pipeline.quote_sentences": True})

    def paraphrase(messages, seed):
        return {"source_quality": "primary", "claims": [
            {"quote": "Alpha Corp began in 1901.", "claim": "Alpha Corp began in 1901.", "importance": "central"}]}

    result = run_fake(settings, tmp_path, FakeEngine(script(extract=paraphrase)))
    stats = result.report["stats"]
    assert stats["extraction_failures"] == stats["sources_fetched"] > 0
    assert stats["claims_extracted"] == 0 and result.status == "no_evidence"


# ------------------------------------------------------------------ gap round, barrier, pipelining

def test_gap_round_runs_once_and_never_recurses(flow_settings, tmp_path):
    settings = flow_settings.with_overrides({"pipeline.gap_questions": 2})
    engine = FakeEngine(script(
        **{"node-answer": lambda m, s: ShortAnswer(answer="unknown")},
        gaps=lambda m, s: GapQuestions(questions=["When did Jane Roe die?", "Who succeeded Jane Roe?"])))
    result = run_fake(settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    assert purposes.count("gaps") == 1
    gap_nodes = [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]
    assert [n["id"] for n in gap_nodes] == ["g1", "g2"]
    assert result.report["stats"]["gap_nodes"] == 2


def test_with_no_gaps_the_gap_round_names_its_search_from_the_verified_quotes(flow_settings, tmp_path):
    """Nodes that answered leave no gaps: one step reads the verified quotes and names the one
    search still missing, researched as one more node; none when the step says the quotes
    answer, when it repeats a search already run, or when the step fails (the run goes on)."""
    seen = []
    # One sub-question, which its claims answer: no gap is left.
    settings = flow_settings.with_overrides({"pipeline.min_nodes": 1})
    one_node = lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?")])

    def step(messages, seed):
        seen.append(messages[-1]["content"])
        return IterativeStep(known="Jane Roe founded Alpha Corp.", next_search="Jane Roe birthplace Lisbon")

    engine = FakeEngine(script(plan=one_node, **{"next-search": step}))
    result = run_fake(settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    assert purposes.count("next-search") == 1 and "gaps" not in purposes, (purposes, result.report["plan"]["nodes"])
    # It read what the sources say: the verified claims' quotes, with their titles.
    assert "Jane Roe was born in 1870 in Lisbon" in seen[0] or "Alpha Corp was founded in 1901 by Jane Roe" in seen[0]
    [node] = [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]
    assert node["question"] == "Jane Roe birthplace Lisbon" and node["queries"] == ["Jane Roe birthplace Lisbon"]
    assert result.report["stats"]["gap_nodes"] == 1

    for answer, why in ((IterativeStep(known="", next_search=""), "answered"),
                        (IterativeStep(known="", next_search="WHO FOUNDED ALPHA CORP?"), "a sub-question already asked"),
                        (IterativeStep(known="", next_search="Frank Herbert birthplace"), "the prompt's example"),
                        (fail("next-search"), "failed")):
        engine = FakeEngine(script(plan=one_node, **{"next-search": lambda m, s, a=answer: a}))
        result = run_fake(settings, tmp_path / why.replace(" ", "-"), engine)
        assert result.status == "complete", why
        assert not [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]], why
        assert result.report["stats"]["gap_nodes"] == 0, why
    assert result.report["stats"]["model_failures"] == 1


@pytest.mark.parametrize("gaps", [
    [], ["Who founded Alpha Corp?"], ["Where was the Alpha Corp founder born?"], fail("gaps")],
    ids=["none", "already-asked", "the-question-again", "failed"])
def test_gaps_that_give_no_new_sub_question_go_to_the_next_search_step(flow_settings, tmp_path, gaps):
    """Open gaps the gap prompt turns into nothing new (no question, one already asked, the
    question again, or a failed call) still leave the question unanswered: the next-search
    step names the missing hop, which becomes the gap round's one node."""
    engine = FakeEngine(script(
        **{"node-answer": lambda m, s: ShortAnswer(answer="unknown"),
           "gaps": lambda m, s: GapQuestions(questions=gaps) if isinstance(gaps, list) else gaps,
           "next-search": lambda m, s: IterativeStep(known="", next_search="Jane Roe birthplace")}))
    result = run_fake(flow_settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    assert purposes.count("gaps") == 1 and purposes.count("next-search") == 1, purposes
    [node] = [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]
    assert node["question"] == "Jane Roe birthplace"
    assert result.status == "complete"
    # gap_next_search false: the round ends with no new node and no next-search call.
    engine = FakeEngine(script(
        **{"node-answer": lambda m, s: ShortAnswer(answer="unknown"),
           "gaps": lambda m, s: GapQuestions(questions=gaps) if isinstance(gaps, list) else gaps,
           "next-search": lambda m, s: IterativeStep(known="", next_search="Jane Roe birthplace")}))
    result = run_fake(flow_settings.with_overrides({"pipeline.gap_next_search": False}), tmp_path / "off", engine)
    purposes = [p for p, _ in engine.calls]
    assert purposes.count("gaps") == 1 and "next-search" not in purposes, purposes
    assert not [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_gap_that_asks_the_question_again_goes_to_the_next_search_step(flow_settings, tmp_path, enabled):
    """Check gap-restates: a sub-question that is the question as asked (reworded) found no
    answer, so its only gap is the question again. Reworded once more it is the same search;
    the next-search step reads what was verified and names the hop still missing instead.
    Switched off, the gap goes to the gap prompt as before."""
    settings = flow_settings.with_overrides({"pipeline.min_nodes": 1})
    if not enabled:
        settings = settings.with_overrides({"checks.disabled": ["gap-restates"]})
    whole = lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Where was the founder of the Alpha Corp born?")])
    engine = FakeEngine(script(
        plan=whole, **{"node-answer": lambda m, s: ShortAnswer(answer="unknown"),
                       "next-search": lambda m, s: IterativeStep(known="Jane Roe founded it.",
                                                                 next_search="Jane Roe birthplace"),
                       "gaps": lambda m, s: GapQuestions(questions=["Where was the Alpha Corp founder born?"])}))
    result = run_fake(settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    [q1] = [n for n in result.report["plan"]["nodes"] if n["id"] == "q1"]
    assert q1["gaps"] == ["Where was the founder of the Alpha Corp born?"]
    [gap_node] = [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]
    counts = result.report["checks"]["counts"]
    if enabled:
        assert "gaps" not in purposes and purposes.count("next-search") == 1, purposes
        assert gap_node["question"] == "Jane Roe birthplace"
        assert counts.get("gap-restates") == 1
    else:
        assert "next-search" not in purposes and purposes.count("gaps") == 1, purposes
        assert gap_node["question"] == "Where was the Alpha Corp founder born?"
        assert "gap-restates" not in counts


@pytest.mark.parametrize("gap,question,again", [
    ("Where was the founder of Alpha Corp born?", "Where was the founder of Alpha Corp born?", True),
    ("In which town was the founder of Alpha Corp born?", "Where was the founder of Alpha Corp born?", True),
    ("Who founded Alpha Corp?", "Where was the founder of Alpha Corp born?", False),
    ("Where was Jane Roe born?", "Where was the founder of Alpha Corp born?", False),
    ("What did the founder of Alpha Corp study, and where was the founder of Alpha Corp born?",
     "Where was the founder of Alpha Corp born?", False),
])
def test_says_the_question_again(gap, question, again):
    from appliance.pipeline.gaps import says_the_question_again
    assert says_the_question_again(gap, question) is again


@pytest.mark.parametrize("next_search", ["Jane Roe birthplace", ""])
def test_an_answer_to_the_whole_question_leaves_the_chain_when_a_further_search_is_named(
        flow_settings, tmp_path, next_search):
    """Check chain-superseded: a sub-question that is the question as asked answered "Springfield";
    the step, reading every verified quote, found them short and named a search: that answer is
    not offered to the final answer as a step of its chain (``pipeline.answer_chain`` on). With
    no search named it stays."""
    settings = flow_settings.with_overrides({"pipeline.min_nodes": 1, "pipeline.answer_chain": True})
    whole = lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Where was the founder of Alpha Corp born?")])
    answer_prompts = []

    def answer(messages, seed):
        answer_prompts.append(messages[-1]["content"])
        return ShortAnswer(answer="Lisbon")

    engine = FakeEngine(script(plan=whole, answer=answer,
                               **{"node-answer": lambda m, s: ShortAnswer(answer="Springfield"),
                                  "next-search": lambda m, s: IterativeStep(known="", next_search=next_search)}))
    result = run_fake(settings, tmp_path, engine)
    [q1] = [n for n in result.report["plan"]["nodes"] if n["id"] == "q1"]
    assert q1["answer"] == "Springfield" and q1["answer_superseded"] is bool(next_search)
    chained = "Where was the founder of Alpha Corp born? Springfield" in answer_prompts[0]
    assert chained is not bool(next_search)
    assert ("chain-superseded" in result.report["checks"]["counts"]) is bool(next_search)


def test_barrier_waits_for_every_node(flow_settings, tmp_path):
    engine = FakeEngine(script())
    run_fake(flow_settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    first_vote = purposes.index("vote")
    main_round = purposes[:purposes.index("gaps")] if "gaps" in purposes else purposes
    assert all(p not in ("extract", "node-answer", "queries") for p in main_round[first_vote:])


def test_children_search_and_read_with_their_parents_answers(flow_settings, tmp_path):
    """Multi-hop: once q1 found "Jane Roe", q2 ("Where was the founder born?") searches with
    that name (no model call for its query) and its extraction prompt carries it."""
    extract_prompts = []

    def extract(messages, seed):
        extract_prompts.append(messages[-1]["content"])
        return _extract(messages, seed)

    backend = FakeBackend(HITS)
    engine = FakeEngine(script(extract=extract))
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    result = research("Where was the founder of Alpha Corp born?", flow_settings, models=models,
                      backend=backend, fetcher=FakeFetcher(PAGES), embedder=get_embedder(flow_settings),
                      out_dir=tmp_path / "reports")
    assert "queries" not in [p for p, _ in engine.calls]
    assert backend.queries[:2] == ["Who founded Alpha Corp?", "Where was the founder born? Jane Roe"]
    nodes = {n["id"]: n for n in result.report["plan"]["nodes"]}
    assert nodes["q1"]["answer"] == "Jane Roe"
    child = [p for p in extract_prompts if p.startswith("Sub-question: Where was the founder born?")]
    assert child and all("Who founded Alpha Corp? Jane Roe." in p for p in child)


def test_a_reference_to_an_earlier_answer_is_filled_in(flow_settings, tmp_path):
    """The planner writes "Where was #1 born?"; once q1 answered "Jane Roe" the node is
    researched as "Where was Jane Roe born?" (and depends on q1 even if the plan forgot it)."""
    plan = Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?"),
                                 PlanNode(id="q2", question="Where was #1 born?")])
    backend = FakeBackend(HITS)
    engine = FakeEngine(script(plan=lambda m, s: plan))
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    result = research("Where was the founder of Alpha Corp born?", flow_settings, models=models,
                      backend=backend, fetcher=FakeFetcher(PAGES), embedder=get_embedder(flow_settings),
                      out_dir=tmp_path / "reports")
    nodes = {n["id"]: n for n in result.report["plan"]["nodes"]}
    assert nodes["q2"]["depends_on"] == ["q1"]
    assert any("added dependency q2 -> q1" in r for r in result.report["plan"]["repairs"])
    assert nodes["q2"]["question"] == "Where was #1 born?" and nodes["q2"]["resolved"] == "Where was Jane Roe born?"
    assert "Where was Jane Roe born?" in backend.queries


def test_a_reference_to_an_unanswered_node_keeps_its_question():
    from appliance.contracts import NodeState
    from appliance.pipeline.gather import resolve_question

    parent = NodeState(id="q1", question="Who founded Alpha Corp?")
    child = NodeState(id="q2", question="Where was #1 born, and is #7 related?", depends_on=["q1"])
    assert resolve_question(child, [parent]) == \
        "Where was (the answer to: Who founded Alpha Corp) born, and is #7 related?"


def test_with_more_queries_the_model_writes_them_from_the_parents_answers(flow_settings, tmp_path):
    seen = []

    def queries(m, s):
        seen.append(m[-1]["content"])
        return SearchQueries(queries=["jane roe birthplace"])

    settings = flow_settings.with_overrides({"pipeline.min_queries": 2, "pipeline.max_queries": 2})
    engine = FakeEngine(script(queries=queries))
    run_fake(settings, tmp_path, engine)
    assert any("Who founded Alpha Corp? Jane Roe." in text for text in seen)


def test_an_answer_the_claims_do_not_bear_is_not_carried_forward(flow_settings, tmp_path):
    backend = FakeBackend(HITS)
    engine = FakeEngine(script(**{"node-answer": lambda m, s: ShortAnswer(answer="Marie Curie")}))
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    result = research("Where was the founder of Alpha Corp born?", flow_settings, models=models,
                      backend=backend, fetcher=FakeFetcher(PAGES), embedder=get_embedder(flow_settings),
                      out_dir=tmp_path / "reports")
    assert all(n["answer"] == "" for n in result.report["plan"]["nodes"])
    assert "Where was the founder born?" in backend.queries


def test_a_node_answer_is_read_from_the_sentences_its_claims_quote(flow_settings, tmp_path):
    """A node's short answer comes from the short-answer prompt over the verbatim sentences its
    claims quote (with their source titles); an unanswered node becomes a gap."""
    seen = []

    def node_answer(messages, seed):
        seen.append(messages)
        return ShortAnswer(answer="Jane Roe" if "founded" in messages[-1]["content"] else "unknown")

    result = run_fake(flow_settings, tmp_path, FakeEngine(script(**{"node-answer": node_answer})))
    from appliance import questions
    from appliance.pipeline import prompts
    system = prompts.short_answer("q", "e", questions.today().isoformat())[0]["content"]
    assert seen and all(m[0]["content"] == system for m in seen)
    first = seen[0][-1]["content"]
    assert "[1] one: Alpha Corp was founded in 1901 by Jane Roe" in first
    assert first.rstrip().endswith("Question: Who founded Alpha Corp?")
    nodes = {n["id"]: n for n in result.report["plan"]["nodes"]}
    assert nodes["q1"]["answer"] == "Jane Roe" and nodes["q1"]["gaps"] == []
    assert nodes["q2"]["answer"] == "" and nodes["q2"]["gaps"] == ["Where was the founder born?"]


def test_a_node_answer_reads_the_claims_about_what_it_asks(flow_settings, tmp_path):
    """"Who founded Alpha Corp?" also read the page on Jane Roe's birth: that claim names
    nothing the node asks about, so the node's answer and findings leave it out (it stays in
    the run's pool). A claim that names nothing (a sentence's first word is not taken for a
    name) is read. With the names check off every claim is read, as before."""
    def extract(messages, seed):
        if "Springfield is a city" in messages[-1]["content"]:
            return Extraction(source_quality="blog", claims=[
                {"claim": "Springfield has a harbour.", "quote": "Springfield is a city with a large harbour",
                 "importance": "central"}])
        return _extract(messages, seed)

    def node_answer(messages, seed):
        seen.append(messages[-1]["content"])
        return ShortAnswer(answer="Jane Roe")

    for check in (True, False):
        seen: list[str] = []
        settings = flow_settings.with_overrides({"pipeline.name_check": check})
        result = run_fake(settings, tmp_path / str(check),
                          FakeEngine(script(extract=extract, **{"node-answer": node_answer})))
        founder = [s for s in seen if s.rstrip().endswith("Question: Who founded Alpha Corp?")]
        assert founder and all("Alpha Corp was founded" in s for s in founder)
        assert any("Jane Roe was born in 1870" in s for s in founder) is not check
        nodes = {n["id"]: n for n in result.report["plan"]["nodes"]}
        assert ("Lisbon" in nodes["q1"]["findings"]) is not check
        assert any(c["text"] == "Jane Roe was born in Lisbon in 1870." for c in result.report["claims"])
        # q2 ("Where was the founder born? Jane Roe") read only the Springfield page, whose
        # claim names nothing ("Springfield" opens its sentences): it is read.
        assert nodes["q2"]["findings"] == "Springfield has a harbour."


def test_a_page_title_names_the_subject_its_sentences_call_he():
    """"Who composed Bastien und Bastienne?": the page "Bastien und Bastienne" says "Mozart
    already had ...", naming the opera only in its title; the page on the actor Bastien
    Bouillon names "Bastien". Both are about what the node asks; a page on another opera is not."""
    from types import SimpleNamespace

    from appliance.contracts import Claim, Importance, SourceQuality
    from appliance.pipeline.gather import about

    pages = {"u1": ("Bastien und Bastienne", "Although he was very young, Mozart already had excellent vocal writing skills."),
             "u2": ("Bastien Bouillon", "Bastien Bouillon is a French actor."),
             "u3": ("Die Zauberflote", "The libretto was written by Emanuel Schikaneder in 1791.")}
    settings = load_settings(env={})
    run = SimpleNamespace(settings=settings, checks=Firings(Switches.of(settings)))
    claims = [Claim(id=f"q1-s{i}-c1", node_id="q1", text=x, quote=x, source_url=u, source_title=t,
                    importance=Importance.central, source_quality=SourceQuality.primary)
              for i, (u, (t, x)) in enumerate(pages.items(), start=1)]
    texts = {u: x for u, (_, x) in pages.items()}
    kept = about(run, "Who composed Bastien und Bastienne?", claims, texts)
    assert [c.source_url for c in kept] == ["u1", "u2"]
    # Without its title the Mozart sentence names nothing the node asks about.
    untitled = claims[0].model_copy(update={"source_title": ""})
    assert [c.source_url for c in about(run, "Who composed Bastien und Bastienne?", [untitled] + claims[1:], texts)] == ["u2"]
    # When no claim is about what the node asks, none is read: pages on other districts do not
    # say which district LaHave is in.
    assert about(run, "What is the name of the district in which LaHave is located?", claims[2:], texts) == []


# ------------------------------------------------------------------ the answer in the asked form

def test_the_answer_opens_with_the_direct_answer(flow_settings, tmp_path):
    seen = []

    def answer(messages, seed):
        seen.append(messages)
        return ShortAnswer(answer="Lisbon.")

    result = run_fake(flow_settings, tmp_path, FakeEngine(script(answer=answer)))
    assert result.report["short_answer"] == "Lisbon"
    md = result.markdown_path.read_text()
    answer_section = md.split("## Answer")[1].split("##")[0].strip()
    assert answer_section.startswith("**Lisbon.**") and "Jane Roe, born in Lisbon." in answer_section
    # The same short-answer prompt as the baselines, fed with the confirmed claims and quotes.
    from appliance.pipeline import prompts
    assert seen[0][0] == prompts.short_answer("x", "y", "z")[0] | {"content": seen[0][0]["content"]}
    assert seen[0][0]["content"].startswith("Answer with the shortest phrase")
    # The quote is read once: in the text around it, not again under its claim.
    assert seen[0][1]["content"].count("Jane Roe was born in 1870 in Lisbon") == 1


def test_the_answer_reads_the_chain_of_answered_sub_questions(flow_settings, tmp_path):
    """With ``pipeline.answer_chain``, after the claims the answer prompt lists each
    sub-question with its answer when that answer rests on the evidence ("In which country is
    Midway? United States" beside "Midway is in Arkansas."). Off, the default, it reads the
    claims and the text around them alone."""
    from appliance.contracts import NodeState
    from appliance.pipeline.synthesize import chain_listing

    seen = []

    def answer(messages, seed):
        seen.append(messages[-1]["content"])
        return ShortAnswer(answer="Lisbon")

    run_fake(flow_settings, tmp_path / "off", FakeEngine(script(answer=answer)))
    assert "Alpha Corp was founded" in seen[0] and "Sub-questions answered" not in seen[0]
    seen.clear()
    on = flow_settings.with_overrides({"pipeline.answer_chain": True, "state.home": str(tmp_path / "on" / "home")})
    run_fake(on, tmp_path / "on", FakeEngine(script(answer=answer)))
    assert "Sub-questions answered from this evidence:\n- Who founded Alpha Corp? Jane Roe" in seen[0]
    assert seen[0].index("Sub-questions answered") > seen[0].index("Alpha Corp was founded")
    nodes = [NodeState(id="q1", question="In which country is Midway?", answer="United States"),
             NodeState(id="q2", question="Where is McRae?", answer="Lisbon"),
             NodeState(id="q3", question="Who owns KAGH-FM?")]
    evidence = "Midway is an unincorporated community in White County, Arkansas, United States"
    assert chain_listing(nodes, evidence) == "- In which country is Midway? United States"


def test_the_direct_answer_cites_each_hop_that_led_to_it(flow_settings, tmp_path):
    """"Lisbon" rests on the founder's birthplace, and that on who founded Alpha Corp: the
    direct answer cites both sources, numbered first, in the markdown and the JSON alike."""
    engine = FakeEngine(script(answer=lambda m, s: ShortAnswer(answer="Lisbon")))
    result = run_fake(flow_settings, tmp_path, engine)
    report = result.report
    nodes = {n["id"]: n for n in report["plan"]["nodes"]}
    assert nodes["q1"]["answer"] == "Jane Roe"
    cited = {s["n"]: s["url"] for s in report["sources"]}
    assert report["answer_citations"] == [1, 2]
    assert {cited[1], cited[2]} == {"http://a.test/one", "http://b.test/two"}
    claims = {c["id"]: c for c in report["claims"]}
    assert all(claims[cid]["verdict"]["confirmed"] for cid in report["answer_claims"])
    answer_section = result.markdown_path.read_text().split("## Answer")[1].split("##")[0].strip()
    assert answer_section.startswith("**Lisbon.** [1][2]")


def test_the_run_folder_records_what_the_answer_read_and_said(flow_settings, tmp_path):
    """``answer.json`` holds the final answer call's evidence (the prompt's), the model's raw
    answer and the answer the run kept after the answer checks; a rerun that makes no answer
    call leaves no earlier attempt's record behind."""
    seen = []

    def answer(messages, seed):
        seen.append(messages[-1]["content"])
        return ShortAnswer(answer="Lisbon.")

    result = run_fake(flow_settings, tmp_path, FakeEngine(script(answer=answer)))
    record = json.loads((result.run_dir / "answer.json").read_text())
    assert record["question"] == result.report["question"]
    assert record["raw"] == "Lisbon." and record["answer"] == "Lisbon" == result.report["short_answer"]
    assert record["evidence"] and record["evidence"] in seen[-1]
    assert "Jane Roe was born in 1870 in Lisbon" in record["evidence"]
    assert record["choices"] == [] and record["allowed"] == []

    # The model's answer dropped by a check: recorded as said, kept as nothing.
    dropped = run_fake(flow_settings.with_overrides({"state.home": str(tmp_path / "two" / "home")}), tmp_path / "two",
                       FakeEngine(script(answer=lambda m, s: ShortAnswer(answer="Atlantis"))))
    record = json.loads((dropped.run_dir / "answer.json").read_text())
    assert record["raw"] == "Atlantis" and record["answer"] == "" == dropped.report["short_answer"]

    # No valid output: recorded with raw null, beside the evidence the call read.
    failed = run_fake(flow_settings.with_overrides({"state.home": str(tmp_path / "three" / "home")}),
                      tmp_path / "three", FakeEngine(script(answer=lambda m, s: fail("answer"))))
    record = json.loads((failed.run_dir / "answer.json").read_text())
    assert record["raw"] is None and record["answer"] == "" and record["evidence"]

    from appliance.pipeline.state import Recorder
    Recorder(dropped.run_dir)  # a new attempt of the same run starts without the old record
    assert not (dropped.run_dir / "answer.json").exists()


def test_answer_support_takes_the_claims_that_carry_each_step():
    from appliance.contracts import Importance, MergedClaim, NodeState, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import answer_support

    def claim(cid, text, node):
        return MergedClaim(id=cid, text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                           quotes=[QuoteRef(source_url=f"http://{cid}.test", quote=text)],
                           members=[cid], node_ids=[node])

    confirmed = [claim("m1", "Springfield has a harbour.", "q1"),
                 claim("m2", "Alpha Corp was founded by Jane Roe.", "q1"),
                 claim("m3", "Jane Roe was born in Lisbon.", "q2"),
                 claim("m4", "Bravo Ltd is a film studio.", "q3")]
    nodes = [NodeState(id="q1", question="Who founded Alpha Corp?", answer="Jane Roe"),
             NodeState(id="q2", question="Where was #1 born?", answer="Lisbon"),
             NodeState(id="q3", question="Is Bravo Ltd a studio?", answer="yes"),
             NodeState(id="q4", question="Unanswered?")]
    # Jane Roe: m2 and m3 carry it (m1 does not); Lisbon: m3; yes: q3's own claim; then the answer.
    assert answer_support(confirmed, nodes, "Lisbon") == ["m2", "m3", "m4"]
    assert answer_support(confirmed, nodes[3:], "Lisbon") == ["m3"]
    assert answer_support(confirmed, nodes[3:], "yes") == []
    # An answer read in the text around a quote is carried by that quote's claim.
    assert answer_support(confirmed, nodes[3:], "Porto") == []
    assert answer_support(confirmed, nodes[3:], "Porto", {"m4": "Bravo Ltd moved to Porto."}) == ["m4"]


def test_a_claim_that_only_carries_the_answer_is_not_cited_beside_it():
    """The Brand report cited "Hans Henrik Stoermann-Naess was a Norwegian sailor" beside
    "Norway": it carries the answer's word and names nothing else of the research."""
    from appliance.contracts import Importance, MergedClaim, NodeState, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import answer_support

    def claim(cid, text):
        return MergedClaim(id=cid, text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                           quotes=[QuoteRef(source_url=f"http://{cid}.test", quote=text)],
                           members=[cid], node_ids=["q2"])

    confirmed = [claim("m1", "Brand is a play by the Norwegian playwright Henrik Ibsen."),
                 claim("m2", "Hans Henrik Stoermann-Naess was a Norwegian sailor at the Summer Olympics."),
                 claim("m3", "Ibsen was a citizen of Norway.")]
    nodes = [NodeState(id="q1", question="Who wrote Brand?", answer="Henrik Ibsen"),
             NodeState(id="q2", question="What country was #1 a citizen of?",
                       resolved="What country was Henrik Ibsen a citizen of?", answer="Norway")]
    asked = "What country was the author of Brand a citizen of?\nWho wrote Brand?\nWhat country was Henrik Ibsen a citizen of?\nHenrik Ibsen"
    assert "m2" in answer_support(confirmed, nodes, "Norway")
    assert answer_support(confirmed, nodes, "Norway", asked=asked) == ["m1", "m3"]
    # The run's counter: the one claim the check kept out of the citations.
    firings = Firings()
    assert answer_support(confirmed, nodes, "Norway", asked=asked, checks=firings) == ["m1", "m3"]
    assert firings.log == [{"check": "answer-cites-on-subject", "on": "claim m2"}]


@pytest.mark.parametrize("given", ["unknown", "Marie Curie", "Frank Herbert"])
def test_a_direct_answer_not_resting_on_the_claims_is_dropped(given, flow_settings, tmp_path):
    result = run_fake(flow_settings, tmp_path, FakeEngine(script(answer=lambda m, s: ShortAnswer(answer=given))))
    assert result.report["short_answer"] == ""
    assert "**" not in result.markdown_path.read_text().split("## Answer")[1].split("##")[0]


@pytest.mark.parametrize("answer, kept", [
    ("The first president of the association which published the Journal", ""),
    ("the association's first president", ""),
    ("the Seine", "the Seine"),                       # a choice the question offers
    ("G. Stanley Hall", "G. Stanley Hall"),
    ("Hall, first president of the association", "Hall, first president of the association"),
])
def test_an_answer_that_says_the_question_again_is_no_answer(answer, kept):
    from appliance.pipeline.forms import short_answer_or_empty

    question = "Who was the first president of the association which published the Journal, the Seine's?"
    evidence = ("G. Stanley Hall was the first president of the association which published the Journal. "
                "The Seine flows through Paris.")
    assert short_answer_or_empty(answer, evidence, question) == kept


@pytest.mark.parametrize("question, form", [
    ("When did the country containing Nugegoda leave the British Empire?", "date"),
    ("What year did the company Novair is part of dissolve?", "date"),
    ("In which century was the abbey built?", "date"),
    ("David Jones plays rugby union and another sport that was started when?", "date"),
    ("Who was president when the area became a state?", "entity"),
    ("Where was Henrik Ibsen born?", "entity"),
    ("In which country is Midway?", "entity"),
    ("How many people live in the city where the band formed?", "number"),
    ("In the country of Jiménez, what percentage of edits come from Spain?", "number"),
    ("What is the population of the town where the ferry line began?", "number"),
    ("What was the total debt carried by the port authority of Ardmore?", "number"),
    ("What's the elevation of the pass the envoy crossed?", "number"),
    ("What is the name of the town where the ferry line began?", "phrase"),
    ("What was the price war between the two ferry lines called?", "phrase"),
    ("What is the speed?", "number"),
    ("Did the author of Brand live in Rome?", "yes_no"),
    ("Which county borders Avery County?", "phrase"),
])
def test_the_asked_form_decides_the_prompt_and_what_answers(question, form):
    from appliance.pipeline import prompts
    from appliance.pipeline.forms import short_answer_or_empty

    assert forms.asked_form(question) == form
    system = prompts.short_answer(question, "evidence", "2026-01-01")[0]["content"]
    assert ("date or year" in system) is (form == "date") and ("the number" in system) is (form == "number")
    evidence = "Hong Kong was taken in 1842 and 5.1 percent of it in March; Sonora lies south."
    place = short_answer_or_empty("Hong Kong", evidence, question)
    assert (place == "") is (form not in ("phrase", "entity"))  # a place does not answer When, How many or Did
    # ... nor a year Who or Where
    assert short_answer_or_empty("1842", evidence, question) == ("1842" if form not in ("yes_no", "entity") else "")
    assert (short_answer_or_empty("March 1842", evidence, question) == "") is (form in ("yes_no", "entity"))
    if form == "date":
        assert short_answer_or_empty("March", evidence, question) == "March"


@pytest.mark.parametrize("question, kind", [
    ("In which country is Midway, in the same county as McRae?", "country"),
    ("What county shares a border with the county in which Johnnycake is located?", "county"),
    ("Which state is Rochester in?", "state"),
    ("In the country that Jiménez is a part, what percentage of edits were from there?", ""),
    ("What kind of university did the author attend?", ""),
    ("When did the country containing Nugegoda leave the British Empire?", ""),
])
def test_a_question_asking_for_a_country_gets_a_country(question, kind):
    """"In which country ...?" told only "the shortest phrase" got the city or state its
    evidence named ("London", "Arkansas"): the prompt names the kind asked for."""
    from appliance.pipeline import prompts

    assert forms.asked_kind(question) == kind
    system = prompts.short_answer(question, "evidence", "2026-01-01")[0]["content"]
    assert (f"name of the {kind} the question asks for" in system) is bool(kind)


def test_short_answers_are_read_greedily(flow_settings, tmp_path):
    """A node's answer and the run's are one best reading of the evidence (answer_temperature
    0), the same on every run; the other calls keep the engine's own temperature."""
    engine = FakeEngine(script())
    run_fake(flow_settings, tmp_path, engine)
    asked = dict(engine.temperatures)
    assert asked["answer"] == 0.0 and asked["node-answer"] == 0.0
    assert asked["extract"] is None and asked["synthesize"] is None
    engine = FakeEngine(script())
    run_fake(flow_settings.with_overrides({"llm.answer_temperature": 0.5}), tmp_path / "hot", engine)
    assert {t for p, t in engine.temperatures if p in ("answer", "node-answer")} == {0.5}


def test_yes_does_not_answer_a_where_question(flow_settings, tmp_path):
    result = run_fake(flow_settings, tmp_path, FakeEngine(script(answer=lambda m, s: ShortAnswer(answer="Yes"))))
    assert result.report["short_answer"] == ""


@pytest.mark.parametrize("question, yes_no", [
    ("Are Christopher Nolan and Sathish Kalathil both film directors?", True),
    ("Did the author of Brand live in Rome?", True),
    ("Is the Seine or the Thames longer?", False),
    ("Who was the first president of the association?", False),
    ("Which county borders Avery County?", False),
])
def test_the_short_answer_prompt_asks_for_the_form_the_question_needs(question, yes_no):
    from appliance.pipeline import prompts
    from appliance.pipeline.forms import short_answer_or_empty

    system = prompts.short_answer(question, "evidence", "2026-01-01")[0]["content"]
    assert ("yes or no only" in system) is yes_no
    assert (short_answer_or_empty("Yes.", "evidence", question) == "Yes") is yes_no


def test_url_duplicates_and_budget_drops_are_counted(flow_settings, tmp_path):
    settings = flow_settings.with_overrides({"fetch.budget": 2, "pipeline.sources_per_node": 3})
    engine = FakeEngine(script())
    result = run_fake(settings, tmp_path, engine)
    stats = result.report["stats"]
    assert stats["sources_fetched"] + stats["sources_failed"] == 2
    assert stats["budget_drops"] >= 1
    assert stats["url_duplicates"] >= 1


# ------------------------------------------------------------------ questions and slugs

@pytest.mark.parametrize("question", ["", "   ", "\x00\x01", "x" * 100_000])
def test_unusable_questions_are_rejected(question):
    with pytest.raises(UsageError):
        clean_question(question)


@pytest.mark.parametrize("question", ["../../etc/passwd", "a; rm -rf / && echo $(id)", "مرحبا بالعالم؟",
                                      "🔥🔥?", "CON", "x" * 1999])
def test_slugs_are_safe_file_names(question):
    slug = slugify(clean_question(question))
    assert slug and "/" not in slug and "\\" not in slug and ".." not in slug
    assert len(slug) <= 60
    assert all(c.isalnum() or c == "-" for c in slug)


def test_a_quick_and_a_standard_run_of_one_question_on_one_day_keep_their_own_reports(flow_settings, tmp_path):
    """The run id names the profile (all but the default): a quick run after a standard one of
    the same question and day writes its own report and run folder, and overwrites neither."""
    standard = load_settings(profile="standard", env={"APPLIANCE_HOME": str(flow_settings.home)},
                             overrides={"pipeline.gap_questions": 1, "pipeline.quote_sentences": False,
                                        "pipeline.relevance_threshold": 0.0, "pipeline.question_sources": 0})
    first = run_fake(standard, tmp_path, FakeEngine(script()))
    second = run_fake(flow_settings, tmp_path, FakeEngine(script()))
    assert second.report["run_id"] == first.report["run_id"] + "-quick"
    assert first.report["run_id"] == run_id_for(clean_question("Where was the founder of Alpha Corp born?"),
                                                first.report["date"])
    reports = {p.name for p in (tmp_path / "reports").glob("*.json")}
    assert reports == {f"{first.report['run_id']}.json", f"{second.report['run_id']}.json"}
    for result, profile in ((first, "standard"), (second, "quick")):
        written = tmp_path / "reports" / f"{result.report['run_id']}.json"
        assert json.loads(written.read_text())["profile"] == profile
    runs = flow_settings.home / "runs"
    assert (runs / first.report["run_id"] / "plan.json").is_file()
    assert (runs / second.report["run_id"] / "plan.json").is_file()


# ------------------------------------------------------------------ the claims table

def test_claims_live_in_one_persistent_table_with_their_verdicts(flow_settings, tmp_path):
    """Every run adds its merged claims to the state folder's one claims table (no table per
    run); a rerun of the same run replaces its rows instead of adding to them."""
    import lancedb

    first = run_fake(flow_settings, tmp_path, FakeEngine(script()))
    db = lancedb.connect(str(flow_settings.home / "lancedb"))
    assert list(db.list_tables().tables) == ["claims"]
    table = db.open_table("claims")
    rows = table.to_arrow().to_pylist()
    assert {r["run_id"] for r in rows} == {first.report["run_id"]}
    assert len(rows) == first.report["stats"]["claims_after_dedup"]
    verdicts = {c["id"]: c["verdict"] for c in first.report["claims"]}
    for row in rows:
        voted = verdicts[row["claim_id"]]
        assert row["verdict"] == ("" if voted is None else "confirmed" if voted["confirmed"] else "killed")
        assert row["sources"] and len(row["vector"]) == 384

    run_fake(flow_settings, tmp_path, FakeEngine(script()))  # the same question again
    table = db.open_table("claims")
    assert table.count_rows() == len(rows)
    other = research("Who founded Alpha Corp?", flow_settings,
                     models=Models(*[FakeEngine(script())] * 4), backend=FakeBackend(HITS),
                     fetcher=FakeFetcher(PAGES), embedder=get_embedder(flow_settings),
                     out_dir=tmp_path / "reports")
    rows = db.open_table("claims").to_arrow().to_pylist()
    assert {r["run_id"] for r in rows} == {first.report["run_id"], other.report["run_id"]}


def test_the_direct_answer_reads_the_text_around_each_quote():
    from appliance.contracts import Importance, MergedClaim, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import context_listing, quote_context

    text = ("Novair was a British airline. It was part of the Rederi AB Nordstjernan group. "
            "The group sold it in 1990. " + "Filler words here. " * 80 + "It was dissolved in 1995.")
    quote = "It was part of the Rederi AB Nordstjernan group."
    window = quote_context(text, quote, chars=40)
    assert quote in window and window.startswith("Novair") and window.endswith("1990.")
    assert quote_context(text, "not in the text") == ""
    assert quote_context(text, quote, chars=0) == quote
    claims = [MergedClaim(id=f"m{i}", text="x", importance=Importance.central, source_quality=SourceQuality.primary,
                          quotes=[QuoteRef(source_url="http://a.test", quote=q)], members=[f"m{i}"], node_ids=["q1"])
              for i, q in enumerate([quote, quote, "It was dissolved in 1995.", "The group sold it in 1990."])]
    listing = context_listing(claims, {"http://a.test": text}, {"http://a.test": "Novair"}, total=1400)
    lines = listing.splitlines()
    # One line per source: both stretches of it, the sentence quoted twice once, in the source's order.
    assert len(lines) == 1 and lines[0].startswith("- Novair: Novair was a British airline.")
    assert lines[0].count("Nordstjernan") == 1 and " ... " in lines[0] and lines[0].endswith("dissolved in 1995.")
    other = claims + [MergedClaim(id="m9", text="x", importance=Importance.central, source_quality=SourceQuality.primary,
                                  quotes=[QuoteRef(source_url="http://b.test", quote="Sweden lies north.")],
                                  members=["m9"], node_ids=["q1"])]
    both = context_listing(other, {"http://a.test": text, "http://b.test": "Sweden lies north."},
                           {"http://a.test": "Novair"}, total=len(lines[0]))
    assert both.splitlines() == [lines[0]]  # the second source would pass the total
    assert context_listing(other, {"http://a.test": text, "http://b.test": "Sweden lies north."}, {}, total=1400)\
        .endswith("- untitled: Sweden lies north.")


def test_a_node_answer_reads_the_sentences_around_its_quotes_each_once():
    """The extractor quoted the sentence naming the subject; the next one answers. The node's
    answer reads both, per source in order, overlapping stretches once, within its budget."""
    from appliance.contracts import Claim, Importance, SourceQuality
    from appliance.pipeline.gather import node_evidence
    from appliance.pipeline.anchor import passage_around

    text = ("The formal study of adolescent psychology began with G. Stanley Hall's Adolescence in 1904. "
            "Hall, who was the first president of the American Psychological Association, viewed it as turmoil. "
            + "Filler words here. " * 40 + "Hall died in 1924.")
    first = "The formal study of adolescent psychology began with G. Stanley Hall's Adolescence in 1904."
    assert passage_around(text, [first, first]).count("first president") == 1
    far = passage_around(text, [first, "Hall died in 1924."], chars=60)
    assert far.startswith("The formal") and " ... " in far and far.endswith("Hall died in 1924.")
    assert passage_around(text, ["not in the text"]) == ""

    def claim(n, url, quote, title="Adolescence"):
        return Claim(id=f"q2-s1-c{n}", node_id="q2", text="x", quote=quote, source_url=url, source_title=title,
                     importance=Importance.central, source_quality=SourceQuality.primary)

    other = "The APA was founded in July 1892 at Clark University."
    claims = [claim(1, "u1", first), claim(2, "u2", other, "APA"), claim(3, "u1", first)]
    evidence = node_evidence(claims, {"u1": text, "u2": other})
    lines = evidence.splitlines()
    assert lines[0].startswith("[1] Adolescence: The formal") and "first president of the American" in lines[0]
    assert lines[1] == f"[2] APA: {other}" and len(lines) == 2
    # No text at hand, or past the budget: the quotes alone.
    assert node_evidence(claims, {}) == f"[1] Adolescence: {first}\n[2] APA: {other}"
    assert "first president" not in node_evidence(claims, {"u1": text}, total=100)


def test_release_all_lets_a_waiting_node_through_the_turnstile():
    """A node waiting its turn when the run stops (a full disk fails the node before it) must
    pass once the turnstile is opened for everyone, or the pool never winds down."""
    import threading

    from appliance.pipeline.gather import Turnstile

    turnstile = Turnstile([("q1", 0), ("q2", 0)])
    passed = threading.Event()

    def second():
        turnstile.wait(("q2", 0))
        passed.set()

    worker = threading.Thread(target=second, daemon=True)
    worker.start()
    assert not passed.wait(0.2)  # q1 has not passed yet
    turnstile.release_all()
    assert passed.wait(5)
    worker.join(5)
    turnstile.wait(("q1", 0))  # a released key never blocks


def test_answers_read_the_sentence_that_answers_two_sentences_after_the_quote():
    """The extractor quoted the sentence defining the title; the holder's name is two sentences
    (about 300 characters) on. A node's answer and the run's answer both read that far."""
    from appliance.contracts import Claim, Importance, MergedClaim, QuoteRef, SourceQuality
    from appliance.pipeline.gather import node_evidence
    from appliance.pipeline.synthesize import context_listing

    quote = ("The Leader of Opposition (LOP) in Uganda is the title bestowed upon the elected leader "
             "of the largest political party not within the ruling government.")
    text = (quote + " The Leader of Opposition appoints and heads an alternative Shadow Cabinet whose duty "
            "is to challenge and influence government legislation and policy on the floor of the Parliament of Uganda in Kampala. The current "
            "Leader of Opposition is Hon. Winnie Kiiza of the Forum for Democratic Change.")
    assert text.index("Winnie Kiiza") - len(quote) > 240  # past the names checks' window
    claim = Claim(id="q2-s1-c1", node_id="q2", text=quote, quote=quote, source_url="u1",
                  source_title="Leader of Opposition (Uganda)", importance=Importance.central,
                  source_quality=SourceQuality.primary)
    assert "Winnie Kiiza" in node_evidence([claim], {"u1": text})
    merged = MergedClaim(id="m1", text=quote, importance=Importance.central, source_quality=SourceQuality.primary,
                         quotes=[QuoteRef(source_url="u1", quote=quote)], members=["m1"], node_ids=["q2"])
    assert "Winnie Kiiza" in context_listing([merged], {"u1": text}, {"u1": "Leader of Opposition (Uganda)"})


def test_an_open_question_asked_twice_is_listed_once(flow_settings, tmp_path):
    """The writer listed "Where was Henrik Ibsen born?" twice; the report lists it once."""
    draft = script()["synthesize"](None, None)
    draft.open_questions = ["Where was Jane Roe born?", "Where was  Jane Roe born?", "where was jane roe born?",
                            "What did she study?"]
    result = run_fake(flow_settings, tmp_path, FakeEngine(script(synthesize=lambda m, s: draft)))
    assert result.report["open_questions"] == ["Where was Jane Roe born?", "What did she study?"]
    md = result.markdown_path.read_text()
    assert md.split("## Open Questions")[1].split("##")[0].count("Jane Roe born") == 1


def test_gaps_two_sub_questions_share_are_listed_once_in_markdown_and_json():
    """With no open questions from the writer the report lists the sub-questions' gaps: two
    sub-questions of the Brand run both left "Where was Henrik Ibsen born?", and the report
    listed it twice (and its JSON none). Now once, the same list in both."""
    from appliance.contracts import ReportData, RunStatus
    from appliance.report import render_json, render_markdown

    nodes = [NodeState(id="q1", question="Who wrote Brand?", gaps=["Where was Henrik Ibsen born?"]),
             NodeState(id="q2", question="What country was #1 a citizen of?",
                       gaps=["Where was  Henrik Ibsen born?", "When did he leave Norway?"])]
    data = ReportData(question="What country was the author of Brand a citizen of?", status=RunStatus.complete,
                      date="2026-12-01", model="m", profile="quick", run_id="r", nodes=nodes)
    listed = render_markdown(data).split("## Open Questions")[1].split("##")[0]
    assert listed.count("Henrik Ibsen born") == 1 and "When did he leave Norway?" in listed
    assert render_json(data)["open_questions"] == ["Where was Henrik Ibsen born?", "When did he leave Norway?"]


def test_open_questions_differing_only_in_articles_case_or_punctuation_are_listed_once():
    from appliance.contracts import ReportData, RunStatus
    from appliance.report import render_json, render_markdown

    nodes = [NodeState(id="q1", question="Who first led #2?", gaps=["Who was the first head of the Harbour Society?"]),
             NodeState(id="q2", question="Which body publishes Harbour Notes?",
                       gaps=["Who was first head of Harbour Society", "Who was the first head of the Ardmore Press?",
                             "   ", "?"])]
    data = ReportData(question="Who first led the body that publishes Harbour Notes?", status=RunStatus.complete,
                      date="2026-12-01", model="m", profile="quick", run_id="r", nodes=nodes)
    expected = ["Who was the first head of the Harbour Society?", "Who was the first head of the Ardmore Press?"]
    assert render_json(data)["open_questions"] == expected
    listed = render_markdown(data).split("## Open Questions")[1].split("##")[0]
    assert listed.count("Harbour Society") == 1 and "Ardmore Press" in listed


def test_a_claim_naming_only_the_last_answer_is_not_verified(flow_settings, tmp_path):
    """The last step's answer is what the claims bear out, not a subject of its own: "Lisbon is
    the capital of Portugal" names nothing of the research but the answer to "Where was the
    founder born?" (the Brand run verified "a Norwegian sailor" through "Norway"). The answer
    a later step built on (Jane Roe) still counts."""
    filler = " ".join(["The weather in the region is mild in most seasons of the year."] * 6)
    lisbon = f"Jane Roe was born in Lisbon in 1870. {filler} Lisbon is the capital of Portugal."
    pages = {"http://a.test/one": PAGES["http://a.test/one"], "http://d.test/four": lisbon}
    hits = [Hit(url=u, title=u, rank=i + 1) for i, u in enumerate(pages)]

    def extract(messages, seed):
        if "capital of Portugal" in messages[-1]["content"]:
            return Extraction(source_quality="primary", claims=[
                {"claim": "Jane Roe was born in Lisbon.", "quote": "Jane Roe was born in Lisbon in 1870",
                 "importance": "central"},
                {"claim": "Lisbon is the capital of Portugal.", "quote": "Lisbon is the capital of Portugal",
                 "importance": "central"}])
        return _extract(messages, seed)

    def node_answer(messages, seed):
        asked = messages[-1]["content"].split("Question:")[-1]
        return ShortAnswer(answer="Lisbon" if "born" in asked else "Jane Roe")

    settings = flow_settings.with_overrides({"pipeline.sources_per_node": 1})
    result = run_fake(settings, tmp_path, FakeEngine(script(extract=extract, **{"node-answer": node_answer})),
                      hits=hits, pages=pages)
    answers = {n["id"]: n["answer"] for n in result.report["plan"]["nodes"]}
    assert answers["q1"] == "Jane Roe" and answers["q2"] == "Lisbon"
    texts = {c["text"]: c for c in result.report["claims"]}
    assert texts["Jane Roe was born in Lisbon."]["verdict"]["confirmed"]
    assert not texts["Lisbon is the capital of Portugal."]["verdict"]
    assert result.report["stats"]["claims_off_subject"] >= 1


# ------------------------------------------------------------------ the question itself, always researched

def test_the_question_as_asked_is_one_more_node_after_the_plans():
    from appliance.pipeline.run import with_question_node

    planned = [NodeState(id="q1", question="Who founded Alpha Corp?"),
               NodeState(id="q2", question="Where was #1 born?", depends_on=["q1"])]
    nodes = with_question_node(planned, "Where was the founder of Alpha Corp born?", 2)
    assert [n.id for n in nodes] == ["q1", "q2", "q3"]
    assert nodes[-1].whole_question and nodes[-1].question == "Where was the founder of Alpha Corp born?"
    assert nodes[-1].depends_on == []
    # Not twice: a plan that already asks the question (the fallback plan), or the knob at 0.
    assert with_question_node(planned[:1], "who founded alpha corp?", 2) == planned[:1]
    assert with_question_node(planned, "Where was the founder of Alpha Corp born?", 0) == planned


def test_the_question_node_reads_what_the_plan_left_and_its_claims_are_verified(flow_settings, tmp_path):
    question = "Where was the founder of Alpha Corp born?"
    pages = dict(PAGES, **{"http://d.test/four": "The founder of Alpha Corp, Jane Roe, was born in Lisbon."})
    four = Hit(url="http://d.test/four", title="four", rank=1)
    hits = {"Who founded Alpha Corp?": HITS[:1], "Where was the founder born? Jane Roe": HITS[1:2],
            question: [HITS[0], four, HITS[2]]}

    def extract(messages, seed):
        if "The founder of Alpha Corp, Jane Roe" in messages[-1]["content"]:
            return Extraction(source_quality="primary", claims=[
                {"claim": "Jane Roe, founder of Alpha Corp, was born in Lisbon.",
                 "quote": "The founder of Alpha Corp, Jane Roe, was born in Lisbon", "importance": "central"}])
        return _extract(messages, seed)

    answered: list[str] = []

    def node_answer(messages, seed):
        answered.append(messages[-1]["content"].rsplit("Question:", 1)[-1].strip())
        return ShortAnswer(answer="Jane Roe")

    engine = FakeEngine(script(extract=extract, **{"node-answer": node_answer}))
    settings = flow_settings.with_overrides({"pipeline.question_sources": 2, "pipeline.gap_questions": 0})
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    backend = FakeBackend(hits)
    result = research(question, settings, models=models, backend=backend, fetcher=FakeFetcher(pages),
                      embedder=get_embedder(settings), out_dir=tmp_path / "reports")
    report = result.report
    whole = [n for n in report["plan"]["nodes"] if n["question"] == question]
    assert len(whole) == 1 and whole[0]["id"] == "q3" and whole[0]["whole_question"]
    # It searched the question as asked (no queries call for it) and read the two pages the
    # plan's nodes left among the question's top pages, not the one q1 had read.
    assert question in backend.queries
    read = {json.loads(line)["url"] for line in (result.run_dir / "sources.jsonl").read_text().splitlines()}
    assert {"http://d.test/four", "http://c.test/three"} <= read
    mine = [c for c in report["claims"] if "q3" in c["node_ids"]]
    assert {q["source_url"] for c in mine for q in c["quotes"]} <= {"http://d.test/four", "http://c.test/three"}
    # Its claim is verified like any other's, and no short answer of its own was asked for.
    assert any("born in Lisbon" in c["text"] and c["verdict"] and c["verdict"]["confirmed"] for c in mine)
    assert answered and not any(a.startswith(question) for a in answered)
    assert not whole[0]["answer"] and whole[0]["findings"]


def test_a_sub_question_that_is_the_question_reads_for_the_question_node_too(flow_settings, tmp_path):
    """A plan whose sub-question is the question as asked gets no question node beside it; that
    sub-question reads its own sources and the question node's (2 + 1 here), so the answer
    rests on no fewer pages than the two nodes would have read. Any other sub-question reads
    its own 2, and with no question node at all (question_sources 0) so does this one."""
    question = "Where was the founder of Alpha Corp born?"
    pages = dict(PAGES, **{"http://d.test/four": "The founder of Alpha Corp, Jane Roe, was born in Lisbon."})
    four = Hit(url="http://d.test/four", title="four", rank=4)
    hits = {question: HITS + [four], "Who founded Alpha Corp?": HITS + [four], "When was Alpha Corp founded?": []}
    for sources, plan_question, expected in ((1, question, 3), (1, "Who founded Alpha Corp?", 2), (0, question, 2)):
        engine = FakeEngine(script(plan=lambda m, s, q=plan_question: Plan(effort=1, nodes=[
            PlanNode(id="q1", question=q), PlanNode(id="q2", question="When was Alpha Corp founded?")])))
        settings = flow_settings.with_overrides({"pipeline.question_sources": sources, "pipeline.gap_questions": 0,
                                                 "pipeline.sources_per_node": 2,
                                                 "state.home": str(tmp_path / f"{sources}{expected}" / "home")})
        models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
        result = research(question, settings, models=models, backend=FakeBackend(hits), fetcher=FakeFetcher(pages),
                          embedder=get_embedder(settings), out_dir=tmp_path / f"{sources}{expected}" / "reports")
        read = [json.loads(line) for line in (result.run_dir / "sources.jsonl").read_text().splitlines()]
        assert len([r for r in read if r["node"] == "q1"]) == expected, (sources, plan_question)
        assert [n["id"] for n in result.report["plan"]["nodes"]] == (["q1", "q2"] if plan_question == question
                                                                    or not sources else ["q1", "q2", "q3"])


BRIDGE_QUESTION = "Who founded the firm that built the Velka Bridge?"
BRIDGE_PAGES = {
    "http://e.test/designer": "The Velka Bridge was designed by Tomas Kell, an engineer from Ardmore.",
    "http://e.test/bridge": "The Velka Bridge opened in 1901. It was built by Brandt and Sons.",
    "http://e.test/firm": "Brandt and Sons was founded by Ida Brandt in 1870 in Port Ardmore.",
}


def _bridge_run(tmp_path, settings, step):
    """A plan that misses the hop (it asks who designed the bridge); the question's own node
    reads that Brandt and Sons built it, and its step names the search for the firm's founder."""
    extract = quoting_extract(["The Velka Bridge was designed by Tomas Kell", "It was built by Brandt and Sons",
                               "Brandt and Sons was founded by Ida Brandt in 1870 in Port Ardmore"],
                              {"It was built by Brandt and Sons": "The Velka Bridge was built by Brandt and Sons."})

    hits = {"Who designed the Velka Bridge?": [Hit(url="http://e.test/designer", title="Tomas Kell", rank=1)],
            "When did the Velka Bridge open?": [],
            BRIDGE_QUESTION: [Hit(url="http://e.test/bridge", title="Velka Bridge", rank=1)],
            "Brandt and Sons founder": [Hit(url="http://e.test/firm", title="Brandt and Sons", rank=1)]}
    engine = FakeEngine(script(
        plan=lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Who designed the Velka Bridge?"),
                                                PlanNode(id="q2", question="When did the Velka Bridge open?")]),
        extract=extract, **{"node-answer": lambda m, s: ShortAnswer(answer="Tomas Kell"),
                            "answer": lambda m, s: ShortAnswer(answer="Ida Brandt"), "next-search": step}))
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    backend = FakeBackend(hits)
    result = research(BRIDGE_QUESTION, settings, models=models, backend=backend,
                      fetcher=FakeFetcher(BRIDGE_PAGES), embedder=get_embedder(settings), out_dir=tmp_path / "reports")
    return result, backend, engine


def _founder_step(messages, seed):
    passages = messages[-1]["content"]
    if "Ida Brandt" in passages:
        return IterativeStep(known="Ida Brandt founded Brandt and Sons.", next_search="")
    if "Brandt and Sons" in passages:
        return IterativeStep(known="Brandt and Sons built the bridge.", next_search="Brandt and Sons founder")
    return IterativeStep(known="", next_search="")


def test_the_question_node_searches_again_with_what_it_read(flow_settings, tmp_path):
    settings = flow_settings.with_overrides({"pipeline.question_sources": 1, "pipeline.question_searches": 3,
                                             "pipeline.gap_questions": 0})
    result, backend, engine = _bridge_run(tmp_path, settings, _founder_step)
    assert backend.queries.count("Brandt and Sons founder") == 1
    whole = next(n for n in result.report["plan"]["nodes"] if n["whole_question"])
    assert whole["queries"] == [BRIDGE_QUESTION, "Brandt and Sons founder"]
    # Two steps: the first names the search, the second (having read the founder) names none.
    assert [p for p, _ in engine.calls].count("next-search") == 2
    founded = next(c for c in result.report["claims"] if c["text"].startswith("Brandt and Sons was founded"))
    # The hop's claim is about what the step named, so it is on subject, verified and cited.
    assert whole["id"] in founded["node_ids"] and founded["verdict"]["confirmed"]
    assert result.report["short_answer"] == "Ida Brandt"
    assert founded["id"] in result.report["answer_claims"]


@pytest.mark.parametrize("searches,step,expected_steps", [
    (1, _founder_step, 0),                                                                # one search: no step
    (3, lambda m, s: IterativeStep(known="", next_search=BRIDGE_QUESTION.lower()), 1),   # a search made before
    (3, lambda m, s: IterativeStep(known="", next_search=""), 1),                        # nothing missing
    (3, fail("next-search"), 1),                                                         # no valid step
])
def test_the_question_node_stops_searching(flow_settings, tmp_path, searches, step, expected_steps):
    settings = flow_settings.with_overrides({"pipeline.question_sources": 1, "pipeline.question_searches": searches,
                                             "pipeline.gap_questions": 0})
    result, backend, engine = _bridge_run(tmp_path, settings, step)
    assert [p for p, _ in engine.calls].count("next-search") == expected_steps
    assert "Brandt and Sons founder" not in backend.queries
    assert result.status.value == "complete"
    assert not any(c["text"].startswith("Brandt and Sons was founded") for c in result.report["claims"])
