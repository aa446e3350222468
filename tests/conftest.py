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

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import sources_harness  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# Every prompt carries the date a run is for, so the small model's runs would change with the
# calendar: the tests pin it (every process they start inherits it; app_env keeps it).
TEST_TODAY = "2026-12-02"
os.environ["APPLIANCE_TODAY"] = TEST_TODAY


def read_jsonl(path: Path) -> list[dict]:
    """The records of a run-folder log (a line cut by a kill would fail loudly here)."""
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def cached_calls(home: Path) -> int:
    """Rows in the state folder's call cache (0 while it does not exist or is locked)."""
    import sqlite3

    path = home / "cache" / "calls.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM calls").fetchone()[0]
    except sqlite3.Error:
        return 0
# The demo set that ships with the project (data/demo: the musique-dev passages and five of its
# questions, CC BY 4.0): every test that searches a real corpus uses it, so a bare clone passes.
DEMO_DIR = REPO / "data" / "demo"
MUSIQUE_CORPUS = DEMO_DIR / "corpus.jsonl"
# The team's full bench folder, only for tests about the bench itself: TEST_BENCH_DIR
# (`make test BENCH=DIR` sets it), else beside the checkout; such tests skip without it.
BENCH_DIR = Path(os.environ.get("TEST_BENCH_DIR") or REPO.parent / "shared" / "bench" / "musique-dev")


# Tests run on the fast test model, named for every role: the manifest's default (the 1.5B
# model) is for real runs, benchmarks and the few tests marked slow that name it themselves.
TEST_MODEL = "smollm2-135m"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
ROLES = ("planner", "extractor", "verifier", "writer")
TEST_MODEL_SETTINGS = {f"models.{role}": TEST_MODEL for role in ROLES}
TEST_MODEL_ENV = {f"APPLIANCE_MODELS_{role.upper()}": TEST_MODEL for role in ROLES}


def make_settings(home: Path, **overrides):
    """Settings for tests: the packaged defaults, the test model for every role, then
    ``overrides`` ({"fetch.budget": 3}), APPLIANCE_HOME=home, and no user config file or
    environment variables."""
    from appliance.config import load_settings

    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty-config.toml"
    empty.write_text("", encoding="utf-8")
    return load_settings(empty, env={"APPLIANCE_HOME": str(home)},
                         overrides={**TEST_MODEL_SETTINGS, **overrides})


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
        pytest.fail(f"the demo corpus is missing at {MUSIQUE_CORPUS}: restore it with git checkout -- data/demo")
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
# The suite talks to nothing but loopback: any other connection, and any DNS lookup of a name
# other than localhost, fails at once with NetworkBlocked (socket.gaierror for lookups), in
# the test process and in every Python child process (SearXNG, `python -m appliance` runs,
# batch workers), which load tests/netguard/sitecustomize.py through PYTHONPATH.
# tests/test_no_network.py checks the guard itself.


from netguard import loopback_guard  # noqa: E402

NetworkBlocked = loopback_guard.NetworkBlocked
NETGUARD_DIR = Path(__file__).resolve().parent / "netguard"


@pytest.fixture(autouse=True, scope="session")
def _test_model_for_every_role():
    """CLI runs in tests (in-process or child processes that inherit the environment) use the
    fast test model unless a test names another."""
    saved = {k: os.environ.get(k) for k in TEST_MODEL_ENV}
    os.environ.update(TEST_MODEL_ENV)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True, scope="session")
def _loopback_only():
    uninstall = loopback_guard.install()
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(NETGUARD_DIR)] + ([old_path] if old_path else []))
    yield
    if old_path is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old_path
    uninstall()

# ========================================================================= end network guard

# ============================================================================ llm (issue 2)
# The real default model for engine and `appliance models` tests. `make install` fetches it,
# so a missing file fails the tests loudly instead of skipping them.
#   MODEL_MANIFEST, MODEL_FILE   the committed manifest and the default GGUF
#   llm_settings(home, **ovr)    settings for model tests: APPLIANCE_HOME=home, the repo's manifest
#   llm_pool                     a session ModelPool on the real model (n_ctx 2048, call cache on)
#   llm_engine                   that pool's engine (the default model serves every role)

MODEL_MANIFEST = REPO / "models" / "models.toml"
MODEL_FILE = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def require_model_file() -> Path:
    if not MODEL_FILE.is_file():
        pytest.fail(f"{MODEL_FILE} is missing: run `make models` (or `make install`)", pytrace=False)
    return MODEL_FILE


def llm_settings(home: Path, **overrides):
    """Settings for model tests: packaged defaults, APPLIANCE_HOME=home, the repo's manifest."""
    values = {"models.manifest": str(MODEL_MANIFEST), "llm.n_ctx": 2048}
    values.update(overrides)
    return make_settings(home, **values)


@pytest.fixture(scope="session")
def llm_pool(tmp_path_factory):
    from appliance.llm import ModelPool

    require_model_file()
    pool = ModelPool(llm_settings(tmp_path_factory.mktemp("llm-home")))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def llm_engine(llm_pool):
    return llm_pool.for_role("extractor")

# ========================================================================= end llm (issue 2)

# ============================================================================ faults (issue 7)
#   cli_with_script(script)   CLI runs in this test use a scripted engine (tests/fakes.py) in
#                             every role instead of loading the model; returns the engine.
#   Helpers of the fault tests live in tests/fault_helpers.py.


@pytest.fixture
def cli_with_script(monkeypatch):
    """Make CLI runs use a scripted engine in every role (the real model is not loaded)."""
    from appliance.pipeline.parts import Models
    from fakes import FakeEngine

    def use(script: dict) -> FakeEngine:
        engine = FakeEngine(script)
        monkeypatch.setattr("appliance.pipeline.parts.load_models", lambda settings: Models(planner=engine, extractor=engine, verifier=engine, writer=engine))
        return engine
    return use

# ========================================================================= end faults
