"""Faults, row 1: SearXNG down, 403, slow, HTML, garbage, 500s, before and during a run;
and SearXNG URLs that are not URLs. See tests/fault_helpers.py for the whole matrix.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest

import sources_harness as harness
from fault_helpers import HONEYBEE, any_page_script, app_env, assert_one_line_error, cli


# ============================================================================ row 1: SearXNG faults

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
        flaky = harness.FlakySearxng(mode, real, only=only, delay=4.0)
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


# ---------------------------------------------------------------- SearXNG URLs that are not URLs

MALFORMED_URLS = {
    "broken IPv6 literal": "http://[::1",
    "IPv6 literal, extra bracket": "http://[::1]]:8888",
    "not an address in brackets": "http://[zz]:8888",
    "port not a number": "http://127.0.0.1:abc",
    "port out of range": "http://127.0.0.1:99999",
    "space in the host": "http://exa mple.org",
    "no scheme": "127.0.0.1:8888",
    "other scheme": "ftp://127.0.0.1:8888",
    "no host": "http://:8888",
}


def _one_line_url_error(result, url: str) -> None:
    line = assert_one_line_error(result, 5, "SearXNG URL", "http://127.0.0.1:8888")
    assert repr(url) in line or url in line, line


@pytest.mark.parametrize("entry", ["flag", "environment", "config file"])
@pytest.mark.parametrize("name", list(MALFORMED_URLS))
def test_malformed_searxng_url_is_one_line_wherever_it_is_given(name, entry, tmp_path, cli_with_script):
    """Every malformed SearXNG URL, whether from --searxng-url, APPLIANCE_SEARXNG_URL or the
    config file, is the same one-line error naming the URL and the form to use, before any
    work (a broken IPv6 literal gave a Python traceback)."""
    engine = cli_with_script(any_page_script())
    url = MALFORMED_URLS[name]
    home, out = tmp_path / "home", tmp_path / "out"
    config = tmp_path / "appliance.toml"
    config.write_text("", encoding="utf-8")
    args = ["--config", str(config), "research", HONEYBEE, "--profile", "quick", "--out", str(out)]
    env = app_env(home)
    if entry == "flag":
        args += ["--searxng-url", url]
    elif entry == "environment":
        env["APPLIANCE_SEARXNG_URL"] = url
    else:
        config.write_text(f"[searxng]\nurl = {json.dumps(url)}\n", encoding="utf-8")
    result = cli(args, env)
    _one_line_url_error(result, url)
    assert engine.calls == [] and not out.exists()


@pytest.mark.parametrize("name", ["broken IPv6 literal", "port not a number", "port out of range"])
def test_malformed_searxng_url_in_search_and_batch(name, tmp_path):
    url = MALFORMED_URLS[name]
    questions = tmp_path / "q.txt"
    questions.write_text(HONEYBEE + "\n", encoding="utf-8")
    for args in (["search", "bees", "--searxng-url", url],
                 ["batch", str(questions), "--out", str(tmp_path / "out"), "--searxng-url", url]):
        _one_line_url_error(cli(args, app_env(tmp_path / "home")), url)


@pytest.mark.parametrize("name", ["broken IPv6 literal", "port out of range", "no scheme"])
def test_doctor_reports_a_malformed_searxng_url_in_its_line(name, tmp_path):
    """`appliance doctor` shows the same message on its searxng line (no exception name)."""
    url = MALFORMED_URLS[name]
    result = cli(["doctor", "--skip-models"], app_env(tmp_path / "home", APPLIANCE_SEARXNG_URL=url))
    line = next(l for l in result.stdout.splitlines() if " searxng " in l)
    assert line.startswith("FAIL") and "SearXNG URL" in line and "http://127.0.0.1:8888" in line, line
    assert "Error:" not in line and "Traceback" not in result.output
    assert result.exit_code == 1
