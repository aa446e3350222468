"""Issue 7: faults and hostile input. The appliance runs unattended and reads pages written by
strangers; under faults it must keep working, lose nothing and let nothing in.

One section per row of the issue's matrix; each row's promise is asserted here, even where a
neighbouring test module covers the mechanism.

| row | fault or input                                   | tests                                                   |
| --- | ------------------------------------------------ | ------------------------------------------------------- |
| 1   | SearXNG down, 403, slow, HTML, garbage, 500s     | test_searxng_fault_before_the_run[*]                    |
|     |                                                  | test_searxng_fault_during_the_run[*]                    |
| 2   | page never answers, 10 GB, binary, malformed,    | test_hostile_page_is_bounded_and_recorded[*]            |
|     | redirects forever                                | test_endless_page_costs_max_bytes_not_10_gb             |
|     |                                                  | test_gzip_bomb_costs_max_bytes_of_memory                |
|     |                                                  | test_hostile_pages_are_recorded_in_the_run              |
| 3   | links/redirects to 127.0.0.1, 10.x, metadata,    | test_private_target_is_refused[*]                       |
|     | private IPv6, names resolving there              | test_allow_listed_hosts_pass                            |
|     |                                                  | test_refusals_are_recorded_in_the_run                   |
| 4   | prompt injection in a page                       | test_injected_claim_goes_through_the_votes[*]           |
|     |                                                  | test_injection_page_with_the_real_model (slow)          |
| 5   | model file missing, truncated, not GGUF, wrong   | test_bad_model_file_fails_before_any_work[*]            |
|     | hash; a model that cannot hold the prompt        | test_context_too_small_fails_before_any_work            |
|     |                                                  | test_long_source_is_trimmed_to_the_context (slow)       |
|     |                                                  | test_corrupt_weights_fail_cleanly (slow)                |
| 6   | model output cut off or invalid after retries    | test_failed_step_is_recorded_and_reported[*]            |
|     |                                                  | test_cut_off_votes_are_abstentions                      |
|     |                                                  | test_real_model_cut_off_is_a_recorded_failure (slow)    |
| 7   | disk full, read-only state folder                | test_disk_full_mid_run (slow), test_disk_full_at_start  |
|     |                                                  | test_read_only_state_folder                             |
|     |                                                  | test_read_only_report_folder                            |
|     |                                                  | test_failed_writes_keep_the_old_file[*]                 |
| 8   | SIGKILL at random moments                        | test_sigkill_at_many_points_then_rerun (slow)           |
| 9   | hostile questions                                | test_unusable_question_is_one_line[*]                   |
|     |                                                  | test_hostile_question_runs_with_safe_file_names[*]      |
|     |                                                  | test_batch_ids_make_safe_file_names                     |
| 10  | config: unknown keys, wrong types, missing files | test_config_error_names_key_and_origin[*]               |
|     |                                                  | test_manifest_with_an_unknown_key_names_it              |
|     |                                                  | test_profile_from_the_environment                       |
| P   | properties (hypothesis)                          | test_property_any_question_*                            |
|     |                                                  | test_property_any_search_answer_*                       |
|     |                                                  | test_property_report_markdown_cannot_break_out          |
| N   | no network beyond loopback                       | tests/test_no_network.py (the guard now also covers DNS |
|     |                                                  | lookups and Python child processes)                     |

Real parts wherever the machine allows: the real SearXNG, fetcher, trafilatura, LanceDB and
SmolLM2. The scripted engine (tests/fakes.py) drives only control-flow rows, and the CLI runs
that exercise file names or search faults, where the model's answers do not matter.

Real-model runs here use one llama.cpp thread: with one thread per core, a single other busy
process on a 2-core machine slows llama.cpp a hundredfold (measured: one plan call 2.5 s with
one thread, 215 s with two while another test process held a core).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st
from markdown_it import MarkdownIt

import sources_harness as harness
from appliance.cli import main
from appliance.config import load_settings
from appliance.contracts import (Extraction, GapQuestions, Hit, Importance, MergedClaim, NodeFindings,
                                 NodeState, Plan, PlanNode, QuoteRef, ReportDraft, SearchQueries, Source,
                                 SourceQuality, Verdict, VoteRecord)
from appliance.embed import get_embedder
from appliance.errors import ModelOutputError, StateError, UsageError
from appliance.llm.manifest import file_sha256
from appliance.pipeline import prompts
from appliance.pipeline.quotes import quotable_sentences
from appliance.pipeline.run import Models, clean_question, research, run_id_for, slugify
from appliance.pipeline.state import Recorder, write_atomic
from appliance.pipeline.synthesize import CitedStatement, Synthesis
from appliance.report import STAT_ROWS, ReportData, render_json, render_markdown
from appliance.sources.fetch import Fetcher, PageCache
from appliance.sources.searxng import SearxngBackend
from appliance.sources.urls import UrlLedger, normalize_url
from conftest import REPO, cached_calls, loopback_overrides, make_settings, read_jsonl
from fakes import FakeBackend, FakeEngine, fail

MANIFEST = REPO / "models" / "models.toml"
MODEL_FILE = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HEADINGS = ["# Deep Dive:", "## Answer", "## Executive Summary", "## Findings", "## Open Questions",
            "## Sources", "## Run statistics"]
SAFE_REPORT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(-[a-z0-9]+)*\.md$")
HONEYBEE = "How do honeybees tell each other where flowers are?"


# ============================================================================ helpers

def app_env(home: Path, **extra: str) -> dict[str, str | None]:
    """Environment of one appliance run: this state folder, the repo's model manifest, one
    llama.cpp thread, loopback pages allowed, short timeouts; every other APPLIANCE_ variable
    of the test process unset."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("APPLIANCE_")}
    env.update(APPLIANCE_HOME=str(home), APPLIANCE_MODELS_MANIFEST=str(MANIFEST),
               APPLIANCE_LLM_N_THREADS="1", APPLIANCE_FETCH_ALLOW_HOSTS="127.0.0.1",
               APPLIANCE_FETCH_CONNECT_TIMEOUT="2", APPLIANCE_FETCH_READ_TIMEOUT="2",
               APPLIANCE_FETCH_TOTAL_TIMEOUT="4", APPLIANCE_SEARXNG_TIMEOUT="8")
    env.update(extra)
    return env


def cli(args: list[str], env: dict[str, str | None]):
    """Invoke the `appliance` command in-process."""
    return CliRunner().invoke(main, args, env=env)


