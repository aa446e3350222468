"""Faults, rows 2 and 3: hostile pages (never answers, 10 GB, binary, malformed, redirects
for ever) and SSRF (links and redirects into private networks). See tests/fault_helpers.py.
"""

from __future__ import annotations

import socket
import time
import tracemalloc
from urllib.parse import quote

import pytest

import sources_harness as harness
from appliance.contracts import Hit
from appliance.embed import get_embedder
from appliance.pipeline.run import research
from appliance.sources.fetch import Fetcher
from appliance.sources.searxng import SearxngBackend
from conftest import loopback_overrides, make_settings, read_jsonl
from fakes import FakeBackend, FakeEngine
from fault_helpers import HONEYBEE, any_page_script, quick_settings, scripted_models


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
