"""Faults, row P: properties (hypothesis) over any question, any search answer and any report
text. See tests/fault_helpers.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from appliance.contracts import (Importance, MergedClaim, NodeState, QuoteRef, Source, SourceQuality,
                                 Verdict, VoteRecord)
from appliance.errors import UsageError
from appliance.questions import clean_question, run_id_for, slugify
from appliance.contracts import CitedStatement, ReportData, RunStatus, Synthesis
from appliance.report import STAT_ROWS, render_json, render_markdown
from appliance.sources.fetch import Fetcher
from appliance.sources.searxng import SearxngBackend
from appliance.sources.urls import UrlLedger, normalize_url
from conftest import make_settings
from fault_helpers import (HEADINGS, MD, CONTROL_CHARS, assert_markdown_is_inert, check_report_structure,
                           hostile_text)


# ============================================================================ properties

@hsettings(max_examples=300, deadline=None)
@given(st.one_of(hostile_text, st.text(max_size=3000)))
def test_property_any_question_is_an_error_or_a_safe_file_name(question):
    """Any question: a UsageError, or a run id that names a file inside the output folder and
    a report whose title is one inert line."""
    try:
        cleaned = clean_question(question)
    except UsageError:
        return
    assert cleaned and len(cleaned) <= 2000 and not CONTROL_CHARS.search(cleaned)
    run_id = run_id_for(cleaned, "2026-01-01")
    assert re.fullmatch(r"2026-01-01-[a-z0-9-]+", run_id) and len(run_id) < 80 and ".." not in run_id
    out = Path("/reports")
    assert (out / f"{run_id}.md").resolve().parent == out
    # A rerun finds the same files: the name depends on the question alone. Cleaning is
    # idempotent (the question stored in a report gives its run id again), and the name's
    # suffix is the question's own sha256, not anything of this process (hash seeds, time).
    assert clean_question(cleaned) == cleaned and run_id_for(clean_question(cleaned), "2026-01-01") == run_id
    assert run_id.endswith("-" + hashlib.sha256(cleaned.encode("utf-8")).hexdigest()[:8])
    # Distinct questions never share a name, even when their words slug alike.
    assert slugify(cleaned + "?") != slugify(cleaned)
    if cleaned.swapcase() != cleaned:
        assert slugify(cleaned.swapcase()) != slugify(cleaned)
    md = render_markdown(ReportData(question=cleaned, status=RunStatus.plan_failed, date="2026-01-01",
                                    model="m", profile="quick", run_id=run_id))
    title = md.splitlines()[0]
    tokens = MD.parse(md)
    assert tokens[0].type == "heading_open" and tokens[0].tag == "h1"
    assert sum(1 for t in tokens if t.type == "heading_open" and t.tag == "h1") == 1
    assert title.startswith("# Deep Dive: ")
    assert_markdown_is_inert(md, set())


_URLISH = st.one_of(
    st.text(max_size=60),
    st.builds(lambda scheme, host, path: f"{scheme}{host}{path}",
              st.sampled_from(["http://", "https://", "ftp://", "javascript:", "file://", "corpus://", "//", ""]),
              st.sampled_from(["example.org", "10.0.0.1", "[::1]", "127.0.0.1:8080", "169.254.169.254",
                               "[fd00::1]", "localhost", "a..b", "", "xn--nxasmq6b.example", "user:pw@host"]),
              st.text(alphabet="/?#%&=.-_~:@[]<>\"' \\abc", max_size=20)))
_RESULT = st.fixed_dictionaries({"url": st.one_of(_URLISH, st.integers(), st.none()),
                                 "title": st.one_of(hostile_text, st.none(), st.integers()),
                                 "content": st.one_of(hostile_text, st.lists(st.integers(), max_size=2))})
_ANSWER = st.one_of(st.fixed_dictionaries({"results": st.lists(st.one_of(_RESULT, st.integers()), max_size=8)}),
                    st.fixed_dictionaries({"results": st.one_of(st.none(), st.text(max_size=5))}))


@pytest.fixture
def everything_private(monkeypatch):
    """Every name resolves to a private address: a fetch is refused before any connection."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *args, **kwargs: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.9.9.9", int(port or 80)))])


@pytest.fixture
def property_fetcher(tmp_path):
    """A fetcher with the default policy (nothing allow-listed), reused by every example."""
    settings = make_settings(tmp_path / "prop-home", **{"fetch.cache": False})
    with Fetcher(settings) as fetcher:
        yield fetcher


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_ANSWER)
def test_property_any_search_answer_goes_through_url_rules_fetch_and_report(
        everything_private, property_fetcher, answer):
    """Whatever a SearXNG answers: the client turns it into hits or a SearchError; the URL
    rules count every hit once; the fetcher returns a recorded outcome without a connection;
    the report renders those URLs without a way out of its link syntax."""
    from appliance.errors import SearchError

    body = json.dumps(answer).encode()
    client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "application/json"})))
    backend = SearxngBackend("http://127.0.0.1:9", client=client)
    try:
        hits = backend.search("q", 6)
    except SearchError:
        return
    ledger = UrlLedger(budget=3)
    admitted = ledger.admit(hits)
    assert len(ledger.admitted) + len(ledger.duplicates) + len(ledger.budget_drops) == len(hits)
    assert len({normalize_url(h.url) for h in admitted}) == len(admitted)

    connects = []
    real_connect = socket.socket.connect
    socket.socket.connect = lambda self, address: connects.append(address) or real_connect(self, address)
    try:
        sources = property_fetcher.fetch_many([h.url for h in admitted])
    finally:
        socket.socket.connect = real_connect
    assert connects == [] and all(not s.ok and s.error for s in sources)

    # Render the hits as if each had given a verified claim.
    claims = {f"m{i}": MergedClaim(id=f"m{i}", text=h.title or "claim", importance=Importance.central,
                                   source_quality=SourceQuality.blog,
                                   quotes=[QuoteRef(source_url=h.url, quote=h.snippet or "quote")],
                                   members=[f"c{i}"], node_ids=["q1"]) for i, h in enumerate(hits)}
    data = ReportData(question="q", status=RunStatus.synthesis_failed, date="2026-01-01", model="m", profile="quick",
                      run_id="r", claims=claims,
                      verdicts={cid: Verdict(claim_id=cid, confirmed=True, refutations=0, valid_votes=3, votes=[])
                                for cid in claims},
                      sources={h.url: Source(url=h.url, title=h.title) for h in hits})
    md = render_markdown(data)
    check_report_structure(md)
    assert_markdown_is_inert(md, {h.url for h in hits})
    json.dumps(render_json(data))


