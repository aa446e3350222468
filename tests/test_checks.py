"""The checks registry: complete, wired, each check firing and not firing, switchable by settings.

Examples are invented (Ruritania, Port Ardmore, Ida Brandt): a check states a general rule."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import load_settings
from appliance.contracts import (Extraction, GapQuestions, IterativeStep, Hit, NodeState, Plan, PlanNode, ReportDraft,
                                 SearchQueries, ShortAnswer)
from appliance.embed import get_embedder
from appliance.errors import ConfigError
from appliance.pipeline import checks as registry
from appliance.pipeline.anchor import find_quote
from appliance.pipeline.checks import ALL_ON, BY_ID, CHECKS, RETIRED, Firings, Switches
from appliance.pipeline.forms import checked_answer, echoes_example
from appliance.pipeline.names import names_unsupported
from appliance.pipeline.parts import Models
from appliance.pipeline.plan import check_plan, plan_faults, repair_checks, topo_order
from appliance.pipeline.run import research
from appliance.pipeline.text import grounded
from appliance.pipeline.verify import is_verbatim

from fakes import FakeBackend, FakeEngine, FakeFetcher, quoting_extract

PIPELINE = Path(importlib.import_module("appliance.pipeline").__file__).parent


# ------------------------------------------------------------------ the registry itself

def test_every_check_has_an_id_a_phase_a_sentence_and_a_deciding_function():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for check in CHECKS:
        assert check.id.replace("-", "").isalpha() and check.id == check.id.lower(), check.id
        assert check.phase in registry.PHASES, check.id
        assert check.does.endswith(".") and len(check.does.split()) >= 6, check.id
        module, function = check.decides.split(":")
        assert callable(getattr(importlib.import_module(f"appliance.pipeline.{module}"), function)), check.decides


def test_every_setting_a_check_names_exists():
    settings = load_settings(env={})
    for check in CHECKS:
        for name in check.settings:
            section, key = name.split(".", 1)
            if section in settings.data:
                assert key in settings.data[section], (check.id, name)
            else:
                assert hasattr(importlib.import_module(f"appliance.pipeline.{section}"), key), (check.id, name)


def _pipeline_sources() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in PIPELINE.glob("*.py") if p.stem != "checks"}


def test_every_check_is_wired_into_the_pipeline():
    """Each id is named where the pipeline acts on it (a check no code names does nothing)."""
    sources = "\n".join(_pipeline_sources().values())
    for check in CHECKS:
        assert f'"{check.id}"' in sources or f"[{check.id}]" in sources, check.id


def _check_ids_named(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found |= {cid for cid in BY_ID if sub.value == cid or f"[{cid}]" in sub.value}
    return found


def _names_a_check(check) -> bool:
    module, function = check.decides.split(":")
    tree = ast.parse((PIPELINE / f"{module}.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return bool(_check_ids_named(node))


# The deciding functions of the checks that are plain predicates (those that name their check
# themselves count their own firings): a pipeline function that calls one must name the check
# it acts for, or be listed here with the reason it drops nothing.
DECIDERS = {c.decides.split(":")[1] for c in CHECKS if not _names_a_check(c)}
DROPS_NOTHING = {
    # builds the text a cited claim must be about; the check is answer-cites-on-subject
    ("run", "_run_phases"),
    # picks which claims carry each step's answer for citing, with check answer-cites-side on or
    # off as answer_support says; nothing is dropped from the report
    ("synthesize", "_cited"),
    # the answer checks themselves, composed of their deciders (forms.checked_answer is one entry
    # per check id, each named there)
    ("forms", "short_answer_or_empty"),
}


def _calls(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            out.add(name)
    return out


def test_nothing_in_the_pipeline_decides_a_drop_outside_a_registered_check():
    """Every pipeline function that calls a check's deciding function names a registered check
    (or is one of those functions, or is listed above with why it drops nothing): a new rule
    built on them cannot slip in unnamed and uncounted."""
    unnamed = []
    for module, source in _pipeline_sources().items():
        for node in ast.parse(source).body:
            if not isinstance(node, ast.FunctionDef | ast.ClassDef):
                continue
            used = _calls(node) & DECIDERS - {node.name}
            if used and not _check_ids_named(node) and (module, node.name) not in DROPS_NOTHING \
                    and node.name not in DECIDERS:
                unnamed.append(f"{module}.{node.name} calls {sorted(used)}")
    assert not unnamed, unnamed


def test_the_readme_lists_every_check():
    readme = (PIPELINE.parent.parent / "README.md").read_text(encoding="utf-8")
    for check in CHECKS:
        assert f"| `{check.id}`" in readme, check.id


# ------------------------------------------------------------------ switching checks off

def test_disabled_checks_are_validated_against_the_registry():
    settings = load_settings(env={"APPLIANCE_CHECKS_DISABLED": "answer-form,page-gate"})
    assert settings.checks.disabled == ["answer-form", "page-gate"]
    assert not Switches.of(settings).on("page-gate") and Switches.of(settings).on("answer-rests")
    with pytest.raises(ConfigError, match="unknown check 'answer-shape'"):
        load_settings(env={"APPLIANCE_CHECKS_DISABLED": "answer-shape"})
    with pytest.raises(ConfigError, match="cannot be switched off"):
        load_settings(env={"APPLIANCE_CHECKS_DISABLED": "quote-anchor"})
    # A check that was removed is named as removed, with what to do, not as unknown.
    assert set(RETIRED) and not set(RETIRED) & set(BY_ID)
    with pytest.raises(ConfigError, match="check 'answer-part' no longer exists .*take it out of") as raised:
        load_settings(env={"APPLIANCE_CHECKS_DISABLED": "page-gate,answer-part"})
    # The message says what to do; no hint about allowed values follows it.
    assert str(raised.value).endswith("take it out of [checks] disabled")
    with pytest.raises(KeyError):
        ALL_ON.on("no-such-check")


def test_appliance_checks_lists_every_check_with_its_settings(tmp_path):
    config = tmp_path / "appliance.toml"
    config.write_text('[checks]\ndisabled = ["answer-restates"]\n', encoding="utf-8")
    runner = CliRunner()
    out = runner.invoke(main, ["--config", str(config), "checks", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    assert set(rows) == set(BY_ID)
    assert rows["answer-restates"]["on"] is False and rows["answer-form"]["on"] is True
    assert rows["page-gate"]["settings"] == {"pipeline.relevance_threshold": 0.4}
    assert rows["claim-ungrounded"]["settings"] == {"text.GROUNDED_SHARE": 0.5}
    text = runner.invoke(main, ["--config", str(config), "checks"])
    assert text.exit_code == 0 and "answer-restates" in text.stdout and "OFF" in text.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[checks]\ndisabled = ["answer-shape"]\n', encoding="utf-8")
    refused = runner.invoke(main, ["--config", str(bad), "checks"])
    assert refused.exit_code != 0 and "unknown check 'answer-shape'" in refused.output
    assert "Traceback" not in refused.output


# ------------------------------------------------------------------ each check, firing and not

QUESTION = "Which radio station did Ida Brandt found in Port Ardmore?"


def _nodes(*questions, depends=None):
    depends = depends or {}
    return [NodeState(id=f"q{i}", question=q, depends_on=depends.get(f"q{i}", []))
            for i, q in enumerate(questions, start=1)]


@pytest.mark.parametrize("check_id,fires,holds", [
    ("plan-invented-name",
     _nodes("What is the capital of Ruritania?", "Which station did Ida Brandt found in Port Ardmore?"),
     _nodes("Where is Port Ardmore?", "Which station did Ida Brandt found in Port Ardmore?")),
    ("plan-unanchored",
     _nodes("What is the name of the station?", "Where did Ida Brandt work in Port Ardmore?"),
     _nodes("What is the name of the station?", "Where did Ida Brandt work in Port Ardmore?",
            depends={"q1": ["q2"]})),
    ("plan-definition",
     _nodes("Who is Ida Brandt?", "Which station is in Port Ardmore?"),
     _nodes("Where did Ida Brandt live?", "Which station is in Port Ardmore?")),
    ("plan-whole-first",
     _nodes(QUESTION, "When did the station at Port Ardmore open?", depends={"q2": ["q1"]}),
     _nodes("Which stations did Ida Brandt found?", "Which of #1 is in Port Ardmore?", depends={"q2": ["q1"]})),
    ("plan-dropped-name",
     _nodes("Which radio station did Ida Brandt found?"),
     _nodes("Which radio station did Ida Brandt found?", "Which stations are in Port Ardmore?")),
])
def test_each_plan_check_fires_on_its_fault_only_and_can_be_switched_off(check_id, fires, holds):
    tag = f"[{check_id}]"
    assert any(line.startswith(tag) for line in plan_faults(fires, QUESTION)), plan_faults(fires, QUESTION)
    assert not any(line.startswith(tag) for line in plan_faults(holds, QUESTION)), plan_faults(holds, QUESTION)
    off = Switches({check_id})
    assert not any(line.startswith(tag) for line in plan_faults(fires, QUESTION, off))
    assert check_id in repair_checks([f"plan draw 1 set aside: {plan_faults(fires, QUESTION)[0]}"])


def test_plan_whole_last_asks_the_parts_before_the_whole():
    plan = Plan(effort=1, nodes=[
        PlanNode(id="q1", question=QUESTION, depends_on=[]),
        PlanNode(id="q2", question="Which stations are in Port Ardmore?", depends_on=["q1"]),
        PlanNode(id="q3", question="When did #1 open?", depends_on=["q1"])])
    checked = check_plan(plan, max_nodes=4, min_queries=1, max_queries=2, question=QUESTION)
    nodes = {n.id: n for n in checked.nodes}
    # q2 did not use the whole question's answer: it goes first; q3 does, so it still waits.
    assert nodes["q2"].depends_on == [] and nodes["q1"].depends_on == ["q2"] and nodes["q3"].depends_on == ["q1"]
    assert repair_checks(checked.repairs) == ["plan-whole-last"]
    assert [n.id for n in topo_order(checked.nodes)] == ["q2", "q1", "q3"]
    assert any(f.startswith("[plan-whole-first] q1") for f in plan_faults(checked.nodes, QUESTION))
    parts_only = Plan(effort=1, nodes=plan.nodes[:2])
    checked = check_plan(parts_only, max_nodes=4, min_queries=1, max_queries=2, question=QUESTION)
    assert not plan_faults(checked.nodes, QUESTION)
    off = check_plan(parts_only, max_nodes=4, min_queries=1, max_queries=2, question=QUESTION,
                     switches=Switches({"plan-whole-last"}))
    assert off.nodes[1].depends_on == ["q1"] and not off.repairs
    assert any(f.startswith("[plan-whole-first] q1") for f in plan_faults(off.nodes, QUESTION))


def test_plan_repairs_are_counted_by_check():
    assert repair_checks(["dropped self-dependency of q2", "plan draw 1 gave no plan: cut off",
                          "plan draw 2 set aside: [plan-unanchored] q1 ...; [plan-dropped-name] no ...",
                          "no plan without faults: researching the question itself"]) == [
        "plan-structure", "plan-unanchored", "plan-dropped-name"]


@pytest.mark.parametrize("check_id,answer,evidence,question,kept", [
    ("answer-none", "Not stated", "Ida Brandt chairs the board.", "Who chairs the board?", ""),
    ("answer-restates", "The founder of the radio station", "The station was founded by Ida Brandt.",
     "Who was the founder of the radio station?", ""),
    ("answer-form", "Port Ardmore", "Port Ardmore opened its station in 1931.", "When did the station open?", ""),
    ("answer-form", "yes", "Ida Brandt founded it.", "Who founded the station?", ""),
    ("answer-rests", "Lindqvist", "The station was founded by Ida Brandt.", "Who founded the station?", ""),
    ("example-echo", "Frank Herbert", "The station was founded by Ida Brandt.", "Who founded the station?", ""),
    # The answer instruction said back, here with no evidence (an answer from memory).
    ("example-echo", "The name, place, date or number asked for", None, "Who founded the station?", ""),
])
def test_each_answer_check_fires_and_switches_off(check_id, answer, evidence, question, kept):
    out, fired = checked_answer(answer, evidence, question)
    assert out == kept and check_id in fired
    off_out, off_fired = checked_answer(answer, evidence, question, Switches({check_id}))
    assert check_id not in off_fired  # a later check may still drop it
    # A plain answer of the asked form, resting on its evidence: no check fires.
    assert checked_answer("Ida Brandt", (evidence or "") + " Ida Brandt.", "Who founded the station?") == ("Ida Brandt", [])


def test_an_answer_in_the_instructions_words_is_kept_when_the_question_or_evidence_has_them():
    # Words of the instruction that the question asks about are an answer, not an echo.
    assert checked_answer("the shortest phrase", None, "What is the shortest phrase in the Velka charter?")[0]
    assert checked_answer("Date and place", "The festival is known as Date and Place.",
                          "What is the festival known as?")[0] == "Date and place"
    # Two words are too few to tell an echo from a name.
    assert checked_answer("Number Seven", "The ferry Number Seven sank.", "Which ferry sank?")[0] == "Number Seven"


@pytest.mark.parametrize("fires,holds", [
    (lambda: not grounded("Ida Brandt founded a Ruritanian ferry line in 1931.", "The station opened in 1931."),
     lambda: not grounded("The station opened in 1931.", "The Port Ardmore station opened in 1931.")),
    (lambda: names_unsupported("Ida Brandt was born in Ardmore.", "Lindqvist was born in Ardmore."),
     lambda: names_unsupported("Lindqvist was born in Ardmore.", "Lindqvist was born in Ardmore.")),
    (lambda: find_quote("The ferry sailed to Ruritania every Monday", "The station opened in 1931.") is None,
     lambda: find_quote("The station opened in 1931", "Records say: the station opened in 1931.") is None),
    (lambda: is_verbatim(_merged("The station opened in 1931.", "The station opened in 1931")),
     lambda: is_verbatim(_merged("It opened in 1931.", "The station opened in 1931"))),
    (lambda: echoes_example("Frank Herbert wrote it.", "Who wrote the guide?"),
     lambda: echoes_example("Frank Herbert wrote it.", "Did Frank Herbert write the guide?")),
], ids=["claim-ungrounded", "claim-names-unsupported", "quote-anchor", "verbatim-confirmed", "example-echo"])
def test_each_claim_check_decides_on_invented_examples(fires, holds):
    assert fires() is True
    assert holds() is False


def _merged(text: str, quote: str):
    from appliance.contracts import Importance, MergedClaim, QuoteRef, SourceQuality

    return MergedClaim(id="m1", text=text, quotes=[QuoteRef(source_url="u", quote=quote)], node_ids=["q1"],
                       members=["q1-s1-c1"], importance=Importance.central, source_quality=SourceQuality.primary)


def test_firings_count_record_and_skip_checks_switched_off():
    seen: list[dict] = []
    firings = Firings(Switches({"page-gate"}), seen.append)
    assert firings.applies("answer-form", lambda: True, on="answer") is True
    assert firings.applies("answer-form", lambda: False, on="answer") is False
    asked: list[str] = []
    assert firings.applies("page-gate", lambda: asked.append("x") or True, on="source u") is False
    assert asked == []  # a check switched off is not even decided
    assert firings.counts == {"answer-form": 1} and seen == [{"check": "answer-form", "on": "answer"}]
    with pytest.raises(KeyError):
        firings.fired("no-such-check", on="x")


# ------------------------------------------------------------------ checks in a run (scripted model)

PAGES = {
    "http://a.test/station": "Radio Ardmore was founded in 1931 by Ida Brandt in Port Ardmore. "
                             "It broadcasts from the harbour.",
    "http://b.test/brandt": "Ida Brandt was born in 1890 in Velka and trained as an engineer.",
    "http://c.test/ferries": "Ferries to the northern islands leave twice a day in summer.",
}
HITS = [Hit(url=u, title=u.rsplit("/", 1)[1].title(), rank=i + 1) for i, u in enumerate(PAGES)]
RUN_QUESTION = "Where was the founder of Radio Ardmore born?"


def _script():
    def extract(messages, seed):
        text = messages[-1]["content"]  # the page last: earlier findings come before it
        if "Ida Brandt was born" in text:
            return Extraction(source_quality="secondary", claims=[
                {"claim": "Ida Brandt was born in Velka in 1890.",
                 "quote": "Ida Brandt was born in 1890 in Velka", "importance": "central"}])
        if "Radio Ardmore was founded" in text:
            return Extraction(source_quality="primary", claims=[
                {"claim": "Radio Ardmore was founded in 1931 by Ida Brandt in Port Ardmore.",
                 "quote": "Radio Ardmore was founded in 1931 by Ida Brandt in Port Ardmore", "importance": "central"},
                # words not in its quote: becomes its quote (claim-ungrounded)
                {"claim": "The station also runs evening concerts.",
                 "quote": "It broadcasts from the harbour", "importance": "supporting"},
                # a quote the page does not hold (quote-anchor)
                {"claim": "Radio Ardmore broadcasts in six languages.",
                 "quote": "Radio Ardmore broadcasts in six languages", "importance": "supporting"}])
        return Extraction(source_quality="blog", claims=[])

    def vote(messages, seed):
        if "Velka in 1890" in messages[-1]["content"]:
            return {"reason": "", "verdict": "supported"}  # no reason: an abstention (vote-no-reason)
        return {"reason": "the quote states it", "verdict": "supported"}

    return {
        "plan": lambda m, s: Plan(effort=1, nodes=[
            PlanNode(id="q1", question="Who founded Radio Ardmore?", depends_on=["q1"]),  # plan-structure
            PlanNode(id="q2", question="Where was #1 born?", depends_on=["q1"])]),
        "queries": lambda m, s: SearchQueries(queries=["radio ardmore founder"]),
        "extract": extract,
        "node-answer": lambda m, s: ShortAnswer(answer="Ida Brandt"),
        "answer": lambda m, s: ShortAnswer(answer="Velka"),
        "vote": vote,
        "gaps": lambda m, s: GapQuestions(questions=["Who wrote Dune, Frank Herbert?"]),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(
            answer="Velka.", executive_summary="Ida Brandt founded Radio Ardmore in 1931.",
            findings=[{"theme": "Founder", "statements": [
                {"text": "Ida Brandt founded Radio Ardmore in 1931.", "claim_ids": ["c1", "c77"]},
                {"text": "Submarines patrol distant oceans constantly.", "claim_ids": ["c1"]},
                {"text": "An uncited statement about Radio Ardmore.", "claim_ids": ["c42"]}]}],
            # copies a prompt's worked example (example-echo)
            open_questions=["Did Frank Herbert ever visit Port Ardmore?", "Who owns Radio Ardmore today?"]),
    }


def _run(tmp_path, disabled=()):
    env = {"APPLIANCE_HOME": str(tmp_path / "home")}
    # The writer's call on: its checks (cite-unknown, written-grounded, ...) fire on its draft.
    settings = load_settings(profile="quick", env=env, overrides={
        "pipeline.quote_sentences": False, "pipeline.question_sources": 0, "pipeline.gap_questions": 1,
        "pipeline.write_report": True, "checks.disabled": list(disabled)})
    engine = FakeEngine(_script())
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    return research(RUN_QUESTION, settings, models=models, backend=FakeBackend(HITS),
                    fetcher=FakeFetcher(PAGES), embedder=get_embedder(settings), out_dir=tmp_path / "reports")


@pytest.fixture(scope="module")
def all_on(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("all-on"))


RUN_CHECKS = ["quote-anchor", "claim-ungrounded", "verbatim-confirmed", "vote-no-reason", "cite-unknown",
              "statement-uncited", "written-grounded", "example-echo", "page-gate", "plan-structure"]


def test_a_run_counts_each_check_by_id_and_says_what_it_fired_on(all_on):
    counts = all_on.report["stats"]["checks"]
    for check_id in RUN_CHECKS:
        assert counts.get(check_id, 0) >= 1, (check_id, counts)
    logged = [json.loads(line) for line in (all_on.run_dir / "checks.jsonl").read_text().splitlines()]
    assert sorted(map(json.dumps, logged)) == sorted(map(json.dumps, all_on.report["checks"]["fired"]))
    assert {e["check"] for e in logged} == set(counts)
    assert sum(counts.values()) == len(logged)
    assert all_on.report["checks"]["disabled"] == []
    claims = [json.loads(line) for line in (all_on.run_dir / "claims.jsonl").read_text().splitlines()]
    assert any("claim-ungrounded" in c["checks"] for c in claims)
    assert any("quote-anchor" in c["checks"] and not c["accepted"] for c in claims)
    uncounted = [c for c in claims if not c["checks"]]
    assert uncounted  # a claim no check touched lists none


@pytest.mark.parametrize("check_id", ["claim-ungrounded", "verbatim-confirmed", "vote-no-reason",
                                      "written-grounded", "example-echo", "page-gate"])
def test_a_check_switched_off_does_not_fire_and_its_effect_is_gone(tmp_path, all_on, check_id):
    off = _run(tmp_path, disabled=[check_id])
    assert check_id not in off.report["stats"]["checks"]
    assert off.report["checks"]["disabled"] == [check_id]
    if check_id == "claim-ungrounded":
        texts = {c["text"] for c in off.report["claims"]}
        assert "The station also runs evening concerts." in texts
    if check_id == "written-grounded":
        statements = [s["text"] for f in off.report["findings"] for s in f["statements"]]
        assert "Submarines patrol distant oceans constantly." in statements
    if check_id == "page-gate":
        assert off.report["stats"]["sources_off_topic"] == 0 < all_on.report["stats"]["sources_off_topic"]


def test_ablating_an_unknown_or_unswitchable_check_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    demo = PIPELINE.parent.parent / "data" / "demo"
    for check_id, words in (("quote-anchor", "cannot be switched off"), ("answer-shape", "unknown check")):
        result = CliRunner().invoke(main, ["ablate", str(demo), "--check", check_id, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2 and words in result.output, result.output
        assert "indexing" not in result.output and not (tmp_path / "home" / "lancedb").exists()


# ------------------------------------------------------------------ question-subject (scripted run)

# A question that names nothing of its own, and a plan gone astray: its one sub-question finds
# some town of another coast ("Kessel"), so the research's names are that town's alone. The
# question's own node reads the page that answers it, which names other things.
NAMELESS = "Which river runs past the town with the oldest lighthouse on the coast?"
NAMED = "Which river runs past the town with the oldest lighthouse in Ruritania?"
LIGHTHOUSE_PAGES = {
    "http://a.test/kessel": "Kessel is a market town with a busy harbour and a fish auction.",
    "http://b.test/ardmore": "The oldest lighthouse on the coast stands in Ardmore. "
                             "The Velka River runs past Ardmore into the sea.",
}


def _lighthouse_run(tmp_path, question: str, disabled=()):
    extract = quoting_extract(["The Velka River runs past Ardmore into the sea",
                               "Kessel is a market town with a busy harbour and a fish auction"])
    script = {
        "plan": lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Which town is it?"),
                                                   PlanNode(id="q2", question="Which river runs past #1?",
                                                            depends_on=["q1"])]),
        "extract": extract,
        "node-answer": lambda m, s: ShortAnswer(answer="Kessel"),
        "answer": lambda m, s: ShortAnswer(answer="Velka River"),
        "vote": lambda m, s: {"reason": "the quote states it", "verdict": "supported"},
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(answer="", executive_summary="", findings=[], open_questions=[]),
    }
    hits = {query: [Hit(url=url, title=url.rsplit("/", 1)[1].title(), rank=1)]
            for query, url in [("Which town is it?", "http://a.test/kessel"), (question, "http://b.test/ardmore")]}
    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")}, overrides={
        "pipeline.quote_sentences": False, "pipeline.plan_draws": 1, "pipeline.gap_questions": 0,
        "pipeline.relevance_threshold": 0, "checks.disabled": list(disabled)})
    engine = FakeEngine(script)
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    return research(question, settings, models=models, backend=FakeBackend(hits),
                    fetcher=FakeFetcher(LIGHTHOUSE_PAGES), embedder=get_embedder(settings), out_dir=tmp_path / "reports")


def _verified_texts(result) -> set[str]:
    return {c["text"] for c in result.report["claims"] if (c.get("verdict") or {}).get("confirmed")}


def test_question_subject_keeps_what_the_question_node_read_when_the_question_names_nothing(tmp_path):
    river = "The Velka River runs past Ardmore into the sea."
    kept = _lighthouse_run(tmp_path / "on", NAMELESS)
    assert kept.report["stats"]["checks"].get("question-subject", 0) >= 1
    assert river in _verified_texts(kept)
    assert kept.report["short_answer"] == "Velka River"
    cited = {c["text"] for c in kept.report["claims"] if c["id"] in kept.report["answer_claims"]}
    assert river in cited
    # Off, the plan's one name (Kessel) decides the subject: the answering claim is off subject.
    off = _lighthouse_run(tmp_path / "off", NAMELESS, disabled=["question-subject"])
    assert "question-subject" not in off.report["stats"]["checks"]
    assert river not in _verified_texts(off)
    assert off.report["stats"]["checks"].get("verify-off-subject", 0) >= 1


def test_question_subject_does_not_fire_when_the_question_names_something(tmp_path):
    from appliance.pipeline.names import names_nothing

    assert names_nothing(NAMELESS) and not names_nothing(NAMED)
    result = _lighthouse_run(tmp_path, NAMED)
    assert "question-subject" not in result.report["stats"]["checks"]
    assert "The Velka River runs past Ardmore into the sea." not in _verified_texts(result)


def test_sentences_picked_as_claims_are_verified_verbatim_with_no_vote(tmp_path):
    """``pipeline.restate_claims`` false: the extractor's grammar asks for sentences only (no
    claim field), each picked sentence is the claim word for word, confirmed as verbatim with
    no vote call, and the answer cites it; true, the claim is the extractor's own wording and
    the votes check it."""
    from appliance.contracts import quoting_extraction
    from appliance.pipeline.anchor import quotable_sentences

    page = LIGHTHOUSE_PAGES["http://b.test/ardmore"]
    sentences = quotable_sentences(page)
    assert set(quoting_extraction(2, sentences, restate=False).model_json_schema()["$defs"]["QuotedSentence"]
               ["properties"]) == {"quote", "importance"}

    def run(home, restate: bool):
        def extract(messages, seed):
            if "Velka River runs past" not in messages[-1]["content"]:
                return {"source_quality": "blog", "publish_date": None, "claims": []}
            quote = next(s for s in sentences if "Velka River" in s)
            item = {"quote": quote, "importance": "central"}
            if restate:
                item["claim"] = "The Velka River flows past Ardmore."
            return {"source_quality": "secondary", "publish_date": None, "claims": [item]}

        script = {
            "plan": lambda m, s: Plan(effort=1, nodes=[PlanNode(id="q1", question="Which river runs past Ardmore?")]),
            "extract": extract,
            "node-answer": lambda m, s: ShortAnswer(answer="Velka River"),
            "answer": lambda m, s: ShortAnswer(answer="Velka River"),
            "vote": lambda m, s: {"reason": "the quote states it", "verdict": "supported"},
            "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        }
        settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(home / "home")}, overrides={
            "pipeline.restate_claims": restate, "pipeline.min_nodes": 1, "pipeline.plan_draws": 1,
            "pipeline.gap_questions": 0,
            "pipeline.question_sources": 0, "pipeline.relevance_threshold": 0})
        engine = FakeEngine(script)
        hits = {"Which river runs past Ardmore?": [Hit(url="http://b.test/ardmore", title="Ardmore", rank=1)]}
        models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
        result = research("Which river runs past the town of Ardmore?", settings, models=models,
                          backend=FakeBackend(hits), fetcher=FakeFetcher(LIGHTHOUSE_PAGES),
                          embedder=get_embedder(settings), out_dir=home / "reports")
        return result, engine

    picked, engine = run(tmp_path / "picked", restate=False)
    extract_schema = next(schema for purpose, schema in engine.schemas if purpose == "extract")
    assert "claim" not in extract_schema.model_json_schema()["$defs"]["QuotedSentence"]["properties"]
    river = "The Velka River runs past Ardmore into the sea."
    assert _verified_texts(picked) == {river}
    assert not [p for p, _ in engine.calls if p == "vote"]
    assert picked.report["short_answer"] == "Velka River"
    assert [c["text"] for c in picked.report["claims"] if c["id"] in picked.report["answer_claims"]] == [river]

    worded, engine = run(tmp_path / "worded", restate=True)
    assert _verified_texts(worded) == {"The Velka River flows past Ardmore."}
    assert [p for p, _ in engine.calls if p == "vote"]


# ------------------------------------------------------------------ chain-contradicted

def test_a_sub_question_answering_the_last_step_otherwise_than_the_run_is_left_out():
    """A gap node asked the last step again and answered it from a verified sentence about
    something else; the run's answer differs: that node answer leaves the summary and the
    answer's citations. A step the run built on, a different kind of question, a yes or no,
    a compared thing's node and an agreeing answer are all kept."""
    from appliance.contracts import Importance, MergedClaim, NodeState, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import answer_support, contradicted, outline

    question = "Who founded the press that printed Harbour Notes?"
    first = NodeState(id="q1", question="Which press printed Harbour Notes?", answer="Ardmore Press")
    last = NodeState(id="q2", question="Who founded #1?", resolved="Who founded Ardmore Press?",
                     depends_on=["q1"], answer="Marta Olsen")
    again = NodeState(id="g1", question="Who founded the Ardmore Press?", answer="Ida Brandt", from_gap_round=True)
    nodes = [first, last, again]
    assert contradicted(again, nodes, question, "Marta Olsen")
    assert not contradicted(again, nodes, question, "Ida Brandt")  # agrees
    assert not contradicted(again, nodes, question, "")  # no run answer
    assert not contradicted(last, nodes, question, "Marta Olsen.")  # the same answer, other form
    assert not contradicted(first, nodes, question, "Marta Olsen")  # the run built on it
    when = NodeState(id="g2", question="When was the Ardmore Press founded?", answer="1901")
    assert not contradicted(when, nodes + [when], question, "Marta Olsen")  # asks another kind
    side = NodeState(id="q9", question="Harbour Notes", compares="Harbour Notes", answer="x")
    assert not contradicted(side, nodes + [side], question, "Marta Olsen")
    assert not contradicted(again, nodes, "Is Marta Olsen the founder of the Ardmore Press?", "no")

    def claim(i, text, node):
        return MergedClaim(id=f"m{i}", text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                           quotes=[QuoteRef(source_url=f"http://{i}.test", quote=text)], members=[f"m{i}"],
                           node_ids=[node])

    confirmed = [claim(1, "Harbour Notes was printed by the Ardmore Press.", "q1"),
                 claim(2, "Marta Olsen founded the Ardmore Press in 1901.", "q2"),
                 claim(3, "Ida Brandt first used the word harbourage in print.", "g1")]
    assert "m3" in answer_support(confirmed, nodes, "Marta Olsen")
    again.answer_superseded = contradicted(again, nodes, question, "Marta Olsen")
    assert "m3" not in answer_support(confirmed, nodes, "Marta Olsen")
    summary = outline(confirmed, nodes).executive_summary
    assert "Marta Olsen" in summary and "Ida Brandt" not in summary


