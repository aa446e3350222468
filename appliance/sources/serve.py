"""A local corpus over HTTP, in the shape SearXNG's ``json_engine`` federates.

``GET /search?q=QUERY&page=N`` answers ``{"query", "page", "per_page", "results": [{"id",
"title", "url", "content"}]}`` from the corpus's hybrid search; ``GET /corpus/NAME/ID`` is the
passage as a bare HTML page (its title in ``<title>``, its paragraphs in ``<article>``), so any
tool that searches through SearXNG and fetches pages reads the passage text itself, and a
passage URL maps back to its id (``passage_id_from_url``). ``GET /healthz`` answers ``ok``.

Bad input is a 4xx with a one-line JSON reason, and every request is one log line: the server
never prints a traceback (an unexpected fault is a 500 and one line naming it).
"""

from __future__ import annotations

import html
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..config import Settings
from ..errors import ApplianceError, CorpusError, UsageError
from .corpus import Corpus, check_name

PER_PAGE = 10
# Deeper pages cost a bigger candidate pool per query; nobody reads a corpus's 11th page.
MAX_PAGE = 10
# Longer queries are refused before they reach the full-text parser (real ones are short).
# Past 64 KiB a request line is refused by http.server itself (414) before our code runs.
MAX_QUERY_CHARS = 1000
PASSAGE_PREFIX = "/corpus/"
# A Host header is echoed into result URLs only when it looks like host[:port].
_HOST = re.compile(r"^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")

Log = Callable[[str], None]


class BadRequest(ApplianceError):
    """A request the server refuses; ``status`` is its HTTP code."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def passage_url(base: str, corpus: str, passage: str) -> str:
    """The URL of a passage on a server at ``base``: ``BASE/corpus/NAME/<quoted id>``."""
    return f"{base.rstrip('/')}{PASSAGE_PREFIX}{corpus}/{quote(passage, safe='')}"


def passage_id_from_url(url: str) -> Optional[tuple[str, str]]:
    """(corpus, passage id) of a passage URL this server made (``.../corpus/NAME/ID``), or
    None for any other URL. The id is the stored one: a chunk keeps its ``#n``."""
    try:
        path = urlsplit(url.strip()).path
    except ValueError:
        return None
    if not path.startswith(PASSAGE_PREFIX):
        return None
    name, _, rest = path[len(PASSAGE_PREFIX):].partition("/")
    passage = unquote(rest)
    if not name or not passage:
        return None
    return name, passage


def passage_html(title: str, text: str) -> str:
    """A page whose main text, as trafilatura extracts it, is ``text`` (whitespace aside).

    No heading, navigation or footer: the title goes to ``<title>`` only, so the extracted text
    is the passage and nothing else. Paragraphs (blank-line separated) become ``<p>``.
    """
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    body = "\n".join(f"<p>{html.escape(p, quote=False)}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title, quote=False)}"
            f"</title></head>\n<body><article>\n{body}\n</article></body></html>\n")


@dataclass
class SearchPage:
    """One page of search results, as the JSON endpoint sends it."""

    query: str
    page: int
    results: list[dict]

    def as_json(self) -> bytes:
        return json.dumps({"query": self.query, "page": self.page, "per_page": PER_PAGE,
                           "results": self.results}, ensure_ascii=False).encode("utf-8")


class CorpusService:
    """What the HTTP handler asks: searches and passages of one corpus (no HTTP here)."""

    def __init__(self, settings: Settings, name: str):
        self.name = check_name(name)
        self.corpus = Corpus(settings, self.name)
        if not self.corpus.exists():
            raise CorpusError(f"corpus {self.name!r} does not exist",
                              hint=f"add documents first: appliance corpus add PATH --name {self.name}")

    def search(self, params: dict[str, list[str]], base: str) -> SearchPage:
        """One page of hits; raises BadRequest (400) for a missing, long or odd query/page."""
        query = " ".join((params.get("q") or [""])[0].split())
        if not query:
            raise BadRequest(400, "empty query: give q=WORDS")
        if len(query) > MAX_QUERY_CHARS:
            raise BadRequest(400, f"query of {len(query)} characters: at most {MAX_QUERY_CHARS}")
        raw_page = (params.get("page") or params.get("pageno") or ["1"])[0].strip()
        if not re.fullmatch(r"[0-9]{1,4}", raw_page) or not 1 <= int(raw_page) <= MAX_PAGE:
            raise BadRequest(400, f"page must be a whole number from 1 to {MAX_PAGE}")
        page = int(raw_page)
        records = self.corpus.ranked(query, page * PER_PAGE)[(page - 1) * PER_PAGE:]
        # The content is the whole passage (a chunk, a few hundred words at most): a tool that
        # reads only SearXNG's snippets then still reads the passage.
        results = [{"id": r.id, "title": r.title or r.id, "url": passage_url(base, self.name, r.id),
                    "content": " ".join(r.text.split())} for r in records]
        return SearchPage(query=query, page=page, results=results)

    def passage(self, path: str) -> str:
        """The HTML page of the passage at ``path``; BadRequest 404 when there is none."""
        found = passage_id_from_url(path)
        if found is None or found[0] != self.name or not found[1].isprintable():
            raise BadRequest(404, f"no such page (passages are under {PASSAGE_PREFIX}{self.name}/ID)")
        try:
            record = self.corpus.get(found[1])
        except CorpusError:
            raise BadRequest(404, f"no passage {found[1]!r} in corpus {self.name!r}") from None
        return passage_html(record.title or record.id, record.text)


