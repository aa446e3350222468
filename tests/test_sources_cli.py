"""`appliance search` and `appliance corpus ...` through the real click entry point."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import appliance
from sources_harness import free_port

# The CLI package imports every command module; it can only be loaded once they all exist
# (as files, or already loaded).
_CLI = Path(appliance.__file__).parent / "cli"
_MISSING = [f"appliance/cli/{n}.py" for n in ("models", "doctor")
            if not (_CLI / f"{n}.py").exists() and f"appliance.cli.{n}" not in sys.modules]
if _MISSING:
    pytest.skip(f"appliance.cli cannot load yet: {', '.join(_MISSING)} missing", allow_module_level=True)

from appliance.cli import main  # noqa: E402


@pytest.fixture
def run(sources_settings, tmp_path):
    """Invoke the CLI with an empty config file and APPLIANCE_HOME set by sources_settings."""
    config = tmp_path / "cli-config.toml"
    config.write_text('[fetch]\nallow_hosts = ["127.0.0.1"]\n', encoding="utf-8")

    def invoke(*args: str):
        runner = CliRunner()
        return runner.invoke(main, ["--config", str(config), *args], catch_exceptions=False)

    return invoke


def test_corpus_commands(run, tmp_path, monkeypatch):
    monkeypatch.delenv("APPLIANCE_SEARXNG_URL", raising=False)
    doc = tmp_path / "notes.md"
    doc.write_text("# Basalt\n\nColumnar basalt forms hexagonal prisms as lava cools.\n", encoding="utf-8")
    added = run("corpus", "add", str(doc), "--name", "notes")
    assert added.exit_code == 0, added.output
    assert "corpus notes: 1 files (1 added, 0 updated, 0 unchanged, 0 removed); 1 documents (1 added" in added.stdout
    assert json.loads(run("corpus", "list", "--json").stdout) == ["notes"]
    stats = json.loads(run("corpus", "stats", "notes", "--json").stdout)
    assert stats["documents"] == 1 and stats["fts_indexed"]
    again = json.loads(run("corpus", "add", str(doc), "--name", "notes", "--json").stdout)
    assert again["unchanged"] == 1 and again["chunks_added"] == 0

    found = run("search", "hexagonal prisms", "--backend", "corpus", "--corpus", "notes", "--json")
    data = json.loads(found.stdout)
    assert data["backend"] == "corpus" and data["hits"][0]["url"] == "corpus://notes/notes.md"
    table = run("search", "hexagonal prisms", "--corpus", "notes", "--limit", "1")
    assert "  1. Basalt" in table.stdout and "corpus://notes/notes.md" in table.stdout

    assert run("corpus", "remove", "notes").exit_code == 0
    gone = run("corpus", "stats", "notes")
    assert gone.exit_code == 5 and gone.stderr.startswith("error: corpus 'notes' does not exist")
    assert "Traceback" not in gone.output


@pytest.mark.searxng
def test_search_through_searxng(run, searxng, fixture_site):
    result = run("search", "subglacial lake", "--searxng-url", searxng.url, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["backend"] == "searxng"
    assert data["hits"][0]["url"] == f"{fixture_site.url}/pages/vostok.html"
    warned = run("search", "!fxb lake", "--searxng-url", searxng.url)
    assert "engine fixturebroken did not respond" in warned.stderr


def test_search_errors_are_one_line(run):
    url = f"http://127.0.0.1:{free_port()}"
    result = run("search", "anything", "--searxng-url", url)
    assert result.exit_code == 5
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to SearXNG")
    missing = run("search", "anything", "--backend", "corpus", "--corpus", "absent")
    assert missing.exit_code == 5 and "appliance corpus add" in missing.stderr


def test_help_texts():
    runner = CliRunner()
    for args in (["search", "--help"], ["corpus", "--help"], ["corpus", "add", "--help"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0 and "Usage" in result.output


def test_search_prints_hostile_hits_as_inert_lines(run, monkeypatch):
    """Titles, snippets and engine names come from SearXNG or a page: terminal escapes, bidi
    overrides and newlines in them must not reach the terminal."""
    from appliance.contracts import Hit
    from appliance.sources import base

    hostile = Hit(url="http://example.org/a\x1b[2J", title="Fine\x1b]0;pwned\x07 title\nsecond line",
                  snippet="evil \u202eelif.exe\r\x08\x08", engine="bad\x1b[31mengine", rank=1)

    class Hostile:
        name = "searxng"
        unresponsive_engines = {"x\x1b[5m": "timeout\x07"}

        def search(self, query, limit):
            return [hostile]

    monkeypatch.setattr(base, "make_backend", lambda settings, *a, **k: Hostile())
    result = run("search", "anything")
    assert result.exit_code == 0, result.output
    for text in (result.stdout, result.stderr):
        assert not any(ch in text for ch in "\x1b\x07\x08\r\u202e"), repr(text)
    lines = result.stdout.splitlines()
    assert lines[0] == "  1. Fine ]0;pwned title second line"
    assert "evil elif.exe" in result.stdout and "warning: SearXNG engine x [5m did not respond" in result.stderr
