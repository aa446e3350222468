"""What the pipeline needs of a model: one structured call, a name and its counters.

``Engine`` is the real thing; tests drive the pipeline's control flow with scripted stand-ins
that must keep this shape (a test compares their signatures with this one).
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar, runtime_checkable

from pydantic import BaseModel

from .accounting import Accounting

M = TypeVar("M", bound=BaseModel)


@runtime_checkable
class StructuredModel(Protocol):
    """A model that answers with one validated instance of a schema."""

    name: str

    @property
    def accounting(self) -> Accounting:
        """A snapshot of the cumulative token and call counters."""
        ...

    def structured(self, messages: Sequence[dict[str, str]], schema: type[M], *,
                   seed: int | None = None, max_tokens: int | None = None,
                   temperature: float | None = None, top_p: float | None = None,
                   purpose: str = "", cache: bool | None = None) -> M:
        """One ``schema`` instance for the chat ``messages`` (raises ModelOutputError)."""
        ...
