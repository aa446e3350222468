"""Shared pytest fixtures. Each subject keeps its fixtures in its own marked block."""

from __future__ import annotations

import pytest

# ============================================================================ sources (issue 3)
# Loopback servers and settings for search, corpus and fetch tests. Reusable by any test:
#   fixture_site      a threaded HTTP server with fixture pages and /api/search (session)
#   searxng           a real SearXNG searching that site through a json_engine (session)
#   searxng_no_json   a second SearXNG without json in search.formats (answers 403)
#   sources_settings  settings with APPLIANCE_HOME in tmp_path and loopback allow-listed
#   musique_corpus    (settings, corpus name): the musique-dev corpus ingested once a session
# The servers themselves live in tests/sources_harness.py (also used by scripts/bench_sources.py).

from pathlib import Path  # noqa: E402

import sources_harness  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MUSIQUE_CORPUS = REPO.parent / "shared" / "bench" / "musique-dev" / "corpus.jsonl"


def make_settings(home: Path, **overrides):
    """Settings for tests: the packaged defaults plus ``overrides`` ({"fetch.budget": 3}),
    APPLIANCE_HOME=home, and no user config file or environment variables."""
    from appliance.config import load_settings

    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty-config.toml"
    empty.write_text("", encoding="utf-8")
    return load_settings(empty, env={"APPLIANCE_HOME": str(home)}, overrides=overrides)


def loopback_overrides(**extra) -> dict:
    """Fetch settings for the loopback fixture site: 127.0.0.1 allowed, short timeouts."""
    values = {"fetch.allow_hosts": ["127.0.0.1"], "fetch.connect_timeout": 2.0,
              "fetch.read_timeout": 2.0, "fetch.total_timeout": 4.0, "searxng.timeout": 8.0}
    values.update(extra)
    return values


@pytest.fixture(scope="session")
def fixture_site():
    site = sources_harness.FixtureSite().start()
    yield site
    site.stop()


@pytest.fixture(scope="session")
def searxng(fixture_site, tmp_path_factory):
    """A real SearXNG on loopback whose engine searches ``fixture_site``; has ``.url``."""
    process = sources_harness.start_searxng(tmp_path_factory.mktemp("searxng"), fixture_site.url)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def searxng_no_json(fixture_site, tmp_path_factory):
    """A SearXNG whose settings leave json out of search.formats (every API call is a 403)."""
    process = sources_harness.start_searxng(tmp_path_factory.mktemp("searxng-nojson"), fixture_site.url,
                                            json_enabled=False)
    yield process
    process.stop()


@pytest.fixture
def sources_settings(tmp_path, monkeypatch):
    """Settings with APPLIANCE_HOME in this test's tmp_path and the loopback site allowed."""
    home = tmp_path / "home"
    monkeypatch.setenv("APPLIANCE_HOME", str(home))
    return make_settings(home, **loopback_overrides())


@pytest.fixture(scope="session")
def musique_corpus(tmp_path_factory):
    """The musique-dev corpus (1,890 passages) in corpus "default" of a session state folder.

    Returns (settings, corpus name); the settings search that corpus (search.backend =
    corpus) and allow the loopback fixture site.
    """
    from appliance.sources.corpus import Corpus

    if not MUSIQUE_CORPUS.is_file():
        pytest.skip(f"musique-dev corpus not found at {MUSIQUE_CORPUS}")
    home = tmp_path_factory.mktemp("musique-home")
    settings = make_settings(home, **loopback_overrides(**{"search.backend": "corpus",
                                                           "search.corpus": "default"}))
    Corpus(settings, "default").add([MUSIQUE_CORPUS])
    return settings, "default"

# ========================================================================= end sources (issue 3)

# ============================================================================ pipeline (issues 4-6)
#   corpus_home(tmp)   a fresh state folder holding a copy of the session's musique corpus
#                      (LanceDB files copied, not re-embedded), with empty caches

import shutil  # noqa: E402


@pytest.fixture
def corpus_home(musique_corpus, tmp_path):
    """A fresh APPLIANCE_HOME with the musique corpus in it and nothing cached."""
    settings, corpus = musique_corpus
    home = tmp_path / "home"
    shutil.copytree(settings.home / "lancedb", home / "lancedb")
    return home, corpus

# ========================================================================= end pipeline

# ============================================================================ network guard
# The suite talks to nothing but loopback: any other connection from the test process fails
# at once with NetworkBlocked (tests/test_no_network.py checks the guard itself).

import ipaddress  # noqa: E402
import socket  # noqa: E402


class NetworkBlocked(ConnectionRefusedError):
    """A test tried to connect beyond loopback."""


def _is_loopback(address) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths and the like never leave the machine
    host = address[0]
    if host in ("localhost",):
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@pytest.fixture(autouse=True, scope="session")
def _loopback_only():
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise NetworkBlocked(f"test network guard: connection to {address!r} refused (loopback only)")
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise NetworkBlocked(f"test network guard: connection to {address!r} refused (loopback only)")
        return real_connect_ex(self, address)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    yield
    socket.socket.connect, socket.socket.connect_ex = real_connect, real_connect_ex

# ========================================================================= end network guard
