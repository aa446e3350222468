"""The search backend interface and the choice between SearXNG and the local corpus."""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from ..config import Settings
from ..contracts import Hit
from ..errors import ConfigError

BACKENDS = ("auto", "searxng", "corpus")


@runtime_checkable
class SearchBackend(Protocol):
    """Anything that turns a query into ranked hits.

    ``search`` returns at most ``limit`` hits, rank 1 first, and raises SearchError (with a
    message that says what to do) when the backend itself fails; no results is not a failure.
    ``unresponsive_engines`` (engine -> reason) is empty for backends without engines.
    """

    name: str
    unresponsive_engines: dict[str, str]

    def search(self, query: str, limit: int) -> list[Hit]: ...


def choose_backend(settings: Settings, backend: Optional[str] = None) -> str:
    """Resolve "auto": SearXNG when a URL is configured, else the local corpus."""
    chosen = (backend or settings.search.backend or "auto").strip().lower()
    if chosen not in BACKENDS:
        raise ConfigError(f"unknown search backend {chosen!r}", hint=f"use one of {', '.join(BACKENDS)}")
    if chosen == "auto":
        chosen = "searxng" if str(settings.searxng.url).strip() else "corpus"
    return chosen


def make_backend(settings: Settings, backend: Optional[str] = None,
                 corpus: Optional[str] = None) -> SearchBackend:
    """The search backend the settings ask for ("auto" unless ``backend`` says otherwise).

    ``corpus`` names the local corpus (default: search.corpus). Nothing is contacted or opened
    here; the first search reports problems.
    """
    chosen = choose_backend(settings, backend)
    if chosen == "searxng":
        from .searxng import SearxngBackend

        return SearxngBackend.from_settings(settings)
    from .corpus import CorpusBackend

    return CorpusBackend(settings, corpus or settings.search.corpus)