# How long a closing connection still reads (and drops) what its client sends.
LINGER_SECONDS = 1.0


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"
    server_version = "appliance-corpus"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        started = time.monotonic()
        status, note = 500, ""
        try:
            status, note = self._route()
        except BadRequest as exc:
            status, note = exc.status, exc.message
            self._send(exc.status, json.dumps({"error": exc.message}).encode("utf-8"), "application/json")
        except (BrokenPipeError, ConnectionResetError):
            status, note = 499, "client went away"
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the server
            status, note = 500, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            try:
                self._send(500, json.dumps({"error": "internal error"}).encode("utf-8"), "application/json")
            except OSError:
                pass
        elapsed = 1000 * (time.monotonic() - started)
        outcome = f"{status} {note}" if note else str(status)
        self.server.log(f"{self.client_address[0]} GET {_short(self.path)} {outcome} ({elapsed:.0f} ms)")

    def _only_get(self) -> None:
        # http.server answers unknown methods with 501; a method we do not take is the client's error.
        self.send_error(405, "only GET is served")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _only_get  # noqa: N815

    def _route(self) -> tuple[int, str]:
        parts = urlsplit(self.path)
        if parts.path in ("/search", "/api/search"):
            page = self.server.service.search(parse_qs(parts.query, keep_blank_values=True), self._base())
            self._send(200, page.as_json(), "application/json")
            return 200, f"{len(page.results)} results"
        if parts.path.startswith(PASSAGE_PREFIX):
            self._send(200, self.server.service.passage(parts.path).encode("utf-8"), "text/html; charset=utf-8")
            return 200, ""
        if parts.path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
            return 200, ""
        raise BadRequest(404, "not found: use /search?q=WORDS&page=N or /corpus/NAME/ID")

    def _base(self) -> str:
        """The base of result URLs: --base-url, else the Host the client used, else the bound address."""
        if self.server.base_url:
            return self.server.base_url
        host = str(self.headers.get("Host") or "").strip()
        if not _HOST.match(host):
            bound, port = self.server.server_address[:2]
            name = bound.decode() if isinstance(bound, (bytes, bytearray)) else str(bound)
            host = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
        return f"http://{host}"

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        # http.server's own refusals (414 for a huge request line, 400 for garbage) and ours of
        # other methods (405): one line with what was asked.
        asked = _short(getattr(self, "requestline", "") or "-")
        self.server.log(f"{self.client_address[0]} {asked} {format % args}")

    def log_request(self, code="-", size="-") -> None:
        pass  # do_GET logs one line per request itself, with its outcome

    def finish(self) -> None:
        # Lingering close: a request refused before it was read whole (a request line over
        # http.server's 64 KB limit) leaves bytes unread, and closing a socket on unread bytes
        # sends a reset that can destroy the error answer before the client reads it. So our
        # side is shut for writing and what the client still sends is read and dropped, for at
        # most LINGER_SECONDS.
        super().finish()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_SECONDS)
            deadline = time.monotonic() + LINGER_SECONDS
            while time.monotonic() < deadline and self.connection.recv(65536):
                pass
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    service: CorpusService
    base_url: str
    log: Log

    def handle_error(self, request, client_address) -> None:
        # socketserver would print a traceback; a connection fault is one line instead.
        import sys

        exc = sys.exc_info()[1]
        self.log(f"{client_address[0]} connection error: {type(exc).__name__}")


class CorpusServer:
    """``corpus serve``: a threaded HTTP server over one corpus. ``start`` runs it in a thread
    (tests, scripts); ``serve_forever`` blocks (the CLI)."""

    def __init__(self, settings: Settings, name: str, host: str = "127.0.0.1", port: int = 8890,
                 base_url: str = "", log: Log = lambda line: None, warm_up: bool = False):
        self.service = CorpusService(settings, name)
        if warm_up:
            # Before listening: a client that connects during a slow first search would time out.
            self.service.corpus.search("warm up", 1)
        try:
            self.httpd = _Server((host, int(port)), _Handler)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                             hint="choose another --port, or stop what uses it") from None
        self.httpd.service = self.service
        self.httpd.base_url = base_url.rstrip("/")
        self.httpd.log = log
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        """The server's base URL as bound (an IPv6 host in brackets)."""
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, (bytes, bytearray)) else str(host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def serve_forever(self) -> None:
        """Serve until interrupted."""
        self.httpd.serve_forever()

    def start(self) -> "CorpusServer":
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="corpus-serve")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
        self.httpd.server_close()


def _short(path: str) -> str:
    """A request path for the log: one line, at most 200 characters."""
    flat = "".join(ch if ch.isprintable() else "?" for ch in path)
    return flat if len(flat) <= 200 else flat[:200] + "..."
