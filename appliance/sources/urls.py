"""URL rules: one identity per page, and a run-wide ledger that admits each page once, within
the fetch budget, counting everything it turns away (rule 3: what is dropped is counted)."""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from ..contracts import Hit

CORPUS_SCHEME = "corpus://"
_DEFAULT_PORTS = {"http": 80, "https": 443}
# mailto:, javascript:, data: ... have no host; "example.com:8080" is a host and a port.
_OPAQUE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(?!//)(?!\d)")
# Query parameters that only say how a visitor arrived (ad clicks, newsletters, analytics), never
# which page is served. The list is deliberately narrow: dropping a parameter that does name the
# page (?id=, ?game=, ?keyword=) would make two pages one, and the second would be turned away
# as a duplicate or served the first one's cached text; keeping a tracking parameter only
# costs a second fetch of the same page. (courlan's tracker rule also matches game=, keyword=,
# uid=, source= and more, which is why it is not used here.)
_TRACKING_PREFIXES = ("utm_", "mtm_", "pk_", "hsa_", "_hs", "mc_", "oly_", "vero_")
_TRACKING_NAMES = frozenset({
    "fbclid", "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "twclid", "ttclid",
    "li_fat_id", "igshid", "igsh", "mkt_tok", "srsltid", "_ga", "_gl", "_ke", "s_kwcid", "ef_id",
    "epik", "rdt_cid", "irclickid", "wickedid", "trk_contact", "trk_msg", "trk_module", "trk_sid",
})


def is_tracking_parameter(name: str) -> bool:
    """Whether a query parameter only tracks the visit (utm_*, fbclid, gclid and the like)."""
    low = name.lower()
    return low in _TRACKING_NAMES or low.startswith(_TRACKING_PREFIXES)


def normalize_query(query: str) -> str:
    """The query's parameters without tracking ones, sorted by name, encoded one way.

    Repeated names keep their order (``tag=b&tag=a`` is a list to most servers); ``%20`` and
    ``+`` become one spelling; an empty query gives "".
    """
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k and not is_tracking_parameter(k)]
    return urlencode(sorted(pairs, key=lambda kv: kv[0]))


def normalize_url(url: str) -> str:
    """The identity of a page: ``host[:port]/path[?query]``.

    The host is lower-cased without a leading ``www.``; the path loses its trailing slash;
    the query keeps every parameter but the tracking ones, sorted (``item?id=1`` and
    ``item?id=2`` are two pages). Scheme and fragment are dropped: http and https copies are
    one page, and a fragment is never sent to the server. A non-default port is kept because
    two ports are two servers. ``corpus://`` ids are returned unchanged: they are already
    identities. Text that is not a URL with a host is returned stripped, so it still
    de-duplicates.
    """
    text = url.strip()
    if text.lower().startswith(CORPUS_SCHEME) or _OPAQUE.match(text):
        return text
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port
    except ValueError:
        return text
    if not host:
        return text
    if host.startswith("www."):
        host = host[4:]
    if ":" in host:  # an IPv6 literal needs its brackets back
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    # Decoding makes /a%20b and /a b one page; the path is otherwise kept as the site wrote it.
    path = unquote(parts.path).rstrip("/")
    query = normalize_query(parts.query)
    return f"{host}{path}?{query}" if query else f"{host}{path}"


class UrlLedger:
    """Run-wide admission of URLs for fetching: de-duplicated, budgeted, thread-safe.

    Every hit offered lands in exactly one list: ``admitted``, ``duplicates`` (its normalised
    URL was seen before in this run, whether fetched or not) or ``budget_drops`` (new, but
    the budget was spent). Nothing is discarded silently. A page fetched but not read is
    given back (``release``): it leaves ``admitted`` and may be offered and admitted again.
    """

    def __init__(self, budget: int):
        if budget < 0:
            raise ValueError("budget must be >= 0")
        self.budget = budget
        self.admitted: list[Hit] = []
        self.duplicates: list[Hit] = []
        self.budget_drops: list[Hit] = []
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def admit(self, hits: list[Hit]) -> list[Hit]:
        """Return the hits newly admitted for fetching, best rank first.

        Hits are considered best rank first (rank 1 is the best; the original order breaks
        ties), so when the budget runs out it is the lower-ranked hits that are dropped.
        """
        ordered = sorted(hits, key=lambda h: h.rank if h.rank > 0 else float("inf"))
        newly: list[Hit] = []
        with self._lock:
            for hit in ordered:
                key = normalize_url(hit.url)
                if key in self._seen:
                    self.duplicates.append(hit)
                    continue
                # A budget drop is still "seen": offering it again later is a duplicate,
                # not a second budget drop, so each URL is counted once.
                self._seen.add(key)
                if len(self.admitted) >= self.budget:
                    self.budget_drops.append(hit)
                    continue
                self.admitted.append(hit)
                newly.append(hit)
        return newly

    def release(self, url: str) -> None:
        """Give back an admitted URL that was fetched but not read: it no longer counts
        against the budget, and a later offer of it is admitted again, not a duplicate."""
        key = normalize_url(url)
        with self._lock:
            self._seen.discard(key)
            self.admitted = [h for h in self.admitted if normalize_url(h.url) != key]

    def is_seen(self, url: str) -> bool:
        """Whether this URL (normalised) was already offered in this run."""
        with self._lock:
            return normalize_url(url) in self._seen

    @property
    def remaining(self) -> int:
        """Fetches left in the budget."""
        with self._lock:
            return max(0, self.budget - len(self.admitted))

    @property
    def admitted_count(self) -> int:
        """URLs admitted for fetching so far."""
        return len(self.admitted)

    @property
    def duplicate_count(self) -> int:
        """Hits turned away because their URL was already seen in this run."""
        return len(self.duplicates)

    @property
    def budget_drop_count(self) -> int:
        """New URLs turned away because the fetch budget was spent."""
        return len(self.budget_drops)

    def stats(self) -> dict[str, int]:
        """Counts for the run's stats."""
        with self._lock:
            return {"budget": self.budget, "admitted": len(self.admitted),
                    "url_duplicates": len(self.duplicates), "budget_drops": len(self.budget_drops)}
