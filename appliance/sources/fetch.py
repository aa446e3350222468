"""Fetch + extract: one URL in, one Source out, always.

A page that fails (refused by the egress policy, unreachable, too slow, too big, not text) is
a recorded outcome (``Source.ok = False`` with the reason), never an exception: one bad page
must not end a run. Pages are cached on disk by normalised URL, so a rerun replays them.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urljoin

import httpx

from ..atomic import write_atomic
from ..config import Settings, state_dir
from ..contracts import Source
from ..errors import ApplianceError, FetchError
from .egress import AllowList, IPAddress, checked_addresses
from .extract import decode_text, extract_html, extract_plain, looks_like_html
from .urls import CORPUS_SCHEME, normalize_url

CorpusResolver = Callable[[str], Source]

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("text/plain", "text/markdown", "text/x-markdown")
_PDF_TYPES = ("application/pdf",)
_REDIRECTS = (301, 302, 303, 307, 308)
# Connection attempts per hop when a host has several addresses.
_MAX_ADDRESSES = 3
# Compressed bytes handed to the decompressor at a time (see _Decoder).
_RAW_CHUNK = 16384


@dataclass
class _Body:
    content: bytes
    content_type: str
    truncated: bool = False


class _Decoder:
    """Undoes a Content-Encoding with a limit on what each step may produce.

    httpx would inflate each network read whole: 64 KB of a "zip bomb" become 64 MB and more
    before the byte cap is looked at. Here no step yields more than the room left under
    fetch.max_bytes, so a compressed body costs no more memory than a plain one.
    """

    SUPPORTED = ("gzip", "x-gzip", "deflate")

    def __init__(self, content_encoding: str):
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in self.SUPPORTED):
            raise FetchError(f"content encoding {content_encoding!r} is not supported "
                             f"(only {', '.join(self.SUPPORTED)} are asked for)")
        self.coding = codings[0] if codings else ""
        # gzip: wbits 47 detects the gzip or zlib header; deflate: zlib-wrapped as the standard
        # says, with raw deflate (what some servers send) tried when that fails at once.
        self._inflater = zlib.decompressobj(47 if self.coding != "deflate" else 15) if self.coding else None
        self._started = False

    def feed(self, raw: bytes, room: int) -> bytes:
        """Decoded bytes of ``raw``, at most ``room`` of them (the caller stops at the cap)."""
        if self._inflater is None:
            return raw
        try:
            out = self._inflater.decompress(raw, max(1, room))
        except zlib.error:
            if self.coding == "deflate" and not self._started:
                self._inflater = zlib.decompressobj(-15)
                self._started = True
                return self.feed(raw, room)
            raise FetchError(f"the page's {self.coding} data is corrupt") from None
        self._started = True
        return out


class PageCache:
    """Extracted pages on disk, one JSON file per normalised URL.

    Writes go to a temporary file in the same folder and are renamed into place, so readers
    in this or another process see a whole file or none.
    """

    # Part of every file name: version 1 keyed pages without their query, so a file of that
    # version may hold another page's text (item?id=1 stored for item?id=2). Bumping it makes
    # those files unreachable; they are refetched once.
    KEY_VERSION = 2

    def __init__(self, folder: Path):
        self.folder = folder

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(f"v{self.KEY_VERSION}\0{key}".encode("utf-8")).hexdigest()
        return self.folder / digest[:2] / f"{digest}.json"

    def get(self, key: str) -> Optional[Source]:
        """The cached page for this normalised URL, or None (a damaged file counts as none)."""
        try:
            return Source.model_validate_json(self._path(key).read_bytes())
        except (OSError, ValueError):
            return None

    def put(self, key: str, source: Source) -> None:
        """Store a page atomically; a cache that cannot be written only costs a refetch."""
        try:
            write_atomic(self._path(key), source.model_dump_json())
        except OSError:
            pass


class Fetcher:
    """Fetches pages under the egress policy and the limits of ``settings.fetch``.

    ``corpus_resolver(url) -> Source`` answers ``corpus://`` URLs from the local corpus (no
    network); by default it reads the corpus named in the URL. Thread-safe: the pipeline may
    call ``fetch`` from several threads; ``fetch_many`` runs its own pool. Call ``close()`` (or
    use it as a context manager) to release connections and threads.
    """

    def __init__(self, settings: Settings, corpus_resolver: Optional[CorpusResolver] = None):
        conf = settings.fetch
        self.settings = settings
        self.allow = AllowList.parse(conf.allow_hosts)
        self.max_bytes = int(conf.max_bytes)
        self.max_redirects = int(conf.max_redirects)
        self.total_timeout = float(conf.total_timeout)
        self.connect_timeout = float(conf.connect_timeout)
        self.read_timeout = float(conf.read_timeout)
        self.allow_pdf = bool(conf.allow_pdf)
        self.workers = max(1, int(conf.workers))
        self.per_host = max(1, int(conf.per_host))
        self.cache = PageCache(state_dir(settings, "cache", "pages")) if conf.cache else None
        self._corpus_resolver = corpus_resolver
        # No keep-alive: connections go to checked IP addresses with the name sent as SNI and
        # Host, and a pooled connection must never carry a second name's request.
        # trust_env=False: an environment proxy would bypass the egress check.
        self._client = httpx.Client(
            trust_env=False, follow_redirects=False,
            headers={"User-Agent": conf.user_agent,
                     "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1",
                     # Only what _Decoder can undo under the byte cap.
                     "Accept-Encoding": "gzip, deflate"},
            limits=httpx.Limits(max_connections=self.workers * 2, max_keepalive_connections=0))
        self._all_slots = threading.BoundedSemaphore(self.workers)
        self._host_slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._pool: Optional[ThreadPoolExecutor] = None

    # ------------------------------------------------------------------ public

    def fetch(self, url: str) -> Source:
        """Fetch and extract one URL. Never raises for a page failure: see ``Source.error``."""
        norm = normalize_url(url)
        try:
            if url.strip().lower().startswith(CORPUS_SCHEME):
                return self._from_corpus(url.strip())
            if self.cache is not None:
                cached = self.cache.get(norm)
                if cached is not None:
                    return cached.model_copy(update={"url": url, "from_cache": True})
            source = self._fetch_network(url, norm)
            if self.cache is not None:
                self.cache.put(norm, source)
            return source
        except ApplianceError as exc:
            return _failed(url, norm, exc.one_line())
        except Exception as exc:  # noqa: BLE001 - a page must never end the run
            return _failed(url, norm, f"unexpected {type(exc).__name__}: {exc}")

    def fetch_many(self, urls: list[str]) -> list[Source]:
        """Fetch several URLs concurrently; results come back in the order of ``urls``."""
        if not urls:
            return []
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="fetch")
            pool = self._pool
        return list(pool.map(self.fetch, urls))

    def close(self) -> None:
        """Release the connection pool and the worker threads."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> "Fetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ corpus

    def _from_corpus(self, url: str) -> Source:
        if self._corpus_resolver is None:
            from .corpus import CorpusResolver as _Resolver  # lancedb is heavy: load on first use

            with self._lock:
                if self._corpus_resolver is None:
                    self._corpus_resolver = _Resolver(self.settings)
        return self._corpus_resolver(url)

    # ------------------------------------------------------------------ network

    def _fetch_network(self, url: str, norm: str) -> Source:
        body = self._download(url)
        title, text, published = self._extract(body, url)
        if not text.strip():
            raise FetchError("no readable text in the page")
        return Source(url=url, norm_url=norm, title=title, text=text, published=published,
                      content_type=body.content_type, ok=True, truncated=body.truncated)

    def _download(self, url: str) -> _Body:
        """Follow redirects by hand so every hop passes the egress check; one total deadline."""
        deadline = time.monotonic() + self.total_timeout
        current = url
        for _ in range(self.max_redirects + 1):
            target = _parse(current)
            host = target.raw_host.decode("ascii")
            # The lookup counts against the page's deadline, bounded by the connect timeout.
            lookup = min(self.connect_timeout, _remaining(deadline, self.total_timeout))
            addresses = checked_addresses(host, target.port or _default_port(target.scheme), self.allow,
                                          timeout=lookup)
            with self._host_slot(host), self._all_slots:
                outcome = self._get(target, addresses, deadline)
            if isinstance(outcome, _Body):
                return outcome
            current = urljoin(current, outcome)
        raise FetchError(f"too many redirects (more than fetch.max_redirects = {self.max_redirects})")

    def _get(self, target: httpx.URL, addresses: list[IPAddress], deadline: float) -> _Body | str:
        """One hop: the body, or the redirect location. Tries each checked address in turn."""
        last: Exception | None = None
        for ip in addresses[:_MAX_ADDRESSES]:
            try:
                return self._get_at(target, ip, deadline)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
        host = target.host
        if isinstance(last, httpx.ConnectTimeout):
            raise FetchError(f"connecting to {host} timed out (fetch.connect_timeout = {self.connect_timeout} s)")
        raise FetchError(f"cannot connect to {host}: {_reason(last)}")

    def _get_at(self, target: httpx.URL, ip: IPAddress, deadline: float) -> _Body | str:
        remaining = _remaining(deadline, self.total_timeout)
        read = min(self.read_timeout, remaining)
        timeout = httpx.Timeout(connect=min(self.connect_timeout, remaining), read=read,
                                write=read, pool=remaining)
        watchdog = _Watchdog(deadline)
        # Connect to the address that was checked, not to a fresh DNS answer (DNS rebinding);
        # the name still goes out as Host and as TLS SNI, and certificates are checked against it.
        request = self._client.build_request(
            "GET", target.copy_with(host=str(ip)), timeout=timeout,
            headers={"Host": target.netloc.decode("ascii")},
            extensions={"sni_hostname": target.raw_host.decode("ascii"), "trace": watchdog.trace})
        try:
            try:
                response = self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                raise
            except httpx.HTTPError as exc:
                if time.monotonic() >= deadline - 0.05:
                    raise FetchError(f"{target.host} took longer than fetch.total_timeout = {self.total_timeout} s") from None
                if isinstance(exc, httpx.ReadTimeout):
                    raise FetchError(f"{target.host} did not answer within {read:g} s (fetch.read_timeout)") from None
                raise FetchError(f"request to {target.host} failed: {_reason(exc)}") from None
            try:
                return self._answer(response, deadline, target.host)
            finally:
                response.close()
        finally:
            watchdog.cancel()

    def _answer(self, response: httpx.Response, deadline: float, host: str) -> _Body | str:
        if response.status_code in _REDIRECTS and response.headers.get("location"):
            return response.headers["location"]
        if response.status_code >= 400:
            raise FetchError(f"HTTP {response.status_code} {response.reason_phrase} from {host}")
        content_type = response.headers.get("content-type", "")
        self._check_type(content_type)
        content, truncated = self._read_capped(response, deadline, host)
        return _Body(content, content_type, truncated)

    def _check_type(self, content_type: str) -> None:
        kind = content_type.split(";", 1)[0].strip().lower()
        if not kind or kind in _HTML_TYPES or kind in _TEXT_TYPES:
            return
        if kind in _PDF_TYPES:
            if self.allow_pdf:
                return
            raise FetchError("content type application/pdf is not fetched (set fetch.allow_pdf = true to allow it)")
        raise FetchError(f"content type {kind} is not HTML or text")

    def _read_capped(self, response: httpx.Response, deadline: float, host: str) -> tuple[bytes, bool]:
        """Read at most max_bytes of the decoded body, and whether more was cut off; past the
        deadline the watchdog has cut the socket."""
        decoder = _Decoder(response.headers.get("content-encoding", ""))
        chunks: list[bytes] = []
        size = 0
        truncated = False
        try:
            for raw in response.iter_raw(chunk_size=_RAW_CHUNK):
                chunk = decoder.feed(raw, self.max_bytes - size)
                chunks.append(chunk)
                size += len(chunk)
                if size >= self.max_bytes:
                    # Keep what fits: a truncated page still has text worth reading. The
                    # record says so, so a reader of the run knows the page was longer.
                    truncated = True
                    break
                if time.monotonic() >= deadline:
                    raise FetchError(f"{host} took longer than fetch.total_timeout = {self.total_timeout} s")
        except FetchError:
            raise
        except Exception as exc:  # noqa: BLE001 - a cut socket surfaces as many types
            if time.monotonic() >= deadline - 0.05:
                raise FetchError(f"{host} took longer than fetch.total_timeout = {self.total_timeout} s") from None
            if isinstance(exc, httpx.ReadTimeout):
                raise FetchError(f"{host} stopped sending for {self.read_timeout:g} s (fetch.read_timeout)") from None
            raise FetchError(f"reading from {host} failed: {_reason(exc)}") from None
        return b"".join(chunks)[: self.max_bytes], truncated

    def _extract(self, body: _Body, url: str) -> tuple[str, str, Optional[str]]:
        kind = body.content_type.split(";", 1)[0].strip().lower()
        if kind in _PDF_TYPES:
            return _extract_pdf(body.content)
        if kind in _HTML_TYPES or (not kind and looks_like_html(body.content)):
            page = extract_html(body.content, url=url)
            return page.title, page.text, page.published
        if not kind and b"\x00" in body.content[:4096]:
            raise FetchError("the page has no content type and is not text")
        page = extract_plain(decode_text(body.content, body.content_type))
        return page.title, page.text, None

    def _host_slot(self, host: str) -> threading.BoundedSemaphore:
        with self._lock:
            slot = self._host_slots.get(host)
            if slot is None:
                slot = self._host_slots[host] = threading.BoundedSemaphore(self.per_host)
            return slot


