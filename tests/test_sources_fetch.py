"""Fetch + extract against the loopback fixture site: real HTTP, real trafilatura."""

from __future__ import annotations

import time

import pytest

from appliance.sources.fetch import Fetcher
from appliance.sources.urls import normalize_url
from conftest import loopback_overrides, make_settings
from sources_harness import free_port, silent_server


@pytest.fixture
def fetcher(sources_settings):
    with Fetcher(sources_settings) as f:
        yield f


def test_fetches_and_extracts_html(fetcher, fixture_site):
    source = fetcher.fetch(f"{fixture_site.url}/pages/vostok.html")
    assert source.ok, source.error
    assert source.title == "Lake Vostok beneath the Antarctic ice"
    assert "largest known subglacial lake" in source.text
    assert "fifteen million years" in source.text
    assert "Copyright fixture site" not in source.text  # boilerplate dropped
    assert source.published == "2021-05-04"
    assert source.content_type.startswith("text/html")
    assert source.norm_url == f"127.0.0.1:{fixture_site.port}/pages/vostok.html"
    assert not source.from_cache


def test_plain_text_is_used_as_is(fetcher, fixture_site):
    source = fetcher.fetch(f"{fixture_site.url}/plain.txt")
    assert source.ok, source.error
    assert "spring tide range this week is 4.2 metres" in source.text
    assert source.title == "Tide tables for the harbour"


def test_second_fetch_comes_from_the_disk_cache(sources_settings, fixture_site):
    url = f"{fixture_site.url}/pages/basalt.html"
    with Fetcher(sources_settings) as first:
        assert first.fetch(url).ok
    before = fixture_site.requests.count("/pages/basalt.html")
    with Fetcher(sources_settings) as second:  # a new process would see the same files
        again = second.fetch(url + "?utm_source=feed#top")
    assert again.ok and again.from_cache and "Giant's Causeway" in again.text
    assert again.url.endswith("#top")
    assert fixture_site.requests.count("/pages/basalt.html") == before
    cache = sources_settings.home / "cache" / "pages"
    assert list(cache.rglob("*.json")) and not list(cache.rglob("*.tmp"))


def test_pages_that_differ_by_query_are_cached_apart(sources_settings, fixture_site):
    """item?id=1 and item?id=2 are two pages: the cache never serves the first for the second,
    and a tracking parameter still finds the cached copy."""
    with Fetcher(sources_settings) as first:
        one = first.fetch(f"{fixture_site.url}/item?id=1")
        two = first.fetch(f"{fixture_site.url}/item?id=2")
    assert one.ok and two.ok and not two.from_cache
    assert "item number 1 " in one.text and "item number 2 " in two.text
    before = fixture_site.requests.count("/item")
    with Fetcher(sources_settings) as second:
        again = second.fetch(f"{fixture_site.url}/item?utm_source=feed&id=2")
    assert again.from_cache and "item number 2 " in again.text
    assert fixture_site.requests.count("/item") == before


def test_failures_are_not_cached(sources_settings, fixture_site):
    with Fetcher(sources_settings) as f:
        assert not f.fetch(f"{fixture_site.url}/missing").ok
        assert not f.fetch(f"{fixture_site.url}/missing").from_cache


@pytest.mark.parametrize("path, words", [
    ("/missing", "HTTP 404"),
    ("/image.png", "image/png is not HTML or text"),
    ("/doc.pdf", "fetch.allow_pdf"),
    ("/redirect/loop", "too many redirects"),
])
def test_page_failures_are_recorded_outcomes(fetcher, fixture_site, path, words):
    source = fetcher.fetch(fixture_site.url + path)
    assert not source.ok
    assert words in source.error
    assert source.text == ""


def test_unsupported_scheme_and_garbage(fetcher):
    assert "unsupported URL scheme" in fetcher.fetch("ftp://example.com/file").error
    assert not fetcher.fetch("not a url at all").ok