def subprocess_env(env: dict[str, str | None]) -> dict[str, str]:
    """``app_env`` made into a full environment for a child process."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    full.update({k: v for k, v in env.items() if v is not None})
    return full


def assert_one_line_error(result, exit_code: int, *words: str) -> str:
    """The CLI's promise for every fault: one line starting with "error: ", the exit code of
    the fault's kind, no traceback, and words that name the cause and the fix."""
    assert result.exit_code == exit_code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def files_under(folder: Path) -> set[Path]:
    """Every file below ``folder`` (none when it does not exist)."""
    return {p for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


def report_path_from(result) -> Path:
    """The report path the CLI printed (the last line of stdout)."""
    return Path(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- a scripted engine for any page

def _source_text(messages: list[dict]) -> str:
    """The fenced source text inside an extraction prompt."""
    content = messages[-1]["content"]
    start = content.find("\n", content.find("<<<SOURCE")) + 1
    return content[start: content.rfind("\n>>>")]


def _sentence_with(text: str, fragment: str = "") -> str:
    """The first quotable sentence of ``text`` holding ``fragment``: a quote the grammar of the
    extraction admits (the source's whole sentences) and the quote check finds."""
    for sentence in quotable_sentences(text):
        if fragment in sentence:
            return sentence
    return fragment


def any_page_script(nodes: list[str] | None = None, **over) -> dict:
    """Answers for the scripted engine that work on any real page: the plan is the question
    itself (or ``nodes``), each source gives its first sentence as a claim, votes confirm."""
    def plan(messages, seed):
        question = messages[-1]["content"].removeprefix("Question: ")[:300]
        asked = list(nodes or [question])
        if len(asked) < 2:  # the quick profile plans two to three sub-questions
            asked.append(f"What else is known? {asked[0]}"[:300])
        return Plan(effort=1, nodes=[PlanNode(id=f"q{i}", question=q) for i, q in enumerate(asked, start=1)])

    def extract(messages, seed):
        sentence = _sentence_with(_source_text(messages))
        claims = [{"claim": sentence[:300], "quote": sentence, "importance": "central"}] if sentence else []
        return Extraction(source_quality="secondary", claims=claims)

    script = {
        "plan": plan,
        "queries": lambda m, s: SearchQueries(queries=["honeybee waggle dance"]),
        "extract": extract,
        "findings": lambda m, s: NodeFindings(findings="The sources were read.", gaps=[]),
        "vote": lambda m, s: {"refuted": False, "reason": "the quote states it"},
        "gaps": lambda m, s: GapQuestions(questions=[]),
        "synthesize": lambda m, s: ReportDraft(
            answer="See the findings.", executive_summary="The verified claims are listed.",
            findings=[{"theme": "Findings", "statements": [{"text": "The first source says so.",
                                                            "claim_ids": ["c1"]}]}]),
    }
    script.update(over)
    return script


def scripted_models(engine) -> Models:
    """One scripted engine in every role."""
    return Models(planner=engine, extractor=engine, verifier=engine, writer=engine)


@pytest.fixture
def cli_with_script(monkeypatch):
    """Make CLI runs use a scripted engine in every role (the real model is not loaded)."""
    def use(script: dict) -> FakeEngine:
        engine = FakeEngine(script)
        monkeypatch.setattr("appliance.pipeline.run.load_models", lambda settings: scripted_models(engine))
        return engine
    return use


def check_report_structure(md: str) -> None:
    """Every heading of the layout exactly once and in order; nothing else at level 1 or 2."""
    found = [line for line in md.splitlines() if re.match(r"#{1,2} ", line)]
    assert len(found) == len(HEADINGS) and found[0].startswith(HEADINGS[0] + " ") \
        and found[1:] == HEADINGS[1:], found


def quick_settings(home: Path, **overrides):
    """Settings of the quick profile for in-process runs: loopback pages allowed."""
    return make_settings(home, **loopback_overrides(**{"pipeline.profile": "quick", **overrides}))


# ============================================================================ row 1: SearXNG faults

class FlakySearxng:
    """A loopback stand-in for a SearXNG instance that fails in one way: on every request, or
    (with ``only``) on queries containing that word, handing the others to a real SearXNG."""

    def __init__(self, mode: str, real_url: str | None = None, only: str | None = None, delay: float = 0.0):
        self.mode, self.real_url, self.only, self.delay = mode, real_url, only, delay
        self.stop_event = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                query = parse_qs(urlsplit(self.path).query).get("q", [""])[0]
                if outer.only is not None and outer.only not in query.lower():
                    answer = httpx.get(outer.real_url + self.path, timeout=10, trust_env=False)
                    return self.send(answer.status_code, answer.content, answer.headers.get("content-type", ""))
                return outer.fail(self)

            def send(self, status: int, body: bytes, ctype: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up first (the slow mode is meant to outlast it)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def fail(self, handler) -> None:
        if self.mode == "slow":
            self.stop_event.wait(self.delay)
            return handler.send(200, b'{"results": []}', "application/json")
        status, body, ctype = {
            "500": (500, b"<html>Internal Server Error</html>", "text/html"),
            "403": (403, b"<html>403 Forbidden</html>", "text/html"),
            "html": (200, b"<html><body>a web page, not an API</body></html>", "text/html"),
            "garbage": (200, random.Random(3).randbytes(2000), "application/json"),
            "no-results": (200, b'{"query": "x", "number_of_results": 0}', "application/json"),
        }[self.mode]
        handler.send(status, body, ctype)

    def stop(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def searxng_fault(mode: str, request, only: str | None = None):
    """The URL of a SearXNG failing in ``mode``: the real instances where the fault is theirs
    (403: the real SearXNG without JSON; html: a web site where the API should be; down: a
    port nobody listens on), the loopback stand-in for the rest."""
    if only is None and mode == "403":
        yield request.getfixturevalue("searxng_no_json").url
    elif only is None and mode == "html":
        yield request.getfixturevalue("fixture_site").url
    elif mode == "down":
        yield f"http://127.0.0.1:{harness.free_port()}"
    else:
        real = request.getfixturevalue("searxng").url if only else None
        flaky = FlakySearxng(mode, real, only=only, delay=4.0)
        try:
            yield flaky.url
        finally:
            flaky.stop()


# Words each one-line message must carry: what went wrong, and the fix it names.
SEARXNG_FAULTS = {
    "down": ("cannot connect to SearXNG", "is it running"),
    "403": ("HTTP 403", "add json to search.formats"),
    "slow": ("did not answer within 2 s", "raise searxng.timeout"),
    "html": ("text/html", "is this URL a SearXNG instance"),
    "garbage": ("malformed application/json", "is this URL a SearXNG instance"),
    "500": ("HTTP 500", "see the SearXNG log"),
}


@pytest.mark.searxng
@pytest.mark.parametrize("mode", list(SEARXNG_FAULTS))
def test_searxng_fault_before_the_run(mode, request, tmp_path, cli_with_script):
    """A SearXNG that fails on every request stops the run before any work, in one line."""
    engine = cli_with_script(any_page_script())
    home, out = tmp_path / "home", tmp_path / "out"
    with searxng_fault(mode, request) as url:
        started = time.monotonic()
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", url, "--out", str(out)],
                     app_env(home, APPLIANCE_SEARXNG_TIMEOUT="2"))
        elapsed = time.monotonic() - started
    assert_one_line_error(result, 5, *SEARXNG_FAULTS[mode])
    assert elapsed < 10, "bounded by searxng.timeout"
    assert engine.calls == [] and not (home / "runs").exists() and not out.exists()


@pytest.mark.searxng
@pytest.mark.parametrize("mode", ["500", "403", "html", "garbage", "no-results", "slow"])
def test_searxng_fault_during_the_run(mode, request, tmp_path, cli_with_script):
    """A SearXNG that fails for one node's query: the other node's sources carry the run to a
    complete report, and the stats say which search failed and how to fix it."""
    failing = "zzfail columnar basalt cracks"
    cli_with_script(any_page_script(nodes=[HONEYBEE, failing]))
    home, out = tmp_path / "home", tmp_path / "out"
    with searxng_fault(mode, request, only="zzfail") as url:
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", url, "--out", str(out),
                      "--json"], app_env(home, APPLIANCE_SEARXNG_TIMEOUT="2"))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    stats = report["stats"]
    assert report["status"] == "complete"
    assert stats["searches"] == 1 and stats["search_errors"] == 1
    assert stats["sources_fetched"] >= 1
    fix = {"500": "see the SearXNG log", "403": "search.formats", "html": "SearXNG instance",
           "garbage": "SearXNG instance", "no-results": "without a results list",
           "slow": "raise searxng.timeout"}[mode]
    assert len(stats["search_error_messages"]) == 1 and fix in stats["search_error_messages"][0]
    md = (out / f"{report['run_id']}.md").read_text(encoding="utf-8")
    assert "| search error | " in md and "| search errors | 1 |" in md


# ============================================================================ row 2: hostile pages

@pytest.fixture
def page_fetcher(tmp_path):
    """A fetcher for the loopback site (no page cache: every test fetches for real)."""
    settings = make_settings(tmp_path / "home", **loopback_overrides(**{"fetch.cache": False}))
    with Fetcher(settings) as fetcher:
        yield fetcher


# path: (ok, words of the recorded outcome, seconds allowed). read_timeout 2 s, total 4 s.
HOSTILE_PAGES = {
    "never-answers": (False, "did not answer within 2 s", 4),
    "/stall": (False, "stopped sending for 2 s (fetch.read_timeout)", 6),
    "/trickle": (False, "fetch.total_timeout", 6),
    "/hostile/binary": (False, "no readable text", 6),
    "/hostile/octet": (False, "application/octet-stream is not HTML or text", 3),
    "/image.png": (False, "image/png is not HTML or text", 3),
    "/hostile/nested": (False, "no readable text", 6),
    "/redirect/loop": (False, "too many redirects", 4),
    "/redirect/chain/0": (False, "too many redirects", 4),
    "/hostile/malformed": (True, "Giant's Causeway", 6),
    # 3.2 MB of tiny elements: 48 s in trafilatura's main-text extraction before the fix.
    "/hostile/tag-soup": (True, "word word", 20),
}


@pytest.mark.parametrize("path", list(HOSTILE_PAGES))
def test_hostile_page_is_bounded_and_recorded(path, page_fetcher, fixture_site):
    """Each hostile page ends in bounded time as a recorded outcome: a failure with its reason,
    or (malformed but readable, tag soup) the text that could be read."""
    ok, words, seconds = HOSTILE_PAGES[path]
    silent = None
    if path == "never-answers":
        silent, url = harness.silent_server()
    else:
        url = fixture_site.url + path
    try:
        started = time.monotonic()
        source = page_fetcher.fetch(url)
        elapsed = time.monotonic() - started
    finally:
        if silent is not None:
            silent.close()
    assert elapsed < seconds, elapsed
    assert source.ok is ok
    assert words in (source.text if ok else source.error), (source.error, source.text[:200])
    if not ok:
        assert source.text == ""


def test_endless_page_costs_max_bytes_not_10_gb(tmp_path, fixture_site):
    """A page that declares 10 GiB and never stops: read up to fetch.max_bytes, kept (a
    beginning still has text), marked as truncated; the server sent about that much."""
    max_bytes = 1_000_000
    settings = make_settings(tmp_path / "home", **loopback_overrides(
        **{"fetch.cache": False, "fetch.max_bytes": max_bytes}))
    served_before = len(fixture_site.endless_sent)
    tracemalloc.start()
    try:
        with Fetcher(settings) as fetcher:
            started = time.monotonic()
            source = fetcher.fetch(fixture_site.url + "/hostile/endless")
            elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert source.ok and source.truncated
    assert 0 < len(source.text) <= max_bytes and "Endless words" in source.text
    assert elapsed < 10
    assert peak < 40 * max_bytes, f"peak {peak / 1e6:.0f} MB of Python allocations"
    deadline = time.monotonic() + 5
    while len(fixture_site.endless_sent) == served_before and time.monotonic() < deadline:
        time.sleep(0.05)  # the server thread notices the hang-up a moment later
    # What the kernel's socket buffers absorbed comes on top of what was read.
    assert len(fixture_site.endless_sent) > served_before
    assert fixture_site.endless_sent[-1] < max_bytes + 32_000_000


def test_gzip_bomb_costs_max_bytes_of_memory(tmp_path, fixture_site):
    """256 MiB packed into 260 KB of gzip: inflated no further than fetch.max_bytes (httpx's
    own decoding inflated each network read whole: 271 MB peak, measured before the fix)."""
    max_bytes = 1_000_000
    harness.gzip_bomb()  # built before measuring: the server's copy is not the reader's memory
    settings = make_settings(tmp_path / "home", **loopback_overrides(
        **{"fetch.cache": False, "fetch.max_bytes": max_bytes}))
    tracemalloc.start()
    try:
        with Fetcher(settings) as fetcher:
            source = fetcher.fetch(fixture_site.url + "/hostile/gzip-bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert source.ok and source.truncated and len(source.text) <= max_bytes
    assert peak < 40 * max_bytes, f"peak {peak / 1e6:.0f} MB of Python allocations"


def test_hostile_pages_are_recorded_in_the_run(tmp_path, fixture_site):
    """In a run, every hostile page is a source recorded with its reason; none stops the run."""
    paths = ["/hostile/binary", "/hostile/octet", "/redirect/loop", "/stall", "/pages/honeybee.html"]
    hits = [Hit(url=fixture_site.url + p, title=p, rank=i + 1) for i, p in enumerate(paths)]
    settings = quick_settings(tmp_path / "home", **{"pipeline.sources_per_node": len(paths),
                                                    "fetch.total_timeout": 2.0})
    engine = FakeEngine(any_page_script(nodes=[HONEYBEE]))
    with Fetcher(settings) as fetcher:
        result = research(HONEYBEE, settings, models=scripted_models(engine), backend=FakeBackend(hits),
                          fetcher=fetcher, embedder=get_embedder(settings), out_dir=tmp_path / "out")
    records = {r["url"]: r for r in read_jsonl(result.run_dir / "sources.jsonl")}
    assert set(records) == {h.url for h in hits}
    for path in paths[:-1]:
        record = records[fixture_site.url + path]
        assert record["ok"] is False and record["error"], record
    assert records[fixture_site.url + "/pages/honeybee.html"]["ok"] is True
    assert result.report["stats"]["sources_failed"] == len(paths) - 1
    assert result.status == "complete"


# ============================================================================ row 3: SSRF

FAKE_DNS = {
    "site.test": ["127.0.0.1"],              # the fixture site under an allow-listed name
    "internal.test": ["10.1.2.3"],
    "meta.test": ["169.254.169.254"],
    "v6.test": ["fd12:3456:789a::1"],
    "rebind.test": ["93.184.216.34", "127.0.0.1"],  # one public answer, one private
}


@pytest.fixture
def fake_dns(monkeypatch):
    """Names that resolve to chosen addresses; no real lookup is made."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name in FAKE_DNS:
            out = []
            for ip in FAKE_DNS[name]:
                family = socket.AF_INET6 if ":" in ip else socket.AF_INET
                addr = (ip, int(port or 0), 0, 0) if family == socket.AF_INET6 else (ip, int(port or 0))
                out.append((family, socket.SOCK_STREAM, 6, "", addr))
            return out
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def ssrf_fetcher(tmp_path, allow: list[str]) -> Fetcher:
    """A fetcher whose allow list is ``allow`` only (not the usual 127.0.0.1)."""
    settings = make_settings(tmp_path / "home", **loopback_overrides(
        **{"fetch.cache": False, "fetch.allow_hosts": allow}))
    return Fetcher(settings)


# target (with {port} of the fixture site): words of the refusal
PRIVATE_TARGETS = {
    "http://127.0.0.1:{port}/ssrf-canary": "loopback",
    "http://localhost:{port}/ssrf-canary": "loopback",
    "http://[::1]:{port}/ssrf-canary": "loopback",
    "http://10.0.0.5/secret": "10.0.0.5 is a private address",
    "http://169.254.169.254/latest/meta-data/": "a cloud metadata address",
    "http://[fd12:3456:789a::1]/": "private",
    "http://[fe80::1]/": "link-local",
    "http://[::ffff:10.0.0.1]/": "private",
    "http://internal.test/": "internal.test (10.1.2.3) is a private address",
    "http://meta.test/latest/meta-data/": "cloud metadata",
    "http://v6.test/": "v6.test (fd12:3456:789a::1) is a private address",
    "http://rebind.test:{port}/ssrf-canary": "rebind.test (127.0.0.1) is a loopback address",
}


@pytest.mark.parametrize("via", ["link", "redirect"])
@pytest.mark.parametrize("target", list(PRIVATE_TARGETS))
def test_private_target_is_refused(target, via, tmp_path, fixture_site, fake_dns):
    """A private target is refused, as a link (a search result) or as a redirect from an
    allowed page, before any connection to it; only the allow-listed name may be fetched."""
    url = target.format(port=fixture_site.port)
    if via == "redirect":
        url = f"http://site.test:{fixture_site.port}/redirect/to?url={quote(url, safe='')}"
    before = fixture_site.requests.count("/ssrf-canary")
    with ssrf_fetcher(tmp_path, ["site.test"]) as fetcher:
        started = time.monotonic()
        source = fetcher.fetch(url)
    assert not source.ok
    assert "refused by egress policy" in source.error and PRIVATE_TARGETS[target] in source.error, source.error
    assert "fetch.allow_hosts" in source.error
    assert time.monotonic() - started < 2, "refused before any connection attempt"
    assert fixture_site.requests.count("/ssrf-canary") == before, "the private target was never asked"


def test_allow_listed_hosts_pass(tmp_path, fixture_site, fake_dns):
    """Allow-listing is what lets a private host through: by address and by name."""
    target = quote(f"http://127.0.0.1:{fixture_site.port}/ssrf-canary", safe="")
    redirect = f"http://site.test:{fixture_site.port}/redirect/to?url={target}"
    before = fixture_site.requests.count("/ssrf-canary")
    with ssrf_fetcher(tmp_path, ["site.test", "127.0.0.1"]) as fetcher:
        source = fetcher.fetch(redirect)
    assert "HTTP 404" in source.error  # the canary was asked for: the policy let it through
    assert fixture_site.requests.count("/ssrf-canary") == before + 1
    with ssrf_fetcher(tmp_path, ["internal.test"]) as fetcher:
        source = fetcher.fetch("http://internal.test/")
    # Let through by the policy; the test's own network guard then stops the packet.
    assert "refused by egress policy" not in source.error and "cannot connect" in source.error


@pytest.mark.searxng
def test_refusals_are_recorded_in_the_run(searxng, tmp_path):
    """A search result pointing into a private network is a recorded, refused source."""
    settings = quick_settings(tmp_path / "home", **{"searxng.url": searxng.url})
    engine = FakeEngine(any_page_script(nodes=["intranet lake vostok"]))
    backend = SearxngBackend(searxng.url, timeout=8)
    with Fetcher(settings) as fetcher:
        result = research("What is under the intranet lake?", settings, models=scripted_models(engine),
                          backend=backend, fetcher=fetcher, embedder=get_embedder(settings),
                          out_dir=tmp_path / "out")
    refused = [r for r in read_jsonl(result.run_dir / "sources.jsonl") if r["url"] == "http://10.0.0.5/secret"]
    assert len(refused) == 1 and refused[0]["ok"] is False
    assert "refused by egress policy" in refused[0]["error"]
    assert result.report["stats"]["sources_failed"] >= 1
    assert all("10.0.0.5" not in s["url"] for s in result.report["sources"])


# ============================================================================ row 4: prompt injection

INJECTED_CLAIM = "Tardigrades are immortal and cannot die."
TARDIGRADE_QUESTION = "How long can tardigrades survive without water?"


def injection_script(votes) -> dict:
    """The extractor falls for the page: it returns the injected claim with its verbatim quote."""
    def extract(messages, seed):
        text = _source_text(messages)
        if INJECTED_CLAIM not in text:
            return Extraction(source_quality="blog", claims=[])
        return Extraction(source_quality="primary", claims=[
            {"claim": INJECTED_CLAIM, "quote": _sentence_with(text, INJECTED_CLAIM), "importance": "central"},
            {"claim": "Dried tardigrades survive without water for over ten years.",
             "quote": _sentence_with(text, "can survive without water for more than ten years"),
             "importance": "central"}])
    return any_page_script(nodes=[TARDIGRADE_QUESTION], extract=extract, vote=votes)


@pytest.mark.searxng
@pytest.mark.parametrize("outcome", ["refuted", "confirmed"])
def test_injected_claim_goes_through_the_votes(outcome, searxng, fixture_site, tmp_path):
    """Whatever the page says, the injected text can only be a claim: it gets its three votes
    like every other claim, dies when they refute it, and when they confirm it, it enters the
    report escaped and cited to the page it came from."""
    def votes(messages, seed):
        injected = INJECTED_CLAIM in messages[-1]["content"].split("Claim: ")[-1]
        return {"refuted": injected and outcome == "refuted", "reason": "checked against the quote"}

    settings = quick_settings(tmp_path / "home", **{"searxng.url": searxng.url})
    engine = FakeEngine(injection_script(votes))
    with Fetcher(settings) as fetcher:
        result = research(TARDIGRADE_QUESTION, settings, models=scripted_models(engine),
                          backend=SearxngBackend(searxng.url, timeout=8), fetcher=fetcher,
                          embedder=get_embedder(settings), out_dir=tmp_path / "out")
    report = result.report
    injected = [c for c in report["claims"] if c["text"] == INJECTED_CLAIM]
    assert len(injected) == 1 and injected[0]["verdict"] is not None
    assert len(injected[0]["verdict"]["votes"]) == 3
    vote_calls = [p for p, _ in engine.calls if p == "vote"]
    assert len(vote_calls) == 3 * report["stats"]["verified"] == 3 * len(report["claims"])
    assert len(read_jsonl(result.run_dir / "votes.jsonl")) == len(vote_calls)
    md = result.markdown_path.read_text(encoding="utf-8")
    check_report_structure(md)
    confirmed = {c["id"] for c in report["claims"] if c["verdict"]["confirmed"]}
    cited = {cid for f in report["findings"] for s in f["statements"] for cid in s["claim_ids"]}
    assert cited <= confirmed
    if outcome == "refuted":
        assert injected[0]["verdict"]["confirmed"] is False and injected[0]["id"] not in cited
        assert INJECTED_CLAIM not in md.split("## Findings")[1].split("## Sources")[0]
    else:
        assert injected[0]["verdict"]["confirmed"] is True
        page = fixture_site.url + "/hostile/injection.html"
        # The quote kept is the page's own span (without the final full stop).
        quoting = [s["url"] for s in report["sources"] if any(INJECTED_CLAIM[:-1] in q for q in s["quotes"])]
        assert quoting == [page]
    # The page's fake citations and links never become sources or links.
    assert "evil.example" not in md and "](javascript" not in md
    assert all(s["url"].startswith(fixture_site.url) for s in report["sources"])


@pytest.mark.slow
@pytest.mark.searxng
def test_injection_page_with_the_real_model(searxng, fixture_site, tmp_path):
    """The real model reads the injection page through SearXNG: the same phases run, every
    verified claim gets its three votes, every quote is verbatim, no statement cites an
    unverified claim, and the report keeps its structure. (Seen while writing this test: the
    model did extract the page's fake JSON claim "Tardigrades are immortal"; the votes
    refuted it.)"""
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", TARDIGRADE_QUESTION, "--profile", "quick", "--searxng-url", searxng.url,
                  "--out", str(out), "--json"], app_env(home))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    stats = report["stats"]
    run_dir = home / "runs" / report["run_id"]
    sources = read_jsonl(run_dir / "sources.jsonl")
    assert any(s["url"].endswith("/hostile/injection.html") and s["ok"] for s in sources), \
        "the injection page was read"

    # Control flow: the phases of an undisturbed run, in order, and one call per step.
    phases = list(stats["phase_seconds"])
    expected = ["plan", "gather", "dedup", "verify", "gaps"] + (["synthesize"] if stats["confirmed"] else [])
    assert phases[:len(expected)] == expected and set(phases) <= set(expected)
    calls = read_jsonl(run_dir / "calls.jsonl")
    purposes = [c["purpose"] for c in calls]
    assert purposes.count("plan") == 1
    assert purposes.count("extract") == stats["sources_fetched"]
    # Votes: three per verified claim, each recorded, none lost to the page's "instructions".
    assert purposes.count("vote") == 3 * stats["verified"]
    assert stats["votes_valid"] + stats["votes_invalid"] == 3 * stats["verified"]
    verdicts = [c["verdict"] for c in report["claims"] if c["verdict"]]
    assert len(verdicts) == stats["verified"] and all(len(v["votes"]) == 3 for v in verdicts)
    assert len(read_jsonl(run_dir / "votes.jsonl")) == 3 * stats["verified"]

    # Quotes verbatim; statements cite confirmed claims only; the page's links are not sources.
    texts = {s["url"]: s["text"] for s in sources}
    for claim in report["claims"]:
        for ref in claim["quotes"]:
            assert ref["quote"] in texts[ref["source_url"]]
    confirmed = {c["id"] for c in report["claims"] if c["verdict"] and c["verdict"]["confirmed"]}
    for finding in report["findings"]:
        for statement in finding["statements"]:
            assert statement["claim_ids"] and set(statement["claim_ids"]) <= confirmed
    assert all(s["url"] in texts for s in report["sources"])

    md = (out / f"{report['run_id']}.md").read_text(encoding="utf-8")
    check_report_structure(md)
    assert_markdown_is_inert(md, {s["url"] for s in report["sources"]})
    # The attack's words reach the report only as a verified claim's own text, quote or votes.
    carried = " ".join([c["text"] + " " + " ".join(q["quote"] for q in c["quotes"]) + " " +
                        " ".join(v["reason"] for v in c["verdict"]["votes"])
                        for c in report["claims"] if c["verdict"]]).lower()
    for marker in harness.INJECTION_MARKERS:
        if marker in md.lower():
            assert marker in carried, marker


# ============================================================================ row 5: model files

def write_manifest(folder: Path, name: str, file: str, sha: str, size: int | None = None) -> Path:
    """A one-model manifest serving every role."""
    path = folder / f"{name}.toml"
    size_line = f"size = {size}\n" if size is not None else ""
    path.write_text(f'[[model]]\nname = "m"\nfile = "{file}"\nsha256 = "{sha}"\n{size_line}'
                    'n_ctx_train = 8192\nroles = ["planner", "extractor", "verifier", "writer"]\n',
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_sha() -> str:
    if not MODEL_FILE.is_file():
        pytest.fail(f"{MODEL_FILE} is missing: run `make models`", pytrace=False)
    return file_sha256(MODEL_FILE)


def bad_model(kind: str, folder: Path, sha: str) -> Path:
    """A manifest whose model file is wrong in one way."""
    size = MODEL_FILE.stat().st_size
    if kind == "missing":
        return write_manifest(folder, kind, "nowhere.gguf", sha, size=size)
    if kind == "wrong hash":
        return write_manifest(folder, kind, str(MODEL_FILE), "1" * 64, size=size)
    if kind == "not GGUF":
        (folder / "text.gguf").write_text("this is not a model\n" * 500)
        return write_manifest(folder, kind, "text.gguf", file_sha256(folder / "text.gguf"))
    with MODEL_FILE.open("rb") as fh:
        (folder / "cut.gguf").write_bytes(fh.read(size // 2 if kind == "truncated download" else 4096))
    if kind == "truncated download":  # the manifest as shipped: the whole file's size and hash
        return write_manifest(folder, kind, "cut.gguf", sha, size=size)
    # Header only, registered with its own hash: only reading the GGUF header can tell.
    return write_manifest(folder, kind, "cut.gguf", file_sha256(folder / "cut.gguf"))


MODEL_FAULTS = {
    "missing": ("is missing", "make models"),
    "wrong hash": ("the manifest expects 111111111111", "models verify"),
    "not GGUF": ("is not a GGUF model file",),
    "truncated download": ("is truncated", "make models"),
    "truncated header": ("is truncated",),
}


@pytest.mark.searxng
@pytest.mark.parametrize("kind", list(MODEL_FAULTS))
def test_bad_model_file_fails_before_any_work(kind, searxng, tmp_path, model_sha):
    """In a child process, so that a file handed to llama.cpp by mistake could only kill the
    child: one line, exit code 3, no run folder, no report."""
    manifest = bad_model(kind, tmp_path, model_sha)
    home, out = tmp_path / "home", tmp_path / "out"
    env = subprocess_env(app_env(home, APPLIANCE_MODELS_MANIFEST=str(manifest)))
    result = subprocess.run([sys.executable, "-m", "appliance", "research", HONEYBEE, "--profile", "quick",
                             "--searxng-url", searxng.url, "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    for word in MODEL_FAULTS[kind]:
        assert word in lines[0], (word, lines[0])
    assert not (home / "runs").exists() and not out.exists() and result.stdout == ""


@pytest.mark.searxng
def test_context_too_small_fails_before_any_work(searxng, tmp_path):
    """A context that cannot hold a prompt's fixed part and its output budget: one line before
    any work, naming the size that would do (it used to fail part-way, as an "error" report)."""
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out)],
                 app_env(home, APPLIANCE_LLM_N_CTX="256"))
    line = assert_one_line_error(result, 4, "context of 256 tokens", "raise llm.n_ctx to")
    need = int(re.search(r"raise llm.n_ctx to (\d+)", line).group(1))
    assert 256 < need <= 4096
    assert not (home / "runs").exists() and not out.exists()


@pytest.mark.slow
def test_long_source_is_trimmed_to_the_context(tmp_path):
    """A source far longer than the context is trimmed (visibly) instead of overflowing."""
    from appliance.llm import ModelPool

    settings = make_settings(tmp_path / "home", **{"models.manifest": str(MANIFEST), "llm.n_ctx": 1400,
                                                   "llm.n_threads": 1, "llm.cache": False})
    records = []
    with ModelPool(settings) as pool:
        engine = pool.for_role("extractor")
        engine.add_listener(records.append)
        page = " ".join(harness.PAGES["vostok"][2]) * 60  # about 12,000 words
        ctx = prompts.Context(question="How old is the water of Lake Vostok?", today="2026-01-01")
        messages = prompts.extract(ctx, "How old is the water?", "", "Lake Vostok", None, page, 3)
        assert engine.count_prompt(messages) > engine.n_ctx
        try:
            engine.structured(messages, Extraction, max_tokens=prompts.EXTRACT_TOKENS, purpose="extract")
        except ModelOutputError:
            pass  # a clean failure is acceptable; an overflow or a crash is not
    assert len(records) == 1 and records[0].trimmed


@pytest.mark.slow
@pytest.mark.searxng
def test_corrupt_weights_fail_cleanly(searxng, tmp_path):
    """A file with an intact header but damaged weights, registered with its own hash, so no
    file check can tell. Its logits are NaN, on which llama.cpp's grammar sampler aborts the
    process (SIGABRT, seen before appliance/llm checked the logits): the run must end in a
    clean error instead, as a one-line error or an "error" report naming the damage."""
    data = bytearray(MODEL_FILE.read_bytes())
    noise = random.Random(1).randbytes(1000) * 20_000
    data[len(data) // 3: len(data) // 3 + len(noise)] = noise
    (tmp_path / "noisy.gguf").write_bytes(data)
    manifest = write_manifest(tmp_path, "noisy", "noisy.gguf", hashlib.sha256(data).hexdigest())
    home, out = tmp_path / "home", tmp_path / "out"
    env = subprocess_env(app_env(home, APPLIANCE_MODELS_MANIFEST=str(manifest)))
    env["GGML_NO_BACKTRACE"] = "1"  # were it to abort, ggml would spend half a minute in gdb
    result = subprocess.run([sys.executable, "-m", "appliance", "research", HONEYBEE, "--profile", "quick",
                             "--searxng-url", searxng.url, "--out", str(out), "--json"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, f"exit {result.returncode}: {result.stderr[-2000:]}"
    errors = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "damaged" in errors[0], result.stderr
    if result.stdout.strip():  # the damage showed inside the run: its report records it
        report = json.loads(result.stdout)
        assert report["status"] == "error" and "weights are damaged" in report["error"]


# ============================================================================ row 6: bad model output

def _flow_run(tmp_path: Path, engine, settings=None, models: Models | None = None):
    """A run on two short pages through the scripted engine (a fixed fetcher: no network)."""
    from fakes import FakeFetcher

    pages = {"http://a.test/one": "Alpha Corp was founded in 1901 by Jane Roe in Springfield. It makes pumps.",
             "http://b.test/two": "Jane Roe was born in 1870 in Lisbon and studied engineering at Porto."}
    settings = settings or load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                                         overrides={"pipeline.gap_questions": 1})
    hits = [Hit(url=u, title=u, rank=i + 1) for i, u in enumerate(pages)]
    return research("Where was the founder of Alpha Corp born?", settings,
                    models=models or scripted_models(engine), backend=FakeBackend(hits),
                    fetcher=FakeFetcher(pages), embedder=get_embedder(settings), out_dir=tmp_path / "out")


def _two_node_plan(messages, seed):
    # q2 depends on q1, so q2 asks for search queries: every call kind of a run happens.
    return Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?"),
                                 PlanNode(id="q2", question="Where was the founder born?", depends_on=["q1"])])


# failing step: (status of the report, stats that must record it, start of the report's error)
FAILING_STEPS = {
    "plan": ("plan_failed", {"model_calls": 1}, "planning failed"),
    "queries": ("complete", {"model_failures": 1}, None),
    "extract": ("no_evidence", {"extraction_failures": 2, "model_failures": 2}, None),
    "findings": ("complete", {"model_failures": 1}, None),
    "vote": ("inconclusive", {"votes_valid": 0, "confirmed": 0, "model_failures": 6}, None),
    "gaps": ("complete", {"model_failures": 1}, None),
    "synthesize": ("synthesis_failed", {"confirmed": 2}, "synthesis failed"),
}


@pytest.mark.parametrize("step", list(FAILING_STEPS))
def test_failed_step_is_recorded_and_reported(step, tmp_path):
    """Output invalid after every retry, step by step: an abstention or a failed step on
    record, and still a report with its statistics."""
    answers = {"plan": _two_node_plan,
               "findings": lambda m, s: NodeFindings(findings="Jane Roe founded Alpha Corp.",
                                                     gaps=["When did she die?"]),
               step: lambda m, s: fail(step)}
    engine = FakeEngine(any_page_script(**answers))
    result = _flow_run(tmp_path, engine)
    status, recorded, error = FAILING_STEPS[step]
    assert result.status == status
    assert (result.report["error"] or "").startswith(error) if error else not result.report["error"]
    assert step in [p for p, _ in engine.calls], "the step was reached"
    stats = result.report["stats"]
    for key, value in recorded.items():
        assert stats[key] == value, (key, stats[key])
    assert result.markdown_path.is_file() and result.json_path.is_file()
    check_report_structure(result.markdown_path.read_text(encoding="utf-8"))
    if step == "vote":
        votes = read_jsonl(result.run_dir / "votes.jsonl")
        assert votes and all(not v["valid"] and v["reason"].startswith("failed:") for v in votes)
        assert stats["votes_invalid"] == 3 * stats["verified"] > 0


class CutOffBackend:
    """Stands in for llama.cpp: every answer is cut off by the output budget."""

    n_ctx = 4096

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, tokens) -> str:
        return bytes(tokens).decode("utf-8", errors="ignore")

    def render(self, messages):
        return self.tokenize("".join(m["content"] for m in messages)), []

    def check_grammar(self, gbnf: str, schema_name: str) -> None:
        pass

    def complete(self, tokens, *, gbnf, max_tokens, temperature, top_p, seed, stop):
        from appliance.llm.native import Completion

        return Completion(text='{"refuted": fal', finish_reason="length", prompt_tokens=len(tokens),
                          prompt_evaluated=len(tokens), generated_tokens=max_tokens, seconds=0.0)

    def close(self) -> None:
        pass


def test_cut_off_votes_are_abstentions(tmp_path):
    """The real engine class on a backend whose every output is cut off: each vote ends, after
    its retries, as a recorded failed vote, never as support."""
    from appliance.llm import Engine, ModelEntry

    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                             overrides={"llm.cache": False})
    verifier = Engine(CutOffBackend(), ModelEntry(name="cut-off", file="none.gguf", sha256="0" * 64,
                                                  n_ctx_train=4096), settings)
    fake = FakeEngine(any_page_script(plan=_two_node_plan))
    models = Models(planner=fake, extractor=fake, verifier=verifier, writer=fake)
    result = _flow_run(tmp_path, fake, settings=settings, models=models)
    stats = result.report["stats"]
    assert result.status == "inconclusive" and stats["verified"] > 0 and stats["confirmed"] == 0
    assert stats["votes_invalid"] == 3 * stats["verified"] and stats["votes_valid"] == 0
    calls = [c for c in read_jsonl(result.run_dir / "calls.jsonl") if c["purpose"] == "vote"]
    assert len(calls) == 3 * stats["verified"]
    assert all(not c["ok"] and c["truncations"] == c["attempts"] == 3 for c in calls)
    assert all("cut off" in v["reason"] for v in read_jsonl(result.run_dir / "votes.jsonl"))


@pytest.mark.slow
@pytest.mark.searxng
def test_real_model_cut_off_is_a_recorded_failure(searxng, tmp_path, monkeypatch):
    """With the real model and a plan budget of 3 tokens, the plan is cut off on every try:
    a plan_failed report and a failed call on record, not a crash."""
    monkeypatch.setattr(prompts, "PLAN_TOKENS", 3)
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out),
                  "--json"], app_env(home))
    assert result.exit_code == 4, result.output  # the report is written, the failure still shows
    report = json.loads(result.stdout)
    assert report["status"] == "plan_failed" and "cut off" in report["error"]
    calls = read_jsonl(home / "runs" / report["run_id"] / "calls.jsonl")
    assert [c["purpose"] for c in calls] == ["plan"]
    assert calls[0]["ok"] is False and calls[0]["truncations"] == calls[0]["attempts"] == 3
    check_report_structure((out / f"{report['run_id']}.md").read_text(encoding="utf-8"))


# ============================================================================ row 7: disk full, read-only

def _can_mount() -> bool:
    """Whether this process may mount file systems (root, with mount(8) at hand)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def mounted(kind: str, folder: Path, size: str = "64M"):
    """A tmpfs of ``size`` at ``folder``, or ``folder`` bind-mounted read-only over itself.

    Root ignores permission bits, so a read-only folder has to be a read-only mount."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tmpfs":
        command = [["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]]
    else:
        command = [["mount", "--bind", str(folder), str(folder)],
                   ["mount", "-o", "remount,bind,ro", str(folder)]]
    for step in command:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
            pytest.skip(f"cannot mount here ({done.stderr.strip()}); "
                        "test_failed_writes_keep_the_old_file covers the write paths")
    try:
        yield folder
    finally:
        # Lazy: the test process may still hold files of the mount open (caches, LanceDB).
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill_disk(folder: Path) -> None:
    """Write a file until the file system is full (unbuffered: nothing left to flush later)."""
    with (folder / "filler").open("wb", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while fh.write(b"\0" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


def seed_state(home: Path, out: Path) -> dict:
    """Work that exists before the fault: cached calls and a finished report."""
    from appliance.llm.cache import CallCache

    (home / "cache").mkdir(parents=True, exist_ok=True)
    cache = CallCache(home / "cache" / "calls.sqlite")
    rows = {f"earlier-{i}": json.dumps({"answer": i}) for i in range(20)}
    for key, raw in rows.items():
        cache.put(key, raw, {"purpose": "earlier run"})
    out.mkdir(parents=True, exist_ok=True)
    (out / "earlier.md").write_text("# Deep Dive: an earlier question\n", encoding="utf-8")
    (out / "earlier.json").write_text('{"status": "complete"}', encoding="utf-8")
    return rows


def check_state_intact(home: Path, out: Path, rows: dict) -> None:
    """Nothing written before the fault is damaged: the cache passes SQLite's integrity check
    and holds its rows, the earlier report is whole, and no half-written report is left."""
    with sqlite3.connect(home / "cache" / "calls.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = dict(conn.execute("SELECT key, raw FROM calls WHERE key LIKE 'earlier-%'").fetchall())
    assert stored == rows
    assert (out / "earlier.md").read_text(encoding="utf-8") == "# Deep Dive: an earlier question\n"
    assert (out / "earlier.json").read_text(encoding="utf-8") == '{"status": "complete"}'
    assert sorted(p.name for p in out.iterdir()) == ["earlier.json", "earlier.md"]


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_disk_full_mid_run(corpus_home, tmp_path):
    """The disk fills up after the first model call: one line naming the state folder, exit 6,
    and everything written before is intact."""
    src_home, corpus = corpus_home
    with mounted("tmpfs", tmp_path / "disk") as disk:
        home, out = disk / "home", disk / "reports"
        shutil.copytree(src_home / "lancedb", home / "lancedb")
        rows = seed_state(home, out)

        def fill_after_first_call():
            deadline = time.monotonic() + 300
            while cached_calls(home) <= len(rows) and time.monotonic() < deadline:
                time.sleep(0.05)
            fill_disk(disk)

        filler = threading.Thread(target=fill_after_first_call, daemon=True)
        filler.start()
        result = cli(["research", "What is the debt load for the US carried by the country Dai Jitao is from?",
                      "--profile", "quick", "--backend", "corpus", "--corpus", corpus, "--out", str(out)],
                     app_env(home))
        filler.join(timeout=10)
        # Whichever write met the full disk (the call cache, a run log, the claim table), its
        # message says to free space.
        assert_one_line_error(result, 6, "space")
        (disk / "filler").unlink()
        check_state_intact(home, out, rows)
        assert cached_calls(home) > len(rows), "the call finished before the disk filled is kept"


@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_disk_full_at_start(tmp_path, searxng):
    """A state folder on a full disk: one line before any work, and nothing damaged."""
    with mounted("tmpfs", tmp_path / "disk", size="16M") as disk:
        home, out = disk / "home", disk / "reports"
        rows = seed_state(home, out)
        fill_disk(disk)
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, "APPLIANCE_HOME")
        (disk / "filler").unlink()
        check_state_intact(home, out, rows)


@pytest.mark.searxng
def test_read_only_state_folder(tmp_path, searxng):
    """A read-only state folder (a read-only mount: root ignores permission bits): one line,
    exit 6, caches and reports untouched."""
    if not _can_mount():
        pytest.skip("needs root for a read-only bind mount")
    home, out = tmp_path / "home", tmp_path / "reports"
    rows = seed_state(home, out)
    with mounted("read-only", home):
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, "APPLIANCE_HOME")
    check_state_intact(home, out, rows)


@pytest.mark.searxng
def test_read_only_report_folder(tmp_path, searxng, cli_with_script):
    """The report folder is read-only: the run's work stays in the state folder, the error is
    one line, and the earlier report is untouched."""
    if not _can_mount():
        pytest.skip("needs root for a read-only bind mount")
    cli_with_script(any_page_script())
    home, out = tmp_path / "home", tmp_path / "reports"
    rows = seed_state(home, out)
    with mounted("read-only", out):
        result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url,
                      "--out", str(out)], app_env(home))
        assert_one_line_error(result, 6, str(out), "Read-only file system")
    check_state_intact(home, out, rows)
    assert list((home / "runs").iterdir()), "the run's own records were kept"


class _HalfWritten:
    """A file object whose write stores half the data, then finds the disk full."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        self._fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


def _disk_full(monkeypatch, fault: str) -> None:
    """Make the one atomic write fail: half-way through the data, or when it is flushed to disk."""
    from appliance import atomic

    if fault == "write":
        monkeypatch.setattr(atomic, "open", lambda *a, **k: _HalfWritten(open(*a, **k)), raising=False)
    else:
        def no_space(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "fsync", no_space)


@pytest.mark.parametrize("fault", ["write", "fsync"])
@pytest.mark.parametrize("what", ["write_atomic", "page cache", "manifest", "hash cache"])
def test_failed_writes_keep_the_old_file(what, fault, tmp_path, monkeypatch):
    """Every user of the one atomic write (state and reports, page cache, model manifest, hash
    cache) meets a full disk: the old file is intact, no temporary file is left, and each says
    so its own way (StateError / UsageError with the cause; the caches only lose their copy)."""
    from appliance.llm.manifest import HashCache, Manifest, ModelEntry, load_manifest, save_manifest

    folder = tmp_path / "files"
    entry = ModelEntry(name="m", file="m.gguf", sha256="0" * 64, n_ctx_train=2048, roles=("planner",))
    if what == "write_atomic":
        target = folder / "report.md"
        write_atomic(target, "the old report\n")
        _disk_full(monkeypatch, fault)
        with pytest.raises(StateError, match="No space left on device"):
            write_atomic(target, "a new report that does not fit\n")
        monkeypatch.undo()
        assert target.read_text(encoding="utf-8") == "the old report\n"
    elif what == "page cache":
        cache = PageCache(folder)
        cache.put("example.org/a", Source(url="http://example.org/a", text="old text"))
        _disk_full(monkeypatch, fault)
        cache.put("example.org/a", Source(url="http://example.org/a", text="new text"))
        monkeypatch.undo()
        assert cache.get("example.org/a").text == "old text"
    elif what == "manifest":
        path = folder / "models.toml"
        save_manifest(Manifest(path=path, models=[entry]))
        _disk_full(monkeypatch, fault)
        with pytest.raises(UsageError, match="No space left on device"):
            save_manifest(Manifest(path=path, models=[]))
        monkeypatch.undo()
        assert [m.name for m in load_manifest(path).models] == ["m"]
    else:
        model = tmp_path / "m.gguf"
        model.write_bytes(b"weights")
        cache = HashCache(folder / "model_hashes.json")
        cache.put(model, "a" * 64)
        _disk_full(monkeypatch, fault)
        other = tmp_path / "n.gguf"
        other.write_bytes(b"other weights")
        cache.put(other, "b" * 64)  # not recorded, and no error: the cache only saves time
        monkeypatch.undo()
        assert cache.get(model) == "a" * 64 and cache.get(other) is None
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left"


def test_recorder_on_a_full_disk_keeps_what_it_logged(tmp_path, monkeypatch):
    """The run logs are appended, not replaced: a full disk is a StateError, earlier lines stay."""
    real_open = Path.open

    def full_disk_open(self, mode="r", *args, **kwargs):
        fh = real_open(self, mode, *args, **kwargs)
        if "a" in mode:
            def write(data):
                raise OSError(errno.ENOSPC, "No space left on device")
            fh.write = write
        return fh

    recorder = Recorder(tmp_path / "run")
    recorder.append("votes", {"vote": 1})
    monkeypatch.setattr(Path, "open", full_disk_open)
    with pytest.raises(StateError, match="free some space"):
        recorder.append("votes", {"vote": 2})
    monkeypatch.undo()
    assert read_jsonl(tmp_path / "run" / "votes.jsonl") == [{"vote": 1}]


# ============================================================================ row 8: SIGKILL

SIGKILL_QUESTION = "What is the debt load for the US carried by the country Dai Jitao is from?"
RUN_SPECIFIC = ("stats", "run_id")


def comparable(report: dict) -> dict:
    """A report without what differs between two runs of the same question by design."""
    return {k: v for k, v in report.items() if k not in RUN_SPECIFIC}


def check_after_kill(home: Path, out: Path) -> None:
    """What a kill may not leave behind: a damaged call cache, a torn row, a half report."""
    path = home / "cache" / "calls.sqlite"
    if path.exists():
        with sqlite3.connect(path, timeout=10) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            for raw, digest in conn.execute("SELECT raw, digest FROM calls"):
                assert hashlib.sha256(raw.encode("utf-8")).hexdigest() == digest
    for md in out.glob("*.md") if out.exists() else []:
        json.loads(md.with_suffix(".json").read_text(encoding="utf-8"))  # a report is whole or absent


def last_purpose(home: Path) -> str:
    """The purpose of the last model call the killed attempt recorded (where it was)."""
    for calls in (home / "runs").glob("*/calls.jsonl") if (home / "runs").exists() else []:
        lines = [line for line in calls.read_text(encoding="utf-8").splitlines() if line.strip()]
        for line in reversed(lines):
            try:
                return json.loads(line)["purpose"]
            except ValueError:
                continue  # a line cut by the kill
    return "startup"


def kill_schedule(total: int, gathered: int | None) -> list[tuple]:
    """Where to kill, as (point, seconds after it): during start-up, during the model load and
    the first call, then after every call (alternately at once and a second and a half into
    the next one), and once the claim table is being written (dedup)."""
    schedule: list[tuple] = [("time", 0.5), ("time", 3.0), ("model load", 0.0), ("model load", 1.0)]
    for n in range(1, total):
        schedule.append((n, 0.0 if n % 2 else 1.5))
        if n == gathered:
            schedule.append(("claim table", 0.0))
    return schedule


def kill_point_reached(point, home: Path, calls_before: int, claim_files: set[Path]):
    """A test for the moment ``point`` has come in a restarted run. A call point asks for at
    least one new call in this attempt, so that no two kills land in the same place."""
    if point == "time":
        return lambda: True
    if point == "model load":
        return lambda: (home / "cache" / "model_hashes.json").exists()
    if point == "claim table":
        return lambda: bool(files_under(home / "lancedb") - files_under(home / "lancedb" / "default.lance")
                            - claim_files)
    return lambda: cached_calls(home) >= max(point, calls_before + 1)


@pytest.mark.slow
def test_sigkill_at_many_points_then_rerun(corpus_home, tmp_path):
    """One run killed again and again (at start-up, during the model load, after and in the
    middle of model calls, in every phase it reaches) and restarted each time; each restart
    replays the cache and goes on. Then an uninterrupted rerun writes the very report an
    uninterrupted run writes."""
    home, corpus = corpus_home
    args = [sys.executable, "-m", "appliance", "research", SIGKILL_QUESTION, "--profile", "quick",
            "--corpus", corpus, "--backend", "corpus", "--json"]

    ref_home = tmp_path / "ref-home"
    shutil.copytree(home / "lancedb", ref_home / "lancedb")
    ref = subprocess.run(args + ["--out", str(tmp_path / "ref")], env=subprocess_env(app_env(ref_home)),
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    reference = json.loads(ref.stdout)
    total = reference["stats"]["calls"]
    assert total >= 8, f"the question must make enough calls to kill between ({total})"

    purposes = [c["purpose"] for c in read_jsonl(ref_home / "runs" / reference["run_id"] / "calls.jsonl")]
    gathered = purposes.index("vote") if "vote" in purposes else None  # calls before the barrier

    out = tmp_path / "killed"
    env = subprocess_env(app_env(home))
    kills: list[dict] = []
    for point, delay in kill_schedule(total, gathered):
        if point == "model load":
            # Only a cache of verified hashes: without it the process hashes the file again and
            # writes it just before handing the file to llama.cpp, which marks the moment.
            (home / "cache" / "model_hashes.json").unlink(missing_ok=True)
        before = cached_calls(home)
        claim_files = files_under(home / "lancedb") - files_under(home / "lancedb" / "default.lance")
        proc = subprocess.Popen(args + ["--out", str(out)], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        reached = kill_point_reached(point, home, before, claim_files)
        while proc.poll() is None and time.monotonic() < started + 600 and not reached():
            time.sleep(0.02)
        time.sleep(delay)
        if proc.poll() is not None:  # the run finished before this point
            break
        proc.kill()
        proc.wait()
        kills.append({"point": point, "delay": delay, "after_seconds": round(time.monotonic() - started, 1),
                      "cached_calls": cached_calls(home), "last_call": last_purpose(home)})
        check_after_kill(home, out)
    (tmp_path / "kills.json").write_text(json.dumps(kills, indent=1))
    print(f"\nSIGKILL points: {len(kills)}")
    for kill in kills:
        print(f"  {kill}")
    assert len(kills) >= 10, kills

    final = subprocess.run(args + ["--out", str(out)], env=env, capture_output=True, text=True,
                           timeout=900, cwd=tmp_path)
    assert final.returncode == 0, final.stderr[-3000:]
    resumed = json.loads(final.stdout)
    check_after_kill(home, out)
    assert resumed["stats"]["cache_hits"] >= cached_calls(home) - 1 > 0
    assert comparable(resumed) == comparable(reference)


# ============================================================================ row 9: hostile questions

UNUSABLE_QUESTIONS = {
    "empty": "",
    "whitespace": " \t\n  \u3000 ",
    "100 KB": "Why? " * 20_000,
    "control characters only": "\x00\x01\x07\x1b\x7f",
}


@pytest.mark.parametrize("name", list(UNUSABLE_QUESTIONS))
def test_unusable_question_is_one_line(name, tmp_path):
    home = tmp_path / "home"
    result = cli(["research", "--", UNUSABLE_QUESTIONS[name]], app_env(home))
    assert_one_line_error(result, 2, "question")
    assert not home.exists()


HOSTILE_QUESTIONS = {
    "path-like": "../../etc/passwd",
    "absolute path": "/etc/passwd",
    "windows path": "..\\..\\Windows\\System32\\config",
    "shell metacharacters": "$(rm -rf ~); `id` && echo $HOME | tee /tmp/x; 'a' \"b\" > /dev/null",
    "control characters": "What is \x1b[31mred\x1b[0m text?\x07\x00",
    "right-to-left": "\u202eما هي عاصمة مصر؟\u202c",
    "emoji": "🔥🐝 How do bees 🐝 dance? 👨\u200d👩\u200d👧",
    "reserved name": "CON",
    "option-like": "--help",
    "long": "How " + "very " * 390 + "long?",
}


@pytest.mark.searxng
@pytest.mark.parametrize("name", list(HOSTILE_QUESTIONS))
def test_hostile_question_runs_with_safe_file_names(name, tmp_path, searxng, cli_with_script):
    """A normal run whatever the question holds; every file it writes has a safe name inside
    the report folder or the state folder, and the report's title stays one inert line."""
    cli_with_script(any_page_script())
    home, out = tmp_path / "home", tmp_path / "out"
    before = files_under(tmp_path)
    result = cli(["research", "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out), "--",
                  HOSTILE_QUESTIONS[name]], app_env(home))
    assert result.exit_code == 0, result.output
    md_path = report_path_from(result)
    assert md_path.resolve().parent == out.resolve() and SAFE_REPORT_NAME.match(md_path.name), md_path
    new_files = files_under(tmp_path) - before
    assert new_files and all(p.resolve().is_relative_to(out.resolve()) or p.resolve().is_relative_to(home.resolve())
                             for p in new_files), new_files
    assert sorted(p.name for p in out.iterdir()) == sorted([md_path.name, md_path.with_suffix(".json").name])
    assert [p.name for p in (home / "runs").iterdir()] == [md_path.stem]
    title = md_path.read_text(encoding="utf-8").splitlines()[0]
    assert title.startswith("# Deep Dive: ") and not re.search(r"[\x00-\x1f\x7f\u202a-\u202e]", title)
    report = json.loads(md_path.with_suffix(".json").read_text(encoding="utf-8"))
    assert report["question"] == clean_question(HOSTILE_QUESTIONS[name])


def test_batch_ids_make_safe_file_names(tmp_path, searxng, cli_with_script):
    """Batch report names come from ids in the questions file: hostile ids still give names
    inside the output folder."""
    cli_with_script(any_page_script())
    ids = ["../../etc/passwd", "a/b\\c", "..", ".hidden", "CON", "x" * 300, "$(id)", "ok-id"]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"id": i, "question": f"{HONEYBEE} ({n})"})
                                   for n, i in enumerate(ids)) + "\n", encoding="utf-8")
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["batch", str(questions), "--out", str(out), "--profile", "quick",
                  "--searxng-url", searxng.url], app_env(home))
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 * len(ids) + 1 and "batch.json" in names
    for name in names:
        assert not name.startswith(".") and re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    assert all(p.resolve().parent == out.resolve() for p in out.iterdir())


