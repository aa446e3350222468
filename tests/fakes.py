"""Scripted stand-ins for control-flow tests only. Features are also tested with the real
model, LanceDB and sources elsewhere; these let a test force a vote, a failure or a plan."""

from __future__ import annotations

import threading
from typing import Callable

from appliance.contracts import Extraction, Hit, Source
from pydantic import ValidationError

from appliance.errors import ModelOutputError
from appliance.llm.accounting import Accounting


class FakeEngine:
    """Answers each call with ``script[purpose](messages, seed)``: an instance, a dict, or an exception."""

    def __init__(self, script: dict[str, Callable], name: str = "fake"):
        self.script = script
        self.name = name
        self.accounting = Accounting()  # the engine's own counters
        self.calls: list[tuple[str, int | None]] = []
        self.schemas: list[tuple[str, type]] = []  # (purpose, schema) of each call
        self.temperatures: list[tuple[str, float | None]] = []  # (purpose, temperature asked for)
        self._lock = threading.Lock()

    def structured(self, messages, schema, *, seed=None, max_tokens=None, temperature=None, top_p=None,
                   purpose="", cache=None):
        with self._lock:
            self.calls.append((purpose, seed))
            self.schemas.append((purpose, schema))
            self.temperatures.append((purpose, temperature))
            self.accounting.calls += 1
            self.accounting.model_calls += 1
            self.accounting.prompt_tokens += sum(len(m["content"]) // 4 for m in messages)
        answer = self.script[purpose](messages, seed)
        if isinstance(answer, Exception):
            raise answer
        if not isinstance(answer, dict):
            answer = answer.model_dump(mode="json")
        if schema.__name__.startswith("Extraction_quoted_sentences") and isinstance(answer.get("claims"), list):
            # The grammar of an extractor that only picks sentences (pipeline.restate_claims
            # false) has no claim field: a script's own wording is what the model cannot write.
            answer = {**answer, "claims": [{k: v for k, v in item.items() if k != "claim"}
                                           for item in answer["claims"]]}
        try:
            # Validated against the exact (possibly bounded) schema, as the real engine does.
            return schema.model_validate(answer)
        except ValidationError as exc:
            raise ModelOutputError(f"{purpose}: invalid output: {exc.errors()[0]['msg']}") from None


def fail(purpose: str) -> ModelOutputError:
    return ModelOutputError(f"{purpose}: no valid output after 3 attempts", attempts=["{", "{"], last_raw="{")


class FakeBackend:
    """Returns the given hits for every query (or per query via a dict)."""

    name = "fake"

    def __init__(self, hits: list[Hit] | dict[str, list[Hit]]):
        self.hits = hits
        self.queries: list[str] = []
        self.unresponsive_engines: list[str] = []

    def search(self, query: str, limit: int) -> list[Hit]:
        self.queries.append(query)
        hits = self.hits.get(query, []) if isinstance(self.hits, dict) else self.hits
        return [h.model_copy() for h in hits[:limit]]


class FakeFetcher:
    def __init__(self, pages: dict[str, str]):
        self.pages = pages

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def fetch_many(self, urls: list[str]) -> list[Source]:
        return [self.fetch(u) for u in urls]

    def fetch(self, url: str) -> Source:
        if url not in self.pages:
            return Source(url=url, ok=False, error="not found")
        return Source(url=url, title=url.rsplit("/", 1)[-1], text=self.pages[url])


def quoting_extract(quotes: list[str], claims: dict[str, str] | None = None) -> Callable:
    """An extraction script: for the first of ``quotes`` the page holds, one central claim
    quoting it (worded ``claims[quote]``, else as the quote itself); no claim from other pages."""
    claims = claims or {}

    def extract(messages, seed):
        text = messages[-1]["content"]  # the page last: earlier findings come before it
        for quote in quotes:
            if quote in text:
                return Extraction(source_quality="secondary", claims=[
                    {"claim": claims.get(quote, quote + "."), "quote": quote, "importance": "central"}])
        return Extraction(source_quality="blog", claims=[])

    return extract
