"""End to end with the real SmolLM2 model, real LanceDB, real trafilatura: the CLI writes a
report whose every citation resolves, whose every quote is in its source, and whose stats add up.
Once on the local musique-dev corpus, once through a real SearXNG on loopback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from conftest import read_jsonl

pytestmark = pytest.mark.slow

QUESTION = "Who was the first president of the association which published Journal of Psychotherapy Integration?"
HEADINGS = ["# Deep Dive:", "## Answer", "## Executive Summary", "## Findings", "## Open Questions",
            "## Sources", "## Run statistics"]


def check_report(md_path: Path, home: Path, votes_per_claim: int = 3, settings_draws: int = 3) -> dict:
    """Everything a report promises, checked against the run folder's own records."""
    md = md_path.read_text(encoding="utf-8")
    report = json.loads(md_path.with_suffix(".json").read_text(encoding="utf-8"))
    positions = [md.find(h) for h in HEADINGS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions

    # Every [n] in the text resolves to an entry "[n] Title - <URL>" of the source list.
    body, sources_part = md.split("## Sources", 1)
    listed = {int(n) for n in re.findall(r"^\[(\d+)\] .+ - <.+>", sources_part, flags=re.M)}
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", body)}
    assert cited <= listed
    assert listed == {s["n"] for s in report["sources"]}

    # Every quote occurs verbatim in the text extracted from its source.
    run_dir = home / "runs" / report["run_id"]
    texts = {s["url"]: s["text"] for s in read_jsonl(run_dir / "sources.jsonl")}
    for source in report["sources"]:
        assert source["quotes"], source
        for quote in source["quotes"]:
            assert quote in texts[source["url"]], (quote, source["url"])
    for claim in report["claims"]:
        for ref in claim["quotes"]:
            assert ref["quote"] in texts[ref["source_url"]]

    # The stats add up against what the run folder recorded.
    stats = report["stats"]
    claim_log = read_jsonl(run_dir / "claims.jsonl")
    accepted = sum(1 for c in claim_log if c["accepted"])
    assert stats["claims_extracted"] == len(claim_log) == accepted + stats["quotes_rejected"]
    assert stats["claims_after_dedup"] + stats["claims_merged"] == accepted == len(
        [m for c in report["claims"] for m in c["members"]])
    assert stats["verified"] == stats["confirmed"] + stats["killed"]
    # Votes stop once a claim's outcome is decided: cast plus skipped is the full count.
    # A claim that is word for word its quote is confirmed with no vote; every other verified
    # claim has its full count, cast or skipped.
    verbatim = [c for c in report["claims"] if c["verdict"] and c["verdict"]["verbatim"]]
    assert len(verbatim) == stats["confirmed_verbatim"]
    assert all(c["verdict"]["confirmed"] and not c["verdict"]["votes"] for c in verbatim)
    assert stats["votes_valid"] + stats["votes_invalid"] + stats["votes_skipped"] == \
        (stats["verified"] - stats["confirmed_verbatim"]) * votes_per_claim
    votes = read_jsonl(run_dir / "votes.jsonl")
    assert len(votes) == stats["votes_valid"] + stats["votes_invalid"]
    assert all(v["verdict"] in ("supported", "refuted", "insufficient", None) for v in votes)
    # Every page a node took is one line: read, failed, or given back unread (no sentence near
    # the research).
    source_log = read_jsonl(run_dir / "sources.jsonl")
    assert stats["sources_fetched"] + stats["sources_failed"] + stats["sources_off_topic"] == len(source_log)
    assert stats["sources_off_topic"] == sum(1 for s in source_log if s.get("off_topic"))
    calls = read_jsonl(run_dir / "calls.jsonl")
    assert stats["model_calls"] + stats["cache_hits"] >= len(calls) > 0
    assert stats["cache_hits"] == sum(1 for c in calls if c["cache_hit"])
    assert stats["tokens_evaluated"] <= stats["tokens_submitted"]
    assert 0 < stats["llm_busy_share"] <= 1.0
    # Planning: one plan call per draw, every draw recorded, each draw but a kept last one set
    # aside with its faults named (the real model's plans go through the same checks).
    plan_record = json.loads((run_dir / "plan.json").read_text())
    draws = stats["plan_draws"]
    assert 1 <= draws <= settings_draws and len(plan_record["drawn"]) == draws
    assert sum(1 for c in calls if c["purpose"] == "plan") == draws
    set_aside = [r for r in report["plan"]["repairs"] if " set aside: " in r]
    fell_back = any("researching the question itself" in r for r in report["plan"]["repairs"])
    assert len(set_aside) == (draws if fell_back else draws - 1)
    # The question as asked is one node of every run, exactly once: added beside the plan's,
    # or a node of the plan itself (the fallback plan, or a planner that asked it as it is).
    asked = [n for n in report["plan"]["nodes"] if n["question"].lower() == report["question"].lower()]
    assert len(asked) == 1
    added = [n for n in report["plan"]["nodes"] if n["whole_question"]]
    assert added == [] if not asked[0]["whole_question"] else added == asked
    if asked[0]["whole_question"]:
        assert asked[0]["queries"] == [report["question"]]  # searched as asked, no queries call
    confirmed = {c["id"] for c in report["claims"] if c["verdict"] and c["verdict"]["confirmed"]}
    for finding in report["findings"]:
        for statement in finding["statements"]:
            assert statement["claim_ids"] and set(statement["claim_ids"]) <= confirmed
    # The quick profile has no writer: its summary is the verified sentences the answer cites.
    if report["profile"] == "quick" and report["answer_claims"]:
        claim_text = {c["id"]: " ".join(c["text"].split()) for c in report["claims"]}
        assert set(report["answer_claims"]) <= confirmed
        for cid in report["answer_claims"]:
            assert claim_text[cid] in report["executive_summary"], (cid, report["executive_summary"])
    return report


def test_research_on_the_local_corpus(musique_corpus, tmp_path, monkeypatch):
    settings, corpus = musique_corpus
    monkeypatch.setenv("APPLIANCE_HOME", str(settings.home))
    out = tmp_path / "reports"
    result = CliRunner().invoke(main, ["research", QUESTION, "--profile", "quick", "--corpus", corpus,
                                       "--backend", "corpus", "--out", str(out)])
    assert result.exit_code == 0, result.output
    md_path = Path(result.stdout.strip().splitlines()[-1])
    assert md_path.parent == out and md_path.name.endswith(".md")
    report = check_report(md_path, settings.home)
    assert report["stats"]["sources_fetched"] > 0 and report["stats"]["claims_extracted"] > 0
    assert all(s["url"].startswith(f"corpus://{corpus}/") for s in report["sources"])


def test_research_through_searxng(searxng, fixture_site, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("APPLIANCE_HOME", str(home))
    monkeypatch.setenv("APPLIANCE_FETCH_ALLOW_HOSTS", "127.0.0.1")
    out = tmp_path / "reports"
    result = CliRunner().invoke(main, ["research", "How do honeybees tell each other where flowers are?",
                                       "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out),
                                       "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    md_path = out / (Path(report["run_id"]).name + ".md")
    check_report(md_path, home)
    run_dir = home / "runs" / report["run_id"]
    fetched = [s for s in read_jsonl(run_dir / "sources.jsonl") if s["ok"]]
    assert fetched and all(s["url"].startswith(fixture_site.url) for s in fetched)
    assert any("waggle" in s["text"] for s in fetched), "pages found through SearXNG were fetched and extracted"


DEFAULT_MODEL_FILE = Path(__file__).resolve().parent.parent / "models" / "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"


@pytest.mark.skipif(not DEFAULT_MODEL_FILE.is_file(), reason="the default 1.5B model is not installed")
def test_the_default_model_answers_a_dev_question_in_the_asked_form(musique_corpus, tmp_path, monkeypatch):
    """The default model end to end on one two-hop dev question: a complete report whose
    direct answer opens the Answer section and rests on confirmed claims."""
    from conftest import DEFAULT_MODEL

    settings, corpus = musique_corpus
    monkeypatch.setenv("APPLIANCE_HOME", str(settings.home))
    out = tmp_path / "reports"
    question = "What country was the author of Brand a citizen of?"
    result = CliRunner().invoke(main, ["research", question, "--profile", "quick", "--corpus", corpus,
                                       "--backend", "corpus", "--model", DEFAULT_MODEL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    md_path = Path(result.stdout.strip().splitlines()[-1])
    report = check_report(md_path, settings.home)
    assert report["status"] == "complete" and report["model"] == DEFAULT_MODEL
    assert "norw" in report["short_answer"].lower(), report["short_answer"]
    # A question asking which country: its answer was held to the countries of its evidence.
    assert report["stats"]["checks"].get("answer-country", 0) >= 1, report["stats"]["checks"]
    answer = md_path.read_text(encoding="utf-8").split("## Answer", 1)[1].split("##", 1)[0].strip()
    assert answer.startswith(f"**{report['short_answer']}.**")


def test_research_with_a_missing_corpus_fails_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, ["research", QUESTION, "--backend", "corpus", "--corpus", "nothing-here"])
    assert result.exit_code != 0
    assert "corpus add" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("question", ["", "   ", "x" * 5000])
def test_research_rejects_unusable_questions(question, tmp_path, monkeypatch):
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, ["research", question])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1