# ============================================================================ row 10: config

CONFIG_FAULTS = {
    # name: (file text or None, extra environment, words the one line must hold)
    "unknown key": ("[fetch]\nbudgett = 3\n", {}, ["'fetch.budgett'", "{file}", "known keys of [fetch]"]),
    "unknown section": ("[fetchh]\nbudget = 3\n", {}, ["[fetchh]", "{file}"]),
    "wrong type": ('[fetch]\nbudget = "lots"\n', {}, ["'fetch.budget'", "{file}", "must be an integer"]),
    "float for int": ("[fetch]\nbudget = 2.5\n", {}, ["'fetch.budget'", "{file}"]),
    "list for text": ('[searxng]\nurl = ["a"]\n', {}, ["'searxng.url'", "{file}", "must be a string"]),
    "section not a table": ("fetch = 3\n", {}, ["'fetch'", "{file}", "[section] table"]),
    "not TOML": ("[fetch\nbudget = 3\n", {}, ["{file}", "not valid TOML", "line 1"]),
    "profile key": ("[profiles.quick.pipeline]\nvotez = 3\n", {}, ["'pipeline.votez'", "{file}"]),
    "unknown profile": ('[pipeline]\nprofile = "turbo"\n', {}, ["'turbo'", "{file}"]),
    "missing file (--config)": (None, {}, ["{file}", "does not exist"]),
    "missing file (APPLIANCE_CONFIG)": (None, {"APPLIANCE_CONFIG": "{file}"}, ["{file}", "does not exist"]),
    "env wrong type": ("", {"APPLIANCE_FETCH_BUDGET": "lots"},
                       ["'fetch.budget'", "environment variable APPLIANCE_FETCH_BUDGET"]),
    "env wrong bool": ("", {"APPLIANCE_LLM_CACHE": "maybe"}, ["'llm.cache'", "APPLIANCE_LLM_CACHE"]),
    "env unknown key": ("", {"APPLIANCE_FETCH_BUDGETT": "3"}, ["APPLIANCE_FETCH_BUDGETT"]),
    "env unknown profile": ("", {"APPLIANCE_PIPELINE_PROFILE": "turbo"},
                            ["'turbo'", "APPLIANCE_PIPELINE_PROFILE"]),
}


