"""URL rules: normalisation and the run-wide ledger (dedup, budget, order, counts)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, strategies as st

from appliance.contracts import Hit
from appliance.sources.urls import UrlLedger, normalize_url


@pytest.mark.parametrize("url, expected", [
    ("https://www.Example.com/a/b/", "example.com/a/b"),
    ("http://example.com/a/b?utm_source=x#section", "example.com/a/b"),
    ("https://example.com/item?id=2", "example.com/item?id=2"),
    ("https://example.com/item?b=2&a=1&utm_medium=feed&fbclid=X&gclid=Y", "example.com/item?a=1&b=2"),
    ("https://example.com/s?q=a%20b", "example.com/s?q=a+b"),
    ("https://example.com/s?q=a+b&", "example.com/s?q=a+b"),
    ("https://example.com/?page=3", "example.com?page=3"),
    ("https://example.com/list?tag=b&tag=a", "example.com/list?tag=b&tag=a"),  # repeats keep their order
    ("https://example.com/p?UTM_Source=x&msclkid=1&_ga=2&mc_eid=3", "example.com/p"),
    ("HTTPS://EXAMPLE.COM", "example.com"),
    ("https://example.com/", "example.com"),
    ("http://example.com:80/x", "example.com/x"),
    ("https://example.com:443/x", "example.com/x"),
    ("http://example.com:8080/x/", "example.com:8080/x"),
    ("http://[::1]:8000/p/", "[::1]:8000/p"),
    ("https://example.com/a%20b", "example.com/a b"),
    ("https://example.com/Case/Kept", "example.com/Case/Kept"),
    ("https://www2.example.com/", "www2.example.com"),
    ("example.com/path/", "example.com/path"),
])
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize("url", ["corpus://default/p0006", "corpus://notes/a/b.md#2",
                                 "mailto:someone@example.com", "javascript:void(0)"])
def test_ids_and_opaque_urls_are_kept(url):
    assert normalize_url(url) == url


def test_http_https_and_www_are_one_page():
    forms = ["http://example.org/page", "https://www.example.org/page/", "https://example.org/page?utm_source=1",
             "https://EXAMPLE.org/page#top", "https://example.org/page?fbclid=abc&gclid=def#x"]
    assert len({normalize_url(u) for u in forms}) == 1


def test_query_parameters_make_distinct_pages():
    """item?id=1 and item?id=2 are two pages (they were one: the whole query was dropped);
    tracking parameters and the order of the others do not make a new page."""
    one, two = normalize_url("https://news.example/item?id=1"), normalize_url("https://news.example/item?id=2")
    assert one != two
    assert normalize_url("https://news.example/item?utm_source=rss&id=2&fbclid=z") == two
    assert normalize_url("https://news.example/s?q=bees&page=2") == normalize_url("https://news.example/s?page=2&q=bees")
    # Parameters a blanket tracker rule would take for tracking still name different pages.
    for name in ("game", "keyword", "uid", "cid", "source", "ref", "medium", "session"):
        assert normalize_url(f"https://x.example/p?{name}=1") != normalize_url(f"https://x.example/p?{name}=2"), name


_PATH = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789-_.~/", max_size=40)


@given(_PATH, st.sampled_from(["http", "https"]), st.booleans(), st.booleans())
def test_variants_of_one_page_share_one_key(path, scheme, www, slash):
    url = f"{scheme}://{'www.' if www else ''}Example.com/{path}{'/' if slash else ''}?utm_source=1#frag"
    key = normalize_url(url)
    assert key == normalize_url(f"https://example.com/{path}")
    assert not key.endswith("/") and "://" not in key and "?" not in key


_PARAMS = st.lists(st.tuples(st.sampled_from(["id", "q", "page", "utm_source", "fbclid", "lang"]),
                             st.text(alphabet="ab1 &=%+", max_size=4)), max_size=5)


@given(_PARAMS)
def test_same_parameters_in_any_order_are_one_page(params):
    from urllib.parse import urlencode

    ordered = sorted(params, key=lambda kv: kv[0])  # repeated names keep their relative order
    assert normalize_url("https://example.com/p?" + urlencode(params)) == \
        normalize_url("https://example.com/p?" + urlencode(ordered))


def hit(url: str, rank: int) -> Hit:
    return Hit(url=url, title=url, rank=rank)


def test_ledger_admits_highest_rank_first_within_budget():
    ledger = UrlLedger(budget=2)
    admitted = ledger.admit([hit("https://c.example/", 3), hit("https://a.example/", 1), hit("https://b.example/", 2)])
    assert [h.url for h in admitted] == ["https://a.example/", "https://b.example/"]
    assert [h.url for h in ledger.budget_drops] == ["https://c.example/"]
    assert ledger.budget_drop_count == 1 and ledger.duplicate_count == 0


def test_ledger_dedups_within_and_across_calls():
    ledger = UrlLedger(budget=10)
    first = ledger.admit([hit("https://example.com/a", 1), hit("http://www.example.com/a/", 2)])
    assert [h.url for h in first] == ["https://example.com/a"]
    second = ledger.admit([hit("https://example.com/a?utm_source=x", 1), hit("https://example.com/b", 2)])
    assert [h.url for h in second] == ["https://example.com/b"]
    assert [h.url for h in ledger.duplicates] == ["http://www.example.com/a/", "https://example.com/a?utm_source=x"]
    assert ledger.stats() == {"budget": 10, "admitted": 2, "url_duplicates": 2, "budget_drops": 0}


def test_ledger_admits_pages_that_differ_by_query():
    """The second item page is a page of its own, not a duplicate of the first."""
    ledger = UrlLedger(budget=10)
    admitted = ledger.admit([hit("https://news.example/item?id=1", 1), hit("https://news.example/item?id=2", 2),
                             hit("https://news.example/item?id=2&utm_campaign=x", 3)])
    assert [h.url for h in admitted] == ["https://news.example/item?id=1", "https://news.example/item?id=2"]
    assert [h.url for h in ledger.duplicates] == ["https://news.example/item?id=2&utm_campaign=x"]


def test_every_hit_is_accounted_for():
    ledger = UrlLedger(budget=3)
    offered = 0
    for batch in range(4):
        hits = [hit(f"https://site{(batch + i) % 5}.example/p", i + 1) for i in range(3)]
        offered += len(hits)
        ledger.admit(hits)
    assert ledger.admitted_count + ledger.duplicate_count + ledger.budget_drop_count == offered
    assert ledger.admitted_count == 3 and ledger.remaining == 0


def test_budget_dropped_url_offered_again_is_a_duplicate():
    ledger = UrlLedger(budget=1)
    ledger.admit([hit("https://a.example/", 1), hit("https://b.example/", 2)])
    assert ledger.admit([hit("https://b.example/", 1)]) == []
    assert ledger.budget_drop_count == 1 and ledger.duplicate_count == 1


def test_a_released_url_gives_back_its_budget_and_is_admitted_again():
    """A page fetched but not read (nothing in it bore on the run yet) is given back: the
    budget it took is free again, and a later node offering it gets it admitted."""
    ledger = UrlLedger(budget=2)
    ledger.admit([hit("https://a.example/", 1), hit("https://b.example/", 2)])
    ledger.release("https://b.example")  # normalised like any offer
    assert ledger.admitted_count == 1 and ledger.remaining == 1 and not ledger.is_seen("https://b.example/")
    again = ledger.admit([hit("https://b.example/", 1), hit("https://a.example/", 2)])
    assert [h.url for h in again] == ["https://b.example/"]
    assert ledger.duplicate_count == 1 and ledger.remaining == 0


def test_corpus_ids_deduplicate_exactly():
    ledger = UrlLedger(budget=5)
    ledger.admit([hit("corpus://default/p0006", 1), hit("corpus://default/p0006", 2),
                  hit("corpus://default/p0007", 3)])
    assert ledger.admitted_count == 2 and ledger.duplicate_count == 1


def test_ledger_is_thread_safe():
    ledger = UrlLedger(budget=50)
    urls = [f"https://example.com/{i % 80}" for i in range(400)]

    def worker(offset: int) -> None:
        for i in range(offset, len(urls), 8):
            ledger.admit([hit(urls[i], 1)])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.admitted_count == 50
    assert len({normalize_url(h.url) for h in ledger.admitted}) == 50
    assert ledger.budget_drop_count == 30
    assert ledger.admitted_count + ledger.duplicate_count + ledger.budget_drop_count == 400


def test_negative_budget_is_refused():
    with pytest.raises(ValueError):
        UrlLedger(-1)
