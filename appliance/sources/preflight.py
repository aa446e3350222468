"""Checks made before a run starts, so a misconfigured source fails in one line, not after
minutes of model work."""

from __future__ import annotations

from ..errors import SearchError


def check_backend(settings, backend) -> None:
    """Raise SearchError when the chosen backend cannot serve a run (missing corpus, SearXNG down)."""
    if backend.name == "searxng":
        from .searxng import ping

        ping(settings.searxng.url, settings.searxng.timeout)
        return
    from .corpus import list_corpora

    name = getattr(backend, "corpus_name", None) or settings.search.corpus
    known = [getattr(c, "name", c) for c in list_corpora(settings)]
    if name not in known:
        hint = (f"add documents with `appliance corpus add PATH --name {name}`"
                + (f"; existing corpora: {', '.join(known)}" if known else "")
                + ", or set searxng.url to search with SearXNG")
        raise SearchError(f"the local corpus {name!r} does not exist", hint=hint)
