"""Control flow of the pipeline with a scripted model (the real model runs in test_research_e2e.py):
voting arithmetic, plan repair, each fail-soft path, the single gap round, the barrier."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.contracts import (Extraction, GapQuestions, Hit, NodeFindings, Plan, PlanNode,
                                 ReportDraft, SearchQueries, VoteRecord)
from appliance.embed import get_embedder
from appliance.pipeline.plan import check_plan, topo_order
from appliance.pipeline.quotes import quotable_sentences
from appliance.pipeline.run import Models, clean_question, research, slugify
from appliance.pipeline.verify import tally
from appliance.errors import UsageError

from fakes import FakeBackend, FakeEngine, FakeFetcher, fail

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
    votes = votes or (lambda messages, seed: {"refuted": False, "reason": "the quote states it"})
    base = {
        "plan": _plan,
        "queries": lambda m, s: SearchQueries(queries=["jane roe birthplace"]),
        "extract": _extract,
        "findings": lambda m, s: NodeFindings(findings="Jane Roe founded Alpha Corp.", gaps=[]),
        "vote": votes,
        "gaps": lambda m, s: GapQuestions(questions=[]),
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
    return load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                         overrides={"pipeline.gap_questions": 1, "pipeline.quote_sentences": False})


def run_fake(settings, tmp_path, engine, hits=HITS, pages=PAGES):
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    return research("Where was the founder of Alpha Corp born?", settings, models=models,
                    backend=FakeBackend(hits), fetcher=FakeFetcher(pages),
                    embedder=get_embedder(settings), out_dir=tmp_path / "reports")


# ------------------------------------------------------------------ voting arithmetic

def _votes(*outcomes):
    votes = []
    for i, o in enumerate(outcomes):
        if o == "abstain":
            votes.append(VoteRecord(claim_id="m1", seed=i, valid=False, reason="failed"))
        else:
            votes.append(VoteRecord(claim_id="m1", seed=i, valid=True, refuted=(o == "refute"), reason="r"))
    return votes


@pytest.mark.parametrize("outcomes,survives", [
    (("abstain", "abstain", "abstain"), False),
    (("keep", "abstain", "abstain"), False),
    (("keep", "keep", "refute"), True),
    (("keep", "keep", "keep"), True),
    (("keep", "refute", "refute"), False),
    (("refute", "refute", "refute"), False),
    (("keep", "keep", "abstain"), True),
    (("keep", "refute", "abstain"), True),
])
def test_tally(outcomes, survives):
    assert tally("m1", _votes(*outcomes), min_valid=2, kill_at=2).confirmed is survives


def test_all_abstain_never_survives_in_a_run(flow_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: fail("vote")))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.status == "inconclusive"
    assert result.report["stats"]["confirmed"] == 0
    assert result.report["stats"]["votes_invalid"] == result.report["stats"]["verified"] * 3
    assert "## Answer" in result.markdown_path.read_text()


def test_empty_reason_is_an_abstention(flow_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"refuted": False, "reason": "  "}))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.report["stats"]["confirmed"] == 0


def test_a_vote_that_copies_the_example_is_an_abstention(flow_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"refuted": False, "reason": "The quote names Frank Herbert as the author."}))
    result = run_fake(flow_settings, tmp_path, engine)
    assert result.report["stats"]["confirmed"] == 0
    assert result.report["stats"]["votes_valid"] == 0


def test_votes_use_distinct_seeds_back_to_back(flow_settings, tmp_path):
    engine = FakeEngine(script())
    run_fake(flow_settings, tmp_path, engine)
    votes = [i for i, (p, _) in enumerate(engine.calls) if p == "vote"]
    assert votes and len(votes) % 3 == 0
    for k in range(0, len(votes), 3):
        trio = votes[k:k + 3]
        assert trio == list(range(trio[0], trio[0] + 3)), "votes on one claim must run back to back"
        assert len({engine.calls[i][1] for i in trio}) == 3


def test_two_one_survives_one_two_dies(flow_settings, tmp_path):
    def split(m, s):
        split.n += 1
        claim = m[-1]["content"]
        refute = (split.n % 3 == 0) if "Lisbon" in claim else (split.n % 3 != 1)
        return {"refuted": refute, "reason": "checked"}
    split.n = 0
    engine = FakeEngine(script(votes=split))
    result = run_fake(flow_settings, tmp_path, engine)
    verdicts = {c["text"]: c["verdict"] for c in result.report["claims"] if c["verdict"]}
    lisbon = next(v for t, v in verdicts.items() if "Lisbon" in t)
    founded = next(v for t, v in verdicts.items() if "founded" in t)
    assert lisbon["confirmed"] and lisbon["refutations"] == 1
    assert not founded["confirmed"] and founded["refutations"] == 2


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


def test_every_claim_refuted_is_inconclusive_and_lists_them(flow_settings, tmp_path):
    engine = FakeEngine(script(votes=lambda m, s: {"refuted": True, "reason": "quote does not say so"}))
    result = run_fake(flow_settings, tmp_path, engine)
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
    assert "Dustin" not in md and "2018-04-23" not in md and "_No answer was written._" in md


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
    engine = FakeEngine(script(gaps=boom, findings=lambda m, s: NodeFindings(findings="x", gaps=["what else?"])))
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
    from appliance.pipeline import run as run_module
    from appliance.pipeline.run import ResearchResult

    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(run_module, "open_run_parts", lambda settings: (None, None, FakeFetcher({}), None))
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
    settings = flow_settings.with_overrides({"pipeline.quote_sentences": True})
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
    settings = flow_settings.with_overrides({"pipeline.quote_sentences": True})
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
        findings=lambda m, s: NodeFindings(findings="f", gaps=["When did she die?"]),
        gaps=lambda m, s: GapQuestions(questions=["When did Jane Roe die?", "Who succeeded Jane Roe?"])))
    result = run_fake(settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    assert purposes.count("gaps") == 1
    gap_nodes = [n for n in result.report["plan"]["nodes"] if n["from_gap_round"]]
    assert [n["id"] for n in gap_nodes] == ["g1", "g2"]
    assert result.report["stats"]["gap_nodes"] == 2


def test_barrier_waits_for_every_node(flow_settings, tmp_path):
    engine = FakeEngine(script())
    run_fake(flow_settings, tmp_path, engine)
    purposes = [p for p, _ in engine.calls]
    first_vote = purposes.index("vote")
    main_round = purposes[:purposes.index("gaps")] if "gaps" in purposes else purposes
    assert all(p not in ("extract", "findings", "queries") for p in main_round[first_vote:])


def test_child_prompts_carry_parent_findings(flow_settings, tmp_path):
    seen = []

    def queries(m, s):
        seen.append(m[-1]["content"])
        return SearchQueries(queries=["jane roe birthplace"])
    engine = FakeEngine(script(queries=queries))
    run_fake(flow_settings, tmp_path, engine)
    assert seen and "Jane Roe founded Alpha Corp." in seen[0]


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