# ------------------------------------------------------------------ answer-cites-side

def test_a_yes_no_sub_question_about_one_compared_thing_cites_only_claims_naming_it():
    """"Is Ida Brandt a painter?" found a verified sentence about Karl Brandt beside one about
    Ida Brandt: the answer cites Ida's, not Karl's, for that side; with the check off, or for a
    sub-question about no compared thing alone, the sub-question's claims are cited by rank.
    The run's Firings count the claim the check kept out."""
    from appliance.contracts import Importance, MergedClaim, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import answer_support, side_claims

    def claim(cid, text, node):
        return MergedClaim(id=cid, text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                           quotes=[QuoteRef(source_url=f"http://{cid}.test", quote=text)], members=[cid],
                           node_ids=[node])

    items = ["Ida Brandt", "Jon Lind"]
    ida = NodeState(id="q1", question="Is Ida Brandt a painter?", answer="Yes")
    jon = NodeState(id="q2", question="Is Jon Lind a painter?", answer="No")
    both = NodeState(id="q3", question="Are both of them painters?", answer="No")
    confirmed = [claim("m1", "Ida Marta Brandt was a Ruritanian painter.", "q1"),
                 claim("m2", "Karl Brandt is a Ruritanian sculptor and painter.", "q1"),
                 claim("m3", "Jon Lind was a Ruritanian sailor.", "q2"),
                 claim("m4", "Painters of Ruritania formed a guild in 1901.", "q3"),
                 claim("m5", "The guild admitted sculptors in 1920.", "q3")]
    assert side_claims(confirmed[:2], ida, items) == confirmed[:1]            # fires on m2
    assert side_claims(confirmed[:1], ida, items) == confirmed[:1]            # nothing to keep out
    assert side_claims(confirmed[3:], both, items) == confirmed[3:]           # about no thing alone
    assert side_claims(confirmed[:2], ida, []) == confirmed[:2]               # no comparison
    assert side_claims(confirmed[:2], ida, ["the painters", "Jon Lind"]) == confirmed[:2]  # a side with no name

    firings = Firings()
    cited = answer_support(confirmed, [ida, jon, both], "No", checks=firings, items=items)
    assert "m2" not in cited and {"m1", "m3", "m4", "m5"} <= set(cited)
    assert firings.counts == {"answer-cites-side": 1}
    assert firings.log == [{"check": "answer-cites-side", "on": "claim m2"}]
    off = Firings(Switches({"answer-cites-side"}))
    assert "m2" in answer_support(confirmed, [ida, jon, both], "No", checks=off, items=items)
    assert off.counts == {}


