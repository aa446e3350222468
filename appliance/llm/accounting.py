"""Token and call accounting: cumulative counters per engine, and one record per call.

Counters only grow; a pipeline takes ``before = pool.accounting`` and later
``pool.accounting.diff(before)`` for its per-run (or per-phase) figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
import threading
from typing import Callable


@dataclass
class Accounting:
    """Counters of structured calls.

    ``calls`` structured calls asked for; ``cache_hits`` of them answered from the call
    cache; ``model_calls`` generations actually run (retries included); ``prompt_tokens``
    submitted to the model and ``prompt_evaluated`` of them actually evaluated after
    llama.cpp reused the prefix left by the previous call; ``generated_tokens``;
    ``seconds`` spent generating; ``retries`` extra attempts after an invalid or cut-off
    output; ``failures`` calls that ended without a valid output; ``truncations``
    outputs cut off by their token budget (or stopped as repetitive); ``trimmed`` prompts
    shortened to fit the context. Of the generated tokens, ``sampled_tokens`` were chosen by
    the sampler and ``forced_tokens`` fast-forwarded from the grammar; ``mask_seconds`` went
    to computing token masks and ``decode_seconds`` to llama.cpp evaluating prompt and output
    tokens; ``repetition_stops`` outputs were stopped because a string kept repeating itself.
    """

    calls: int = 0
    model_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    retries: int = 0
    failures: int = 0
    truncations: int = 0
    trimmed: int = 0
    sampled_tokens: int = 0
    forced_tokens: int = 0
    mask_seconds: float = 0.0
    decode_seconds: float = 0.0
    repetition_stops: int = 0

    def snapshot(self) -> "Accounting":
        """An independent copy (later calls do not change it)."""
        return replace(self)

    def diff(self, earlier: "Accounting") -> "Accounting":
        """What happened since ``earlier`` (a snapshot of the same counters)."""
        return Accounting(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)})

    def __add__(self, other: "Accounting") -> "Accounting":
        return Accounting(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def reuse_share(self) -> float:
        """Share of submitted prompt tokens that llama.cpp did not have to evaluate."""
        if not self.prompt_tokens:
            return 0.0
        return 1.0 - self.prompt_evaluated / self.prompt_tokens

    @property
    def forced_share(self) -> float:
        """Share of generated tokens fast-forwarded from the grammar rather than sampled."""
        total = self.sampled_tokens + self.forced_tokens
        return self.forced_tokens / total if total else 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        for name in ("seconds", "mask_seconds", "decode_seconds"):
            data[name] = round(getattr(self, name), 3)
        return data

    def add_record(self, record: "CallRecord") -> None:
        """Fold one call's record into the counters."""
        self.calls += 1
        if record.cache_hit:
            self.cache_hits += 1
            return
        self.model_calls += record.attempts
        self.retries += max(0, record.attempts - 1)
        self.prompt_tokens += record.prompt_tokens
        self.prompt_evaluated += record.prompt_evaluated
        self.generated_tokens += record.generated_tokens
        self.seconds += record.seconds
        self.sampled_tokens += record.sampled_tokens
        self.forced_tokens += record.forced_tokens
        self.mask_seconds += record.mask_seconds
        self.decode_seconds += record.decode_seconds
        self.repetition_stops += record.repetition_stops
        self.truncations += record.truncations
        self.trimmed += 1 if record.trimmed else 0
        self.failures += 0 if record.ok else 1


@dataclass
class CallRecord:
    """One structured call, as handed to listeners (the run log) when it ends.

    Token counts and seconds add up over the call's attempts; they are zero for a cache hit.
    ``sampled_tokens`` + ``forced_tokens`` = ``generated_tokens`` for the real engine.
    """

    model: str
    purpose: str
    schema: str
    key: str
    seed: int
    cache_hit: bool
    ok: bool = True
    attempts: int = 0
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    sampled_tokens: int = 0
    forced_tokens: int = 0
    mask_seconds: float = 0.0
    decode_seconds: float = 0.0
    truncations: int = 0
    repetition_stops: int = 0
    trimmed: bool = False
    error: str = ""
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        data = asdict(self)
        for name in ("seconds", "mask_seconds", "decode_seconds"):
            data[name] = round(getattr(self, name), 4)
        return data


Listener = Callable[[CallRecord], None]


class CallCounting:
    """What every engine, in-process or remote, keeps of its calls: cumulative counters and the
    listeners told of each call (the run log). Subclasses call ``_init_counting`` and
    ``_finish(record)`` once per structured call, hit or miss, success or failure."""

    def _init_counting(self) -> None:
        self._acc_lock = threading.Lock()
        self._accounting = Accounting()
        self._listeners: list[Listener] = []

    @property
    def accounting(self) -> Accounting:
        """A snapshot of this engine's cumulative counters."""
        with self._acc_lock:
            return self._accounting.snapshot()

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(record)`` after every structured call (hit or miss, success or
        failure); returns a function that removes it. A listener's exception propagates to
        the caller of ``structured``: a run log that cannot be written should stop the run."""
        with self._acc_lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._acc_lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _finish(self, record: CallRecord) -> None:
        with self._acc_lock:
            self._accounting.add_record(record)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(record)
