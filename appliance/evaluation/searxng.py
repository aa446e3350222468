"""Eval through SearXNG: the check that the instance searches the dataset's own corpus (served
by `appliance corpus serve`), made before any model work, so a misrouted eval fails in one
line instead of scoring zero recall for an hour."""

from __future__ import annotations

from ..errors import SearchError
from ..sources.serve import passage_id_from_url


def check_serves_dataset(backend, fetcher, question: str, corpus: str) -> None:
    """Raise SearchError unless SearXNG answers ``question`` with passages of ``corpus`` and
    the first of them can be fetched (the egress policy must allow the corpus server's host)."""
    hits = backend.search(question, 10)
    ours = [h for h in hits if (passage_id_from_url(h.url) or ("",))[0] == corpus]
    if not ours:
        seen = sorted({(passage_id_from_url(h.url) or (h.url.split("/")[2] if "//" in h.url else h.url,))[0]
                       for h in hits})
        raise SearchError(
            f"SearXNG returned no passage of the dataset's corpus {corpus!r} "
            f"({len(hits)} hits{': from ' + ', '.join(seen[:5]) if seen else ''})",
            hint=f"serve it with `appliance corpus serve {corpus}` and give SearXNG the engine in "
                 "config/searxng/corpus.yml")
    page = fetcher.fetch(ours[0].url)
    if not page.ok:
        raise SearchError(f"cannot fetch the corpus passage {ours[0].url}: {page.error}",
                          hint="if the egress policy refused it, add the corpus server's host to "
                               "fetch.allow_hosts (e.g. [fetch] allow_hosts = [\"127.0.0.1\"])")
