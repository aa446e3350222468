"""The constrained decode loop: grammar mask, our own seeded sampler, fast-forward of forced text.

Each step asks the grammar matcher (llguidance) which tokens may come next. When the grammar
allows exactly one continuation (a key, punctuation, the rest of an enum value once its
prefix is unique), the matcher returns those *forced* tokens and they are appended without
sampling; they are evaluated by the model together with the next sampled token, in one batch,
and forced tokens at the very end of the output are never evaluated at all. Only free tokens
are sampled: the logits are masked to the allowed tokens and a numpy sampler (top-k, top-p,
min-p, temperature, seeded per call) picks one.

Determinism: the same prompt, grammar, seed and budget give the same token sequence and the
same batch shapes every time, so the same output (the caller makes the prompt's logits
independent of what ran before; see ``native.prefill_plan``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import ModelError

TOP_K = 40
MIN_P = 0.05
# The sampler's first look for the top-k: tokens whose logit is within this of the best;
# widened by half again while it holds fewer than k, up to _WIDEST.
_NEAR = 12.0
_WIDEST = 800.0
# Repetition stop: inside one JSON string, a stretch of tokens that repeats with a period of
# at most _MAX_PERIOD tokens for more than _REPEAT_TOKENS tokens (and at least twice its period)
# is a model stuck in a loop; generation ends there as a truncation.
_MAX_PERIOD = 32
_REPEAT_TOKENS = 48


class Model(Protocol):
    """What the loop needs from llama.cpp."""

    def eval(self, tokens: Sequence[int]) -> None: ...

    def logits(self) -> np.ndarray: ...


@dataclass
class Sampler:
    """Seeded sampling as llama.cpp's default chain does it: top-k, then top-p and min-p on
    the probabilities at temperature 1, then temperature. Temperature 0 is greedy."""

    seed: int
    temperature: float
    top_p: float
    top_k: int = TOP_K
    min_p: float = MIN_P
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.Generator(np.random.PCG64(self.seed & 0xFFFFFFFFFFFFFFFF))

    def sample(self, logits: np.ndarray, allowed: np.ndarray) -> int:
        """One token among ``allowed`` (token ids) given the full ``logits`` row."""
        mask = np.zeros(len(logits), dtype=bool)
        mask[allowed] = True
        return self.sample_masked(logits, mask)

    def sample_masked(self, logits: np.ndarray, mask: np.ndarray) -> int:
        """One token among those ``mask`` (a boolean row as long as ``logits``) allows.

        Fast on a large vocabulary: the top-k are looked for among the tokens within
        ``_NEAR`` of the best logit (a few hundred at most, usually), which holds them all
        whenever there are at least k such tokens; else within 1.5, 2.25, ... times that; only when
        even ``_WIDEST`` holds fewer than k is every allowed token taken.
        """
        masked = np.where(mask, logits, np.float32(-np.inf))
        best = int(np.argmax(masked))  # first maximum: ties go to the lower id
        if self.temperature <= 0:
            return best
        allowed = np.flatnonzero(masked >= masked[best] - _NEAR)
        # A confident model leaves fewer than k tokens that near: widen the look (each a cheap
        # comparison) rather than partition the whole allowed vocabulary, which costs about a
        # millisecond a token on 151k. Any look holding k tokens holds the top k.
        width = _NEAR
        while 0 < len(allowed) < self.top_k and width < _WIDEST:
            width *= 1.5
            allowed = np.flatnonzero(masked >= masked[best] - width)
        if not len(allowed) >= self.top_k > 0:
            allowed = np.flatnonzero(mask)
        if len(allowed) == 1:
            return int(allowed[0])
        values = masked[allowed]  # float32: partitioned as they are, widened only once chosen
        k = min(self.top_k, len(allowed)) if self.top_k > 0 else len(allowed)
        if k < len(allowed):
            top = np.argpartition(-values, k - 1)[:k]
        else:
            top = np.arange(len(allowed))
        # A total order (logit descending, then token id) so that ties never depend on the
        # partition algorithm's internals.
        top = top[np.lexsort((allowed[top], -values[top]))]
        chosen = values[top].astype(np.float64)
        probs = np.exp(chosen - chosen[0])
        probs /= probs.sum()
        keep = len(top)
        if self.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), self.top_p) + 1))
        if self.min_p > 0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= self.min_p * probs[0]))))
        chosen = chosen[:keep] / self.temperature
        weights = np.exp(chosen - chosen[0])
        weights /= weights.sum()
        return int(allowed[top[int(self._rng.choice(keep, p=weights))]])


class RepetitionGuard:
    """Watches the text inside JSON strings for a token loop (see ``_REPEAT_TOKENS``)."""

    def __init__(self, max_period: int = _MAX_PERIOD, limit: int = _REPEAT_TOKENS):
        self.max_period = max_period
        self.limit = limit
        self._in_string = False
        self._escaped = False
        self._tokens: list[int] = []
        self._runs = [0] * (max_period + 1)

    def feed(self, token: int, piece: bytes) -> bool:
        """Account one output token and its bytes; True when the current string loops."""
        if self._in_string:
            self._push(token)
        looping = self._in_string and any(
            run >= max(self.limit, 2 * p) for p, run in enumerate(self._runs) if p)
        for byte in piece:
            if self._escaped:
                self._escaped = False
            elif self._in_string and byte == 0x5C:  # backslash
                self._escaped = True
            elif byte == 0x22:  # quote: a string opens or closes
                self._in_string = not self._in_string
                self._tokens.clear()
                self._runs = [0] * (self.max_period + 1)
        return looping

    def banned(self, n: int) -> set[int]:
        """Tokens that would repeat, inside the current string, an n-gram already in it."""
        tokens = self._tokens
        if not self._in_string or n < 2 or len(tokens) < n - 1:
            return set()
        tail = tokens[len(tokens) - n + 1:]
        return {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i:i + n - 1] == tail}

    def _push(self, token: int) -> None:
        tokens = self._tokens
        tokens.append(token)
        n = len(tokens)
        for p in range(1, self.max_period + 1):
            self._runs[p] = self._runs[p] + 1 if n > p and tokens[n - 1 - p] == token else 0


@dataclass
class Generation:
    """What one constrained generation produced, and what it cost."""

    tokens: list[int]
    finish_reason: str       # "stop" (grammar complete or EOS), "length" (budget), "repetition"
    sampled: int = 0         # tokens chosen by the sampler
    forced: int = 0          # tokens fast-forwarded from the grammar
    evaluated: int = 0       # output tokens the model evaluated (forced tail excluded)
    mask_seconds: float = 0.0
    decode_seconds: float = 0.0
    sample_seconds: float = 0.0


def generate(model: Model, matcher, sampler: Sampler, *, max_tokens: int, eos: Sequence[int],
             piece: Callable[[int], bytes], n_vocab: int, no_repeat_ngram: int = 0) -> Generation:
    """Run the loop until the grammar is complete, EOS, the budget, or a repetition stop.

    ``matcher`` is a fresh llguidance ``LLMatcher``; ``piece(token)`` gives a token's bytes;
    the model's logits are those of the prompt's last token when this is called.
    ``no_repeat_ngram`` n > 1 bans sampled tokens that would repeat an n-gram inside the same
    string (for a retry after a repetition stop).
    """
    out: list[int] = []
    gen = Generation(tokens=out, finish_reason="stop")
    pending: list[int] = []  # output tokens not yet evaluated by the model
    words = (n_vocab + 31) // 32
    bitmask = np.zeros(words, dtype=np.int32)
    eos_set = set(int(t) for t in eos)
    guard = RepetitionGuard()
    while True:
        if matcher.is_stopped():
            break
        if len(out) >= max_tokens:
            gen.finish_reason = "length"
            break
        forced = matcher.compute_ff_tokens()
        if forced:
            forced = forced[: max_tokens - len(out)]
            if not matcher.consume_tokens(forced):
                raise _matcher_failure(matcher)
            for token in forced:
                out.append(token)
                gen.forced += 1
                if guard.feed(token, piece(token)):
                    gen.finish_reason = "repetition"
                    return gen
            pending.extend(forced)
            continue
        if pending:
            start = time.perf_counter()
            model.eval(pending)
            gen.decode_seconds += time.perf_counter() - start
            gen.evaluated += len(pending)
            pending = []
        start = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)
        gen.mask_seconds += time.perf_counter() - start
        if matcher.is_error():
            raise _matcher_failure(matcher)
        start = time.perf_counter()
        allowed = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:n_vocab].view(bool)
        if not allowed.any():
            break  # nothing may follow: the validator judges what there is
        if no_repeat_ngram:
            banned = [t for t in guard.banned(no_repeat_ngram) if t < n_vocab and allowed[t]]
            if banned and int(allowed.sum()) > len(banned):
                allowed = allowed.copy()
                allowed[banned] = False
        token = sampler.sample_masked(model.logits(), allowed)
        gen.sample_seconds += time.perf_counter() - start
        if token in eos_set:
            break  # only allowed where the grammar may end
        if not matcher.consume_token(token):
            raise _matcher_failure(matcher)
        out.append(token)
        gen.sampled += 1
        pending.append(token)
        if guard.feed(token, piece(token)):
            gen.finish_reason = "repetition"
            break
    return gen


def _matcher_failure(matcher) -> ModelError:
    detail = " ".join(str(matcher.get_error()).split())[:300]
    return ModelError(f"the grammar matcher failed during generation: {detail}",
                      hint="report this with the schema; the grammar library rejected its own choice")
