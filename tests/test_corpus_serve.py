"""`appliance corpus serve`: a local corpus over HTTP, searched directly and through a real
SearXNG on loopback (the shipped config/searxng/corpus.yml), and its refusals of bad input."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from appliance.sources.corpus import Corpus
from appliance.sources.extract import extract_html
from appliance.sources.serve import MAX_PAGE, CorpusServer, passage_id_from_url, passage_url
from conftest import MUSIQUE_CORPUS

# Passages whose text trafilatura might not give back as stored: non-breaking spaces,
# zero-width no-break spaces, double spaces, markup characters.
ODD = [
    {"id": "odd-nbsp", "title": "Devon Falls", "text": "Devon Falls is a waterfall 6\u00a0km west of Talawakele; it is 97 metres high."},
    {"id": "odd-bom", "title": "Richmond", "text": "Richmond is located at 37\u00b032\u2032N 77\u00b028\u2032W\ufeff / \ufeff37.533\u00b0N, by the James River."},
    {"id": "odd-markup", "title": "Tags <b> & such", "text": "A passage with <script>alert(1)</script> & \"quotes\", written as  text,  not markup."},
]
LONG_MD = "# Glacier notes\n\n" + "\n\n".join(
    ("Glaciers move because ice deforms under its own weight and slides over its bed. " * 5).strip()
    for _ in range(4))


def _norm(text: str) -> str:
    """Whitespace folded and zero-width marks dropped: what trafilatura does to any page."""
    return " ".join(text.replace("\ufeff", "").replace("\u200b", "").split())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small corpus (40 musique passages, the odd ones, a chunked markdown file) served on a
    free loopback port; yields (server, corpus, log lines)."""
    from conftest import loopback_overrides, make_settings

    home = tmp_path_factory.mktemp("serve-home")
    docs = tmp_path_factory.mktemp("serve-docs")
    records = [json.loads(line) for line in MUSIQUE_CORPUS.read_text(encoding="utf-8").splitlines()[:40]]
    (docs / "passages.jsonl").write_text("\n".join(json.dumps(r) for r in records + ODD) + "\n", encoding="utf-8")
    (docs / "notes").mkdir()
    (docs / "notes" / "glaciers.md").write_text(LONG_MD, encoding="utf-8")
    settings = make_settings(home, **loopback_overrides(**{"corpus.chunk_chars": 500}))
    corpus = Corpus(settings, "served")
    corpus.add([docs / "passages.jsonl", docs / "notes"])
    lines: list[str] = []
    server = CorpusServer(settings, "served", port=0, log=lines.append).start()
    yield server, corpus, lines
    server.stop()


def test_search_and_passage_round_trip(served):
    server, corpus, _ = served
    with httpx.Client(trust_env=False, timeout=30) as client:
        answer = client.get(f"{server.url}/search", params={"q": "Journal of Psychotherapy Integration"})
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        data = answer.json()
        assert data["page"] == 1 and data["per_page"] == 10 and len(data["results"]) == 10
        first = data["results"][0]
        assert set(first) == {"id", "title", "url", "content"}
        assert first["url"] == passage_url(server.url, "served", first["id"])
        assert passage_id_from_url(first["url"]) == ("served", first["id"])
        assert first["content"] == " ".join(corpus.get(first["id"]).text.split())

        second = client.get(f"{server.url}/search", params={"q": "Journal of Psychotherapy Integration", "page": 2}).json()
        assert second["page"] == 2 and second["results"]
        assert not {r["id"] for r in second["results"]} & {r["id"] for r in data["results"]}

        # Every passage page gives back, through trafilatura, exactly the stored text.
        for record_id in [r["id"] for r in data["results"]] + [o["id"] for o in ODD]:
            page = client.get(passage_url(server.url, "served", record_id))
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            record = corpus.get(record_id)
            extracted = extract_html(page.content, url=str(page.url))
            assert _norm(extracted.text) == _norm(record.text), record_id
            assert extracted.title == " ".join(record.title.split())
        assert "<script>" not in client.get(passage_url(server.url, "served", "odd-markup")).text

        # A chunk of a longer document: its id holds '/' and '#', and maps back to the document.
        chunk = client.get(f"{server.url}/search", params={"q": "glaciers slide over their bed"}).json()["results"][0]
        assert chunk["id"].startswith("notes/glaciers.md#")
        assert "%23" in chunk["url"] and "%2F" in chunk["url"]
        assert passage_id_from_url(chunk["url"]) == ("served", chunk["id"])
        text = extract_html(client.get(chunk["url"]).content).text
        assert _norm(text) == _norm(corpus.get(chunk["id"]).text)
    assert passage_id_from_url("http://example.org/pages/x.html") is None