_REPORT_TEXTS = st.fixed_dictionaries({
    "question": hostile_text.filter(lambda t: t.strip()), "answer": hostile_text, "summary": hostile_text,
    "theme": hostile_text, "statement": hostile_text, "claim": hostile_text, "quote": hostile_text,
    "title": hostile_text, "open": hostile_text, "reason": hostile_text, "error": hostile_text,
    "model": hostile_text, "url": _URLISH, "status": st.sampled_from(["complete", "inconclusive", "error"]),
    "short": hostile_text,
})


def shown_text(tokens, heading: str) -> str:
    """The text a reader sees in the first paragraph under a level-2 heading."""
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h2" and tokens[i + 1].content == heading:
            inline = next(t for t in tokens[i + 3:] if t.type == "inline")
            return "".join(c.content if c.type == "text" else " " for c in inline.children)
    raise AssertionError(f"no section {heading}")


_EXAMPLE_TEXTS = {"question": "q", "answer": "1. &amp; \x1b[2J<b>", "summary": "", "theme": "", "statement": "",
                  "claim": "", "quote": "", "title": "", "open": "", "reason": "", "error": "", "model": "m",
                  "status": "complete", "short": "**yes** [x](y)"}


@hsettings(max_examples=300, deadline=None)
@given(_REPORT_TEXTS)
@example({**_EXAMPLE_TEXTS, "url": "localhost"})            # "<localhost>" would be raw HTML
@example({**_EXAMPLE_TEXTS, "url": "javascript:alert(1)"})  # not a link
def test_property_report_markdown_cannot_break_out(texts):
    """Page and model text in every field of a report: the layout's headings stay exactly
    the layout's, and no text becomes HTML, code, an image or a link."""
    claim = MergedClaim(id="m1", text=texts["claim"], importance=Importance.central,
                        source_quality=SourceQuality.primary,
                        quotes=[QuoteRef(source_url=texts["url"], quote=texts["quote"])],
                        members=["c1"], node_ids=["q1"])
    verdict = Verdict(claim_id="m1", confirmed=texts["status"] == "complete", refutations=1, valid_votes=3,
                      votes=[VoteRecord(claim_id="m1", seed=1, valid=True, verdict="refuted", reason=texts["reason"])])
    synthesis = Synthesis(answer=texts["answer"], executive_summary=texts["summary"],
                          findings=[(texts["theme"], [CitedStatement(text=texts["statement"], claim_ids=["m1"])])],
                          open_questions=[texts["open"]]) if texts["status"] == "complete" else None
    stats = {key: 1 for key, _ in STAT_ROWS}
    stats.update(search_error_messages=[texts["error"]], unresponsive_engines=[texts["title"]],
                 phase_seconds={"plan": 1.0})
    data = ReportData(question=texts["question"], status=RunStatus(texts["status"]), date="2026-01-01",
                      model=texts["model"], profile="quick", run_id="r", synthesis=synthesis,
                      short_answer=texts["short"], claims={"m1": claim},
                      verdicts={"m1": verdict}, nodes=[NodeState(id="q1", question="q", gaps=[texts["open"]])],
                      sources={texts["url"]: Source(url=texts["url"], title=texts["title"])}, stats=stats,
                      error=texts["error"])
    md = render_markdown(data)
    tokens = MD.parse(md)
    headings = [(t.tag, tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0][0] == "h1" and sum(1 for tag, _ in headings if tag == "h1") == 1
    assert [text for tag, text in headings if tag == "h2"] == [h[3:] for h in HEADINGS[1:]]
    assert {tag for tag, _ in headings} <= {"h1", "h2", "h3"}
    assert_markdown_is_inert(md, {texts["url"]})
    # What the reader sees is the text itself: no entity decoded, no stray backslash.
    answer = " ".join(CONTROL_CHARS.sub(" ", texts["answer"]).split())
    short = " ".join(CONTROL_CHARS.sub(" ", texts["short"]).split()).rstrip(".").strip()
    if synthesis is not None and (answer or short):
        # The direct answer (in bold) then the sentence of support, each as written.
        expected = " ".join(part for part in (f"{short}." if short else "", answer) if part)
        assert " ".join(shown_text(tokens, "Answer").split()) == expected
    json.dumps(render_json(data), ensure_ascii=False)