def test_the_report_without_the_writer_lists_under_a_side_only_claims_naming_it():
    """Under the heading "Is Ida Brandt a painter? Yes" a sentence about Karl Brandt would read
    as support for that yes: it goes under the next sub-question that found it, or among the
    other verified claims; with the check off, or no comparison, it stays where it was found."""
    from appliance.contracts import Importance, MergedClaim, QuoteRef, SourceQuality
    from appliance.pipeline.synthesize import OTHER_CLAIMS, outline

    def claim(cid, text, *nodes):
        return MergedClaim(id=cid, text=text, importance=Importance.central, source_quality=SourceQuality.primary,
                           quotes=[QuoteRef(source_url=f"http://{cid}.test", quote=text)], members=[cid],
                           node_ids=list(nodes))

    items = ["Ida Brandt", "Jon Lind"]
    nodes = [NodeState(id="q1", question="Is Ida Brandt a painter?", answer="Yes"),
             NodeState(id="q2", question="Is Jon Lind a painter?", answer="No"),
             NodeState(id="q3", question="Who taught painting in Ardmore?", answer="Karl Brandt")]
    confirmed = [claim("m1", "Ida Marta Brandt was a Ruritanian painter.", "q1"),
                 claim("m2", "Karl Brandt is a Ruritanian sculptor and painter.", "q1"),
                 claim("m3", "Jon Lind was a Ruritanian sailor.", "q2"),
                 claim("m4", "Karl Brandt taught painting in Ardmore.", "q1", "q3")]

    def listed(syn):
        return {theme: [s.claim_ids[0] for s in statements] for theme, statements in syn.findings}

    firings = Firings()
    assert listed(outline(confirmed, nodes, ["m1", "m3"], items, firings)) == {
        "Is Ida Brandt a painter? Yes": ["m1"], "Is Jon Lind a painter? No": ["m3"],
        "Who taught painting in Ardmore? Karl Brandt": ["m4"], OTHER_CLAIMS: ["m2"]}
    assert firings.log == [{"check": "answer-cites-side", "on": "claim m2 under q1"},
                           {"check": "answer-cites-side", "on": "claim m4 under q1"}]
    as_found = {"Is Ida Brandt a painter? Yes": ["m1", "m2", "m4"], "Is Jon Lind a painter? No": ["m3"]}
    off = Firings(Switches({"answer-cites-side"}))
    assert listed(outline(confirmed, nodes, ["m1", "m3"], items, off)) == as_found and off.counts == {}
    assert listed(outline(confirmed, nodes, ["m1", "m3"])) == as_found