def test_bad_input_is_a_4xx_and_one_log_line(served, capfd):
    server, _, lines = served
    before = len(lines)
    cases = {
        "/search?q=": 400, "/search": 400, "/search?q=%20%20": 400,
        "/search?q=lake&page=0": 400, "/search?q=lake&page=abc": 400, "/search?q=lake&page=-1": 400,
        f"/search?q=lake&page={MAX_PAGE + 1}": 400, "/search?q=lake&page=99999999999999999999999": 400,
        "/search?q=" + "w" * 5000: 400,
        "/corpus/served/no-such-passage": 404, "/corpus/other/p0001": 404, "/corpus/served/": 404,
        "/nothing-here": 404, "/corpus/served/%ff%fe": 404, "/corpus/served/%00": 404,
        "/corpus/served/it%27s%22": 404, "/search?q=lake&page=%C2%B2": 400, "/search?q=%00": 200,
    }
    with httpx.Client(trust_env=False, timeout=30) as client:
        for path, status in cases.items():
            answer = client.get(server.url + path)
            assert answer.status_code == status, (path, answer.text)
            assert ("error" in answer.json()) == (status != 200)
        assert client.post(f"{server.url}/search", data={"q": "lake"}).status_code == 405
        assert client.get(f"{server.url}/search", params={"q": "lake"}).status_code == 200

    # A 100 KB query (too long for httpx to send): http.server refuses the request line itself.
    huge = _raw(server, b"GET /search?q=" + b"lake+" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert huge.startswith(b"HTTP/1.") and huge.split()[1].startswith(b"4"), huge[:80]
    # A client that hangs up mid-request, and raw garbage instead of HTTP.
    _raw(server, b"GET /search?q=lake HTTP/1.1\r\nHost: x\r\nAccept: ")
    assert b"Error code: 400" in _raw(server, b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
    with httpx.Client(trust_env=False, timeout=30) as client:
        assert client.get(f"{server.url}/healthz").text == "ok\n"

    logged = lines[before:]
    assert len(logged) >= len(cases) + 3
    assert all("\n" not in line for line in logged)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err + "\n".join(logged)


def _raw(server, request: bytes) -> bytes:
    """Send raw bytes, close our side, and read the whole answer."""
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before taking it all: its answer is still read
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_unknown_corpus_and_busy_port(served, sources_settings):
    from appliance.errors import CorpusError, UsageError

    server, corpus, _ = served
    with pytest.raises(CorpusError, match="does not exist"):
        CorpusServer(sources_settings, "absent", port=0)
    with pytest.raises(UsageError, match="cannot listen"):
        CorpusServer(corpus.settings, "served", port=int(server.url.rsplit(":", 1)[1]))


@pytest.mark.searxng
def test_searxng_federates_the_served_corpus(served, tmp_path):
    """The shipped config/searxng/corpus.yml in a real SearXNG: its results are the corpus's
    passages, and the appliance's fetcher reads each as the stored text."""
    import sources_harness
    from appliance.sources.fetch import Fetcher
    from appliance.sources.searxng import SearxngBackend

    server, corpus, _ = served
    searxng = sources_harness.start_corpus_searxng(tmp_path / "searxng", server.url)
    try:
        backend = SearxngBackend(searxng.url, timeout=15)
        hits = backend.search("Journal of Psychotherapy Integration", 10)
        assert hits and not backend.unresponsive_engines, searxng.log_tail()
        assert all(h.engine == "corpus" for h in hits)
        ids = [passage_id_from_url(h.url) for h in hits]
        assert all(found and found[0] == "served" for found in ids)
        direct = httpx.get(f"{server.url}/search", params={"q": "Journal of Psychotherapy Integration"},
                           trust_env=False, timeout=30).json()["results"]
        assert ids[0][1] == direct[0]["id"]
        assert len(backend.search("Journal of Psychotherapy Integration", 20, page=2)) > 0

        with Fetcher(corpus.settings) as fetcher:
            for hit in hits[:3]:
                source = fetcher.fetch(hit.url)
                assert source.ok, source.error
                assert _norm(source.text) == _norm(corpus.get(passage_id_from_url(hit.url)[1]).text)
    finally:
        searxng.stop()
    assert "Traceback" not in Path(searxng.log_path).read_text(errors="replace")