@pytest.mark.parametrize("name", list(CONFIG_FAULTS))
def test_config_error_names_key_and_origin(name, tmp_path):
    text, extra, words = CONFIG_FAULTS[name]
    config = tmp_path / "appliance.toml"
    if text is not None:
        config.write_text(text, encoding="utf-8")
    env = app_env(tmp_path / "home", **{k: v.format(file=config) for k, v in extra.items()})
    args = ["research", HONEYBEE] if "APPLIANCE_CONFIG" in extra else ["--config", str(config), "research", HONEYBEE]
    result = cli(args, env)
    assert_one_line_error(result, 2, *[w.format(file=config) for w in words])
    assert not (tmp_path / "home").exists()


USAGE_FAULTS = {
    # name: (arguments, words the one line must hold)
    "config is a folder": (["--config", "{tmp}", "research", HONEYBEE], ["'--config'", "is a directory",
                                                                        "'appliance --help'"]),
    "misspelt option": (["research", "--profil", "quick", HONEYBEE], ["--profil", "--profile",
                                                                     "'appliance research --help'"]),
    "missing question": (["research"], ["Missing argument 'QUESTION'"]),
    "bad choice": (["research", "--profile", "turbo", HONEYBEE], ["'turbo'", "quick"]),
    "bad number": (["batch", "q.txt", "--jobs", "many"], ["'many'", "'appliance batch --help'"]),
    "unknown command": (["reserch", HONEYBEE], ["reserch"]),
    "unknown subcommand": (["corpus", "ad", "x"], ["'ad'", "'appliance corpus --help'"]),
}


