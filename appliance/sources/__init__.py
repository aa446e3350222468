"""Where the text comes from: search backends (SearXNG, the local corpus), URL rules,
the egress policy, and fetching + extraction of pages.

Modules by stage: base (the backend interface and choice), searxng, corpus (+ ingest),
urls, egress, fetch (+ extract). Heavy libraries (lancedb, torch, trafilatura) load on
first use, so importing this package is cheap.
"""

from .base import SearchBackend, make_backend
from .urls import UrlLedger, normalize_url

__all__ = ["SearchBackend", "make_backend", "UrlLedger", "normalize_url"]