# ------------------------------------------------------------------ search-named-first

def _hit(url: str, title: str, snippet: str) -> Hit:
    return Hit(url=url, title=title, snippet=snippet)


COUNTY_HITS = [
    _hit("http://a.test/counties", "Counties", "A county is a division of a state or country, often with its own seat."),
    _hit("http://b.test/ruritania", "Geography of Ruritania", "Ruritania is a small kingdom with nine counties."),
    _hit("http://c.test/ardmore", "Ardmore", "Ardmore is a harbour town of Velka County, Ruritania."),
]


def test_search_named_first_reads_the_hits_naming_more_of_the_query_first():
    from types import SimpleNamespace

    from appliance.pipeline.gather import named_first

    def run_of(firings):
        return SimpleNamespace(checks=firings, ctx=SimpleNamespace(question="Which river runs past Ardmore?"))

    firings = Firings()
    ordered = named_first(run_of(firings), "Which county of Ruritania is Ardmore in?", list(COUNTY_HITS), node="q1")
    # Both names, then one, then none; the page on counties in general comes last.
    assert [h.url for h in ordered] == ["http://c.test/ardmore", "http://b.test/ruritania", "http://a.test/counties"]
    assert firings.counts == {"search-named-first": 1}
    assert firings.log[0]["node"] == "q1" and firings.log[0]["moved_up"] == ["http://c.test/ardmore"]
    # Equals keep the search's order; a query naming only kinds of things ("County"), or
    # nothing, or hits already in order, or the question as asked (its node reads what one
    # retrieval call would), leave the order as it is and fire nothing.
    for query, hits in (("Which county is the largest?", COUNTY_HITS),
                        ("Which  river runs past ARDMORE?", COUNTY_HITS),
                        ("Which County has the most lakes?", COUNTY_HITS),
                        ("Which county of Ruritania is Ardmore in?", [COUNTY_HITS[2], COUNTY_HITS[1], COUNTY_HITS[0]]),
                        ("Which towns does Velka County hold?", [COUNTY_HITS[2], COUNTY_HITS[0], COUNTY_HITS[1]])):
        quiet = Firings()
        assert named_first(run_of(quiet), query, list(hits)) == hits, query
        assert quiet.counts == {}, query
    off = Firings(Switches({"search-named-first"}))
    assert named_first(run_of(off), "Which county of Ruritania is Ardmore in?",
                       list(COUNTY_HITS)) == COUNTY_HITS
    assert off.counts == {}