def test_redirect_is_followed(fetcher, fixture_site):
    source = fetcher.fetch(f"{fixture_site.url}/redirect/ok")
    assert source.ok and "Lake Vostok" in source.title


@pytest.mark.parametrize("kind, address", [("private", "10.255.255.1"), ("metadata", "169.254.169.254"),
                                            ("mapped", "::ffff:10.0.0.1")])
def test_redirect_to_private_address_is_refused(fetcher, fixture_site, kind, address):
    started = time.monotonic()
    source = fetcher.fetch(f"{fixture_site.url}/redirect/{kind}")
    assert not source.ok
    assert "refused by egress policy" in source.error and address in source.error
    assert time.monotonic() - started < 2  # refused before any connection attempt


def test_link_to_private_address_is_refused(fetcher):
    source = fetcher.fetch("http://10.0.0.5/secret")
    assert not source.ok and "10.0.0.5 is a private address" in source.error


def test_loopback_is_refused_without_the_allow_list(tmp_path, fixture_site):
    settings = make_settings(tmp_path / "home")  # defaults: allow_hosts = []
    with Fetcher(settings) as f:
        source = f.fetch(f"{fixture_site.url}/pages/vostok.html")
    assert not source.ok and "loopback" in source.error
    assert "fetch.allow_hosts" in source.error


def test_refused_connection(fetcher):
    source = fetcher.fetch(f"http://127.0.0.1:{free_port()}/")
    assert not source.ok and "connection refused" in source.error


def test_page_that_never_answers_ends_in_bounded_time(fetcher):
    sock, url = silent_server()
    try:
        started = time.monotonic()
        source = fetcher.fetch(url + "/never")
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert not source.ok and "did not answer within" in source.error
    assert elapsed < 4  # read_timeout is 2 s in these settings


@pytest.mark.parametrize("path", ["/trickle", "/stall"])
def test_total_deadline_is_hard(tmp_path, fixture_site, path):
    # read_timeout alone would let both run for 5 s or more: only the deadline ends them.
    settings = make_settings(tmp_path / "home", **loopback_overrides(
        **{"fetch.read_timeout": 5.0, "fetch.total_timeout": 1.5}))
    with Fetcher(settings) as f:
        started = time.monotonic()
        source = f.fetch(fixture_site.url + path)
        elapsed = time.monotonic() - started
    assert not source.ok and "fetch.total_timeout" in source.error
    assert elapsed < 2.5


def test_byte_cap_truncates_and_still_extracts(tmp_path, fixture_site):
    settings = make_settings(tmp_path / "home", **loopback_overrides(**{"fetch.max_bytes": 100_000}))
    with Fetcher(settings) as f:
        source = f.fetch(f"{fixture_site.url}/big")
    assert source.ok, source.error
    assert "Basalt columns cool slowly" in source.text
    assert len(source.text) < 100_000


def test_fetch_many_keeps_order_and_never_raises(fetcher, fixture_site):
    urls = [f"{fixture_site.url}/pages/{slug}.html" for slug in ("honeybee", "vostok", "basalt")]
    urls.insert(1, "http://169.254.169.254/latest/meta-data/")
    urls.append(f"{fixture_site.url}/missing")
    sources = fetcher.fetch_many(urls)
    assert [s.url for s in sources] == urls
    assert [s.ok for s in sources] == [True, False, True, True, False]
    assert sources[0].norm_url == normalize_url(urls[0])


@pytest.mark.parametrize("per_host", [1, 2])
def test_per_host_limit_holds(tmp_path, fixture_site, per_host):
    settings = make_settings(tmp_path / "home", **loopback_overrides(
        **{"fetch.per_host": per_host, "fetch.workers": 4, "fetch.cache": False}))
    with fixture_site.lock:
        fixture_site.peak_in_flight = 0
    with Fetcher(settings) as f:
        sources = f.fetch_many([f"{fixture_site.url}/slowpage"] * 6)
    assert all(s.ok for s in sources)
    assert fixture_site.peak_in_flight == per_host