class _Watchdog:
    """Makes the total deadline hard: when it passes, the connection's socket is shut down.

    httpx timeouts bound each read, not the sum of them, so a server trickling bytes could
    hold a fetch for ever. The socket is taken from httpcore's trace events as soon as it is
    connected (and again after TLS wraps it); shutting it down wakes a blocked read at once.
    """

    def __init__(self, deadline: float):
        self.deadline = deadline
        self._timer: Optional[threading.Timer] = None
        self._lock = threading.Lock()

    def trace(self, event: str, info: dict) -> None:
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            self._arm(sock)

    def _arm(self, sock: socket.socket) -> None:
        def fire() -> None:
            try:
                # The plain socket method, also for a TLS socket: it wakes the reader without
                # tearing down the TLS object under the reading thread's feet.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

        timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), fire)
        timer.daemon = True
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = timer
        timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


def _extract_pdf(content: bytes) -> tuple[str, str, Optional[str]]:
    try:
        from pypdf import PdfReader
    except ImportError:
        raise FetchError("PDF text extraction needs pypdf, a dependency of appliance: "
                         "reinstall it with `make install`") from None
    import io

    try:
        reader = PdfReader(io.BytesIO(content))
        text = "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
        metadata = reader.metadata
        title = str(metadata.get("/Title") or "") if metadata is not None else ""
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types for damaged files
        raise FetchError(f"cannot read the PDF: {type(exc).__name__}") from None
    return title, text.strip(), None


def _parse(url: str) -> httpx.URL:
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchError(f"not a valid URL: {exc}") from None
    if target.scheme not in ("http", "https"):
        raise FetchError(f"unsupported URL scheme {target.scheme or '(none)'!r}: only http and https are fetched")
    if not target.raw_host:
        raise FetchError("URL has no host")
    return target


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _remaining(deadline: float, total: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"took longer than fetch.total_timeout = {total} s")
    return left


def _reason(exc: Exception | None) -> str:
    if exc is None:
        return "no address to connect to"
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:200]


def _failed(url: str, norm: str, reason: str) -> Source:
    return Source(url=url, norm_url=norm, ok=False, error=reason)