def _county_run(tmp_path, disabled=()):
    question = "What is the seat of the county of Ruritania that Ardmore is in?"
    pages = {"http://a.test/counties": "A county is a division of a state or country, often with its own seat.",
             "http://b.test/ruritania": "Ruritania is a small kingdom with nine counties.",
             "http://c.test/ardmore": "Ardmore is a harbour town of Velka County, Ruritania."}
    script = {
        "plan": lambda m, s: Plan(effort=1, nodes=[
            PlanNode(id="q1", question="Which county of Ruritania is Ardmore in?"),
            PlanNode(id="q2", question="What is the seat of #1?", depends_on=["q1"])]),
        "extract": quoting_extract(["Ardmore is a harbour town of Velka County, Ruritania",
                                    "A county is a division of a state or country, often with its own seat"]),
        "node-answer": lambda m, s: ShortAnswer(answer="Velka County"),
        "answer": lambda m, s: ShortAnswer(answer="Velka County"),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
    }
    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")}, overrides={
        "pipeline.sources_per_node": 1, "pipeline.question_sources": 0, "pipeline.gap_questions": 0,
        "pipeline.plan_draws": 1, "pipeline.relevance_threshold": 0, "checks.disabled": list(disabled)})
    engine = FakeEngine(script)
    models = Models(planner=engine, extractor=engine, verifier=engine, writer=engine)
    return research(question, settings, models=models, backend=FakeBackend(COUNTY_HITS),
                    fetcher=FakeFetcher(pages), embedder=get_embedder(settings), out_dir=tmp_path / "reports")


def test_a_node_reading_one_page_reads_the_hit_that_names_its_subject(tmp_path):
    def read(result) -> dict[str, str]:
        rows = [json.loads(line) for line in (result.run_dir / "sources.jsonl").read_text().splitlines()]
        return {row["url"]: row["node"] for row in rows if not row.get("off_topic")}

    on = _county_run(tmp_path / "on")
    assert read(on)["http://c.test/ardmore"] == "q1"
    assert on.report["stats"]["checks"]["search-named-first"] >= 1
    # Off, each node reads the search's first page it may: neither names Ardmore.
    off = _county_run(tmp_path / "off", disabled=["search-named-first"])
    assert "search-named-first" not in off.report["stats"]["checks"]
    assert "http://c.test/ardmore" not in read(off) and read(off)["http://a.test/counties"] == "q1"