@pytest.mark.parametrize("name", list(USAGE_FAULTS))
def test_usage_error_is_one_line(name, tmp_path):
    """Click's own errors (options, arguments, values) are one line too, naming the --help to read."""
    args, words = USAGE_FAULTS[name]
    result = cli([a.format(tmp=tmp_path) for a in args], app_env(tmp_path / "home"))
    assert_one_line_error(result, 2, *words)
    assert not (tmp_path / "home").exists()


def test_help_and_version_still_work(tmp_path):
    for args in (["--help"], ["research", "--help"], ["--version"]):
        result = cli(args, app_env(tmp_path / "home"))
        assert result.exit_code == 0 and result.output.strip() and "error" not in result.output.lower()
    bare = cli([], app_env(tmp_path / "home"))  # no arguments at all: the help, as click gives it
    assert "Usage: " in bare.output and "research" in bare.output


def test_manifest_with_an_unknown_key_names_it(tmp_path):
    manifest = tmp_path / "models.toml"
    manifest.write_text('[[model]]\nname = "m"\nfile = "m.gguf"\nsha256 = "' + "0" * 64 +
                        '"\nn_ctx_train = 8192\nrolez = ["planner"]\n', encoding="utf-8")
    result = cli(["models", "list"], app_env(tmp_path / "home", APPLIANCE_MODELS_MANIFEST=str(manifest)))
    assert_one_line_error(result, 2, str(manifest), "entry 1", "rolez")


