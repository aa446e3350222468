"""The SearXNG client against a real SearXNG on loopback, and each way it can fail."""

from __future__ import annotations

import time

import pytest

from appliance.errors import ConfigError, SearchError
from appliance.sources.base import make_backend
from appliance.sources.fetch import Fetcher
from appliance.sources.searxng import SearxngBackend, ping
from appliance.sources.urls import UrlLedger
from conftest import loopback_overrides, make_settings
from sources_harness import free_port, silent_server

pytestmark = pytest.mark.searxng


def test_search_finds_fixture_pages_and_they_fetch_for_real(searxng, fixture_site, sources_settings):
    backend = SearxngBackend(searxng.url, timeout=10)
    hits = backend.search("waggle dance honeybee forager", 5)
    assert hits, "SearXNG returned no hits"
    assert hits[0].url == f"{fixture_site.url}/pages/honeybee.html"
    assert hits[0].engine == "fixture" and hits[0].rank == 1
    assert "waggle dance" in hits[0].snippet
    assert all(h.query == "waggle dance honeybee forager" for h in hits)
    admitted = UrlLedger(budget=5).admit(hits)
    with Fetcher(sources_settings) as fetcher:
        sources = fetcher.fetch_many([h.url for h in admitted])
    assert sources[0].ok, sources[0].error
    assert "Karl von Frisch decoded the waggle dance" in sources[0].text
    assert sources[0].title == "How honeybees tell each other where flowers are"


def test_limit_and_ranks(searxng):
    hits = SearxngBackend(searxng.url, timeout=10).search("the lake basalt honeybee columns", 2)
    assert len(hits) == 2
    assert [h.rank for h in hits] == [1, 2]


def test_private_link_from_results_is_refused_at_fetch(searxng, sources_settings):
    hits = SearxngBackend(searxng.url, timeout=10).search("intranet lake", 5)
    private = [h for h in hits if h.url.startswith("http://10.")]
    assert private, [h.url for h in hits]
    with Fetcher(sources_settings) as fetcher:
        source = fetcher.fetch(private[0].url)
    assert not source.ok and "refused by egress policy" in source.error


def test_unresponsive_engines_are_recorded(searxng):
    backend = SearxngBackend(searxng.url, timeout=10)
    backend.search("!fxb lake", 5)  # the bang selects the engine that answers HTTP 500
    assert "fixturebroken" in backend.unresponsive_engines


def test_ping_accepts_a_working_instance(searxng):
    ping(searxng.url, timeout=5)


def test_403_says_to_enable_json(searxng_no_json):
    started = time.monotonic()
    with pytest.raises(SearchError) as caught:
        SearxngBackend(searxng_no_json.url, timeout=5).search("lake", 5)
    message = caught.value.one_line()
    assert "HTTP 403" in message and "json" in message and "search.formats" in message
    assert "config/searxng/settings.yml" in message
    with pytest.raises(SearchError, match="HTTP 403"):
        ping(searxng_no_json.url, timeout=5)
    assert time.monotonic() - started < 10


def test_refused_connection_says_is_it_running():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    for call in (lambda: SearxngBackend(url, timeout=5).search("x", 3), lambda: ping(url, 5)):
        with pytest.raises(SearchError) as caught:
            call()
        message = caught.value.one_line()
        assert "connection refused" in message and url in message and "is it running" in message
        assert "searxng.url" in message
    assert time.monotonic() - started < 3


def test_silent_server_times_out_in_bounded_time():
    sock, url = silent_server()
    try:
        started = time.monotonic()
        with pytest.raises(SearchError) as caught:
            SearxngBackend(url, timeout=1.5).search("x", 3)
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert "did not answer within 1.5 s" in caught.value.one_line()
    assert elapsed < 4


def test_non_json_answer(fixture_site):
    # The fixture site answers /search with an HTML page: not a SearXNG.
    with pytest.raises(SearchError) as caught:
        SearxngBackend(fixture_site.url, timeout=5).search("x", 3)
    assert "did not answer JSON (got text/html)" in caught.value.one_line()
    with pytest.raises(SearchError, match="does not answer like SearXNG"):
        ping(fixture_site.url, 5)


def test_bad_url_is_refused_before_any_request():
    with pytest.raises(SearchError, match="not an http"):
        SearxngBackend("127.0.0.1:8888")


def test_make_backend_auto_and_explicit(tmp_path, searxng):
    corpus_settings = make_settings(tmp_path / "a")
    assert make_backend(corpus_settings).name == "corpus"
    sx_settings = make_settings(tmp_path / "b", **{"searxng.url": searxng.url})
    backend = make_backend(sx_settings)
    assert backend.name == "searxng" and backend.unresponsive_engines == {}
    assert make_backend(sx_settings, backend="corpus", corpus="other").corpus_name == "other"
    with pytest.raises(SearchError, match="no SearXNG URL"):
        make_backend(corpus_settings, backend="searxng")
    with pytest.raises(ConfigError):
        make_backend(corpus_settings, backend="google")


def test_env_variable_sets_the_url(tmp_path, searxng):
    from appliance.config import load_settings

    settings = load_settings(env={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_SEARXNG_URL": searxng.url},
                             overrides=loopback_overrides())
    assert make_backend(settings).search("basalt columns", 3)[0].url.endswith("/pages/basalt.html")
