"""A small client for SearXNG's JSON API (GET /search?q=...&format=json).

Each way a SearXNG instance commonly fails gets its own one-line message that says what to
do, because "JSON decode error" after a 403 is the most common complaint of users of
SearXNG-based research tools.
"""

from __future__ import annotations

import threading
from typing import Any, Optional
from urllib.parse import urlsplit

import httpx

from ..config import Settings
from ..contracts import Hit
from ..errors import SearchError

SETTINGS_EXAMPLE = "config/searxng/settings.yml"


class SearxngBackend:
    """Search through a SearXNG instance. Thread-safe.

    ``unresponsive_engines`` maps each engine SearXNG reported as unresponsive during this
    backend's life to the last reason it gave (for the run's stats).
    """

    name = "searxng"

    def __init__(self, url: str, timeout: float = 15.0, categories: str = "", language: str = "",
                 time_range: str = "", client: Optional[httpx.Client] = None):
        self.url = _check_url(url)
        self.timeout = float(timeout)
        self.categories = categories
        self.language = language
        self.time_range = time_range
        self.unresponsive_engines: dict[str, str] = {}
        self._lock = threading.Lock()
        # trust_env=False: an HTTP(S)_PROXY in the environment must not carry the queries
        # of a private, local instance off the machine.
        self._client = client or httpx.Client(trust_env=False, follow_redirects=False,
                                              headers={"Accept": "application/json"})

    @classmethod
    def from_settings(cls, settings: Settings, url: Optional[str] = None) -> "SearxngBackend":
        """A backend for ``url``, else ``searxng.url`` (which APPLIANCE_SEARXNG_URL sets)."""
        conf = settings.searxng
        chosen = url or conf.url
        if not chosen:
            raise SearchError("no SearXNG URL is configured",
                              hint="set searxng.url in config/appliance.toml, APPLIANCE_SEARXNG_URL, or --searxng-url")
        return cls(chosen, timeout=conf.timeout, categories=conf.categories,
                   language=conf.language, time_range=conf.time_range)

    def search(self, query: str, limit: int, page: int = 1) -> list[Hit]:
        """Up to ``limit`` hits for ``query`` from one result page, best first (rank 1).

        One page only: asking for more makes SearXNG query every engine again, and a page
        holds more hits than a research query uses. Raises SearchError when the instance
        cannot be reached or answers wrongly; no results is not an error.
        """
        hits: list[Hit] = []
        seen: set[str] = set()
        for result in self._results(query, page):
            url = str(result.get("url") or "")
            if not url or url in seen:
                continue
            seen.add(url)
            hits.append(_hit(result, len(hits) + 1, query))
            if len(hits) >= limit:
                break
        return hits

    def close(self) -> None:
        """Release the HTTP connections."""
        self._client.close()

    def _results(self, query: str, page: int) -> list[dict[str, Any]]:
        params = {"q": query, "format": "json", "pageno": page}
        for key in ("categories", "language", "time_range"):
            value = getattr(self, key)
            if value:
                params[key] = value
        data = _get_json(self._client, f"{self.url}/search", params, self.timeout, self.url)
        self._note_unresponsive(data.get("unresponsive_engines") or [])
        results = data.get("results")
        if not isinstance(results, list):
            raise SearchError(f"SearXNG at {self.url} answered JSON without a results list",
                              hint="is this URL a SearXNG instance?")
        return [r for r in results if isinstance(r, dict)]

    def _note_unresponsive(self, entries: list) -> None:
        with self._lock:
            for entry in entries:
                if isinstance(entry, (list, tuple)) and entry:
                    name = str(entry[0])
                    self.unresponsive_engines[name] = str(entry[1]) if len(entry) > 1 else ""
                elif isinstance(entry, str):
                    self.unresponsive_engines[entry] = ""


def ping(url: str, timeout: float = 5.0) -> None:
    """Check that ``url`` is a SearXNG instance with JSON output enabled.

    Asks for a JSON search with an empty query: SearXNG checks the output format first
    (403 when JSON is disabled) and then answers "No query" as JSON (HTTP 400) without
    asking any engine, so nothing leaves the machine. Raises SearchError saying what to do.
    For ``appliance doctor`` and the check before a run.
    """
    base = _check_url(url)
    with httpx.Client(trust_env=False, follow_redirects=False) as client:
        try:
            response = client.get(f"{base}/search", params={"q": "", "format": "json"}, timeout=timeout)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, base, timeout) from None
    if response.status_code != 400:  # 400 is the expected "No query" answer
        _check_status(response, base)
    if _json_object(response) is None:
        raise SearchError(f"{base} does not answer like SearXNG (got {_answer_kind(response)} instead of a JSON object)",
                          hint="is this URL a SearXNG instance? use its base URL")