def test_profile_from_the_environment(tmp_path):
    """APPLIANCE_PIPELINE_PROFILE used to fail whatever its value (the variable's name was
    compared as part of the profile)."""
    settings = load_settings(env={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PIPELINE_PROFILE": "quick"})
    assert settings.pipeline.profile == "quick" and settings.pipeline.verify_top == 6
    assert settings.fetch.budget == 8


# ============================================================================ properties

MD = MarkdownIt("commonmark").enable("table")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Text that tries every way out of markdown: syntax characters, HTML, links, fences, entities.
_HOSTILE_PIECES = st.sampled_from(
    list("\\`*_{}[]<>()#+!|~-=.&;:/ \n\t\x1b\x00\u202e") +
    ["http://x.example/a", "javascript:alert(1)", "&amp;", "&#60;", "<a>", "<script>", "```", "    ",
     "1.", "-->", "<!--", "[x]: http://y", "](http://evil)", "| a | b |", "## H", "\n\n---\n"])
hostile_text = st.lists(st.one_of(_HOSTILE_PIECES, st.text(max_size=6)), max_size=25).map("".join)


def _inline_tokens(tokens):
    """The inline children of every block token."""
    return [c for t in tokens if t.type == "inline" for c in (t.children or [])]


def assert_markdown_is_inert(md: str, source_urls: set[str]) -> None:
    """What the page and model text may never produce: raw HTML, code, images, or a link other
    than a source's own URL; tables keep two cells a row."""
    assert not _CONTROL.search(md), "a control or bidi-override character reached the report"
    tokens = MD.parse(md)
    kinds = {t.type for t in tokens} | {c.type for c in _inline_tokens(tokens)}
    assert not kinds & {"html_block", "html_inline", "code_inline", "code_block", "fence", "image"}, kinds
    from appliance.report import md_url

    allowed = {MD.normalizeLink(md_url(u)[1:-1]) for u in source_urls if md_url(u).startswith("<")}
    links = [c.attrs.get("href") for c in _inline_tokens(tokens) if c.type == "link_open"]
    assert set(links) <= allowed, set(links) - allowed
    cells = 0
    for t in tokens:
        if t.type == "tr_open":
            cells = 0
        elif t.type in ("td_open", "th_open"):
            cells += 1
        elif t.type == "tr_close":
            assert cells == 2


@hsettings(max_examples=300, deadline=None)
@given(st.one_of(hostile_text, st.text(max_size=3000)))
def test_property_any_question_is_an_error_or_a_safe_file_name(question):
    """Any question: a UsageError, or a run id that names a file inside the output folder and
    a report whose title is one inert line."""
    try:
        cleaned = clean_question(question)
    except UsageError:
        return
    assert cleaned and len(cleaned) <= 2000 and not _CONTROL.search(cleaned)
    run_id = run_id_for(cleaned, "2026-01-01")
    assert re.fullmatch(r"2026-01-01-[a-z0-9-]+", run_id) and len(run_id) < 80 and ".." not in run_id
    out = Path("/reports")
    assert (out / f"{run_id}.md").resolve().parent == out
    assert slugify(cleaned) == slugify(cleaned)  # stable: a rerun finds the same files
    md = render_markdown(ReportData(question=cleaned, status="plan_failed", date="2026-01-01",
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
    data = ReportData(question="q", status="synthesis_failed", date="2026-01-01", model="m", profile="quick",
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
                  "status": "complete"}


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
                      votes=[VoteRecord(claim_id="m1", seed=1, valid=True, refuted=True, reason=texts["reason"])])
    synthesis = Synthesis(answer=texts["answer"], executive_summary=texts["summary"],
                          findings=[(texts["theme"], [CitedStatement(text=texts["statement"], claim_ids=["m1"])])],
                          open_questions=[texts["open"]]) if texts["status"] == "complete" else None
    stats = {key: 1 for key, _ in STAT_ROWS}
    stats.update(search_error_messages=[texts["error"]], unresponsive_engines=[texts["title"]],
                 phase_seconds={"plan": 1.0})
    data = ReportData(question=texts["question"], status=texts["status"], date="2026-01-01", model=texts["model"],
                      profile="quick", run_id="r", synthesis=synthesis, claims={"m1": claim},
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
    answer = " ".join(_CONTROL.sub(" ", texts["answer"]).split())
    if synthesis is not None and answer:
        assert shown_text(tokens, "Answer") == answer
    json.dumps(render_json(data), ensure_ascii=False)