_URL_HINT = "use the form http://127.0.0.1:8888 in searxng.url, APPLIANCE_SEARXNG_URL or --searxng-url"


def _check_url(url: str) -> str:
    """The base URL to use, or a SearchError saying what is wrong with it (one line, whatever
    the flaw: urllib and httpx raise ValueError for some and accept others until the first
    request)."""
    text = (url or "").strip().rstrip("/")
    problem = _url_problem(text)
    if problem == "scheme":
        raise SearchError(f"SearXNG URL {url!r} is not an http(s) URL", hint=_URL_HINT)
    if problem:
        raise SearchError(f"SearXNG URL {url!r} is malformed: {problem}", hint=_URL_HINT)
    if text.endswith("/search"):  # a common paste: the search page instead of the base URL
        text = text[: -len("/search")]
    return text


def _url_problem(text: str) -> str:
    """What is wrong with ``text`` as a SearXNG base URL ("scheme" for a missing or other
    scheme), or "" when nothing is."""
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed or stray bracket
        return "a bracketed IPv6 address is not closed" if "IPv6" in str(exc) else str(exc)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "scheme"
    try:
        port = parts.port
    except ValueError:
        return "the port must be a number from 1 to 65535"
    if port == 0:
        return "the port must be a number from 1 to 65535"
    if not parts.hostname:
        return "it names no host"
    if any(ch.isspace() for ch in parts.netloc):
        return "the host contains a space"
    try:
        httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        return str(exc) or type(exc).__name__
    return ""


def _get_json(client: httpx.Client, endpoint: str, params: dict, timeout: float, base: str) -> dict:
    """GET and decode, turning each failure into the message that says how to fix it."""
    try:
        response = client.get(endpoint, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        raise _transport_error(exc, base, timeout) from None
    _check_status(response, base)
    data = _json_object(response)
    if data is None:
        raise SearchError(f"SearXNG at {base} did not answer JSON (got {_answer_kind(response)})",
                          hint="is this URL a SearXNG instance? use its base URL, not a page of it")
    return data


def _json_object(response: httpx.Response) -> dict | None:
    """The body as a JSON object, or None for anything else (HTML, garbage, a JSON list)."""
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _answer_kind(response: httpx.Response) -> str:
    """What came back instead of a JSON object, for the message ("got application/json" would
    say nothing when the body under that type does not parse)."""
    kind = response.headers.get("content-type", "unknown type").split(";")[0].strip() or "unknown type"
    return f"malformed {kind}" if "json" in kind.lower() else kind


def _transport_error(exc: httpx.HTTPError, base: str, timeout: float) -> SearchError:
    if isinstance(exc, httpx.ConnectError):
        return SearchError(f"cannot connect to SearXNG at {base}: {_short(exc)}",
                           hint="is it running? start it, or point searxng.url / APPLIANCE_SEARXNG_URL / --searxng-url at where it listens")
    if isinstance(exc, httpx.TimeoutException):
        return SearchError(f"SearXNG at {base} did not answer within {timeout:g} s",
                           hint="check that it is running and its engines respond, or raise searxng.timeout")
    return SearchError(f"request to SearXNG at {base} failed: {_short(exc)}")


def _check_status(response: httpx.Response, base: str) -> None:
    status = response.status_code
    if status == 403:
        raise SearchError(f"SearXNG at {base} refused JSON output (HTTP 403)",
                          hint=f"add json to search.formats in its settings.yml, as in {SETTINGS_EXAMPLE}, and restart it")
    if status == 429:
        raise SearchError(f"SearXNG at {base} rate-limited the request (HTTP 429)",
                          hint=f"turn its limiter off for a private instance (server.limiter: false, as in {SETTINGS_EXAMPLE})")
    if 300 <= status < 400:
        where = response.headers.get("location", "elsewhere")
        raise SearchError(f"SearXNG at {base} redirected the search to {where}",
                          hint="set searxng.url to the instance's base URL (check its server.base_url)")
    if status >= 400:
        raise SearchError(f"SearXNG at {base} answered HTTP {status} {response.reason_phrase}",
                          hint="see the SearXNG log for the cause")


def _hit(result: dict[str, Any], rank: int, query: str) -> Hit:
    engine = result.get("engine") or ",".join(result.get("engines") or [])
    return Hit(url=str(result["url"]), title=str(result.get("title") or ""),
               snippet=" ".join(str(result.get("content") or "").split()),
               engine=str(engine), rank=rank, query=query)


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:200]
