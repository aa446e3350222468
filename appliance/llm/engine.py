"""Structured calls to local models: ``Engine`` (one loaded model) and ``ModelPool`` (the
models of the manifest, by role).

``engine.structured(messages, Schema)`` returns a validated ``Schema`` instance or raises:
the output is constrained by a grammar built from the schema (token masks from llguidance,
forced text fast-forwarded; see ``decode.py``), validated by pydantic, retried
a bounded number of times with the error shown to the model, and a cut-off output is never
mistaken for a short one. The prompt is measured in the model's own tokens and the last user
message trimmed, visibly, when it would not fit. Finished calls are cached by content.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from ..config import Settings, state_dir
from ..errors import ContextOverflowError, ModelOutputError, StateError, UsageError
from .accounting import Accounting, CallCounting, CallRecord, Listener
from .cache import CallCache, call_key
from .grammar import grammar_for, schema_json
from .manifest import (HashCache, Manifest, ModelEntry, ROLES, check_model_file, load_manifest_for,
                       resolve_model)
from .native import Completion, LlamaBackend
from .prefixes import PrefixStore

M = TypeVar("M", bound=BaseModel)

# Part of every cache key: bump it when prompt construction or retries change what a call returns.
ENGINE_VERSION = 2
TRIM_MARKER = "\n[... trimmed to fit the model's context ...]"
_ROLES = ("system", "user", "assistant")
_TRIM_ROUNDS = 6
# Sampling temperature of a retry after a repetition stop (when the call's own is lower).
_LOOP_TEMPERATURE = 0.8
# Sampling temperature of a retry after invalid output (when the call's own is lower): read
# greedily, a small model shown its error often gives the same answer again.
RETRY_TEMPERATURE = 0.3
# ...which also may not repeat a sequence of this many tokens inside one string.
_LOOP_NGRAM = 4


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one call (part of its cache key)."""

    temperature: float
    top_p: float


@dataclass
class _Fitted:
    tokens: list[int]
    stop: list[str]
    trimmed: bool


class Engine(CallCounting):
    """One loaded model. Calls to it are serialised by a lock; any thread may call it.

    Build it with ``Engine.load(entry, manifest, settings)`` or through ``ModelPool``; the
    constructor takes an already loaded backend (tests pass a scripted fake).
    """

    def __init__(self, backend: Any, entry: ModelEntry, settings: Settings, *,
                 cache: CallCache | None = None):
        self.backend = backend
        self.entry = entry
        self.name = entry.name
        self.settings = settings
        self.cache = cache
        self._lock = threading.RLock()
        self._init_counting()
        # Digests, not texts: extraction grammars differ per source, so a long batch sees many.
        self._checked_grammars: set[bytes] = set()

    @classmethod
    def load(cls, entry: ModelEntry, manifest: Manifest, settings: Settings, *,
             cache: CallCache | None = None, hashes: HashCache | None = None) -> "Engine":
        """Check the model's file (exists, GGUF, sha256) and load it into llama.cpp."""
        path = manifest.path_of(entry)
        check_model_file(manifest, entry, hashes=hashes or HashCache.for_settings(settings))
        llm = settings.llm
        backend = LlamaBackend.load(path, name=entry.name, n_ctx=context_size(settings, entry),
                                    n_threads=llm.n_threads, n_batch=llm.n_batch, seed=llm.seed,
                                    chat_format=entry.chat_format or None)
        backend.model_digest = entry.sha256
        if llm.keep_prefixes:
            try:
                backend.store = PrefixStore(state_dir(settings, "cache", "prefixes"), backend.identity())
            except StateError:
                pass  # no writable state folder: heads are kept in memory only
        return cls(backend, entry, settings, cache=cache)

    # ---------------------------------------------------------------- small public API

    @property
    def n_ctx(self) -> int:
        """The context window in tokens (prompt plus output must fit in it)."""
        return self.backend.n_ctx

    def count_tokens(self, text: str) -> int:
        """Length of plain text in this model's tokens."""
        return len(self.backend.tokenize(text))

    def count_prompt(self, messages: Sequence[dict[str, str]]) -> int:
        """Length of a chat in this model's tokens, chat template applied."""
        with self._lock:
            return len(self.backend.render(_check_messages(messages))[0])

    def close(self) -> None:
        """Free the llama.cpp model and context."""
        with self._lock:
            self.backend.close()

    # ---------------------------------------------------------------- structured calls

    def structured(self, messages: Sequence[dict[str, str]], schema: type[M], *,
                   seed: int | None = None, max_tokens: int | None = None,
                   temperature: float | None = None, top_p: float | None = None,
                   purpose: str = "", cache: bool | None = None) -> M:
        """Ask the model for one ``schema`` instance.

        ``messages`` are ``{"role": "system"|"user"|"assistant", "content": str}``; put the
        variable text last (it is what gets trimmed, and shared prefixes are evaluated once).
        ``seed`` defaults to one derived from ``llm.seed`` and the call's content, so the same
        call gives the same output; ``max_tokens``, ``temperature`` and ``top_p`` default to
        the settings; ``cache`` (default ``llm.cache``) reads and writes the call cache.

        Raises GrammarError (schema cannot be compiled), ContextOverflowError (prompt cannot
        fit even trimmed), ModelOutputError (no valid output after the retries).
        """
        msgs = _check_messages(messages)
        text = schema_json(schema)
        grammar = grammar_for(text)
        llm = self.settings.llm
        budget = int(max_tokens or llm.max_output_tokens)
        if budget <= 0:
            raise UsageError(f"max_tokens must be positive, got {budget}")
        sampling = Sampling(temperature=float(llm.temperature if temperature is None else temperature),
                            top_p=float(llm.top_p if top_p is None else top_p))
        if seed is None:
            seed = derive_seed(llm.seed, msgs, text)
        key = call_key({"v": ENGINE_VERSION, "model": self.entry.sha256, "n_ctx": self.n_ctx,
                        "messages": msgs, "schema": text, "temperature": sampling.temperature,
                        "top_p": sampling.top_p, "seed": seed, "max_tokens": budget})
        record = CallRecord(model=self.name, purpose=purpose, schema=schema.__name__, key=key,
                            seed=seed, cache_hit=False)
        use_cache = self.cache is not None and (llm.cache if cache is None else cache)

        meta = {"model": self.name, "schema": schema.__name__, "purpose": purpose, "seed": seed}
        if use_cache:
            hit = self._from_cache(key, schema, record)
            if hit is not None:
                return hit
        try:
            instance, raw = self._attempts(msgs, schema, grammar, budget, sampling, seed, record)
        except Exception as exc:
            record.ok = False
            record.error = getattr(exc, "message", str(exc))
            try:
                if use_cache and self.cache is not None and isinstance(exc, ModelOutputError):
                    self.cache.put_failure(key, exc, {**meta, "attempts": record.attempts})
            finally:
                self._finish(record)
            raise
        try:
            if use_cache and self.cache is not None:
                self.cache.put(key, raw, {**meta, "attempts": record.attempts,
                                          "generated_tokens": record.generated_tokens})
        finally:
            self._finish(record)  # the model work happened even if the cache cannot be written
        return instance

    def _from_cache(self, key: str, schema: type[M], record: CallRecord) -> M | None:
        """The cached instance (``record`` finished as a hit), None on a miss; a cached
        failure is raised again (see ``replay_cached``)."""
        return replay_cached(self.cache, key, schema, record, self._finish)

    def _attempts(self, messages: list[dict[str, str]], schema: type[M], grammar: str, budget: int,
                  sampling: Sampling, seed: int, record: CallRecord) -> tuple[M, str]:
        """The retry loop: generate, detect truncation, validate, show the model its error."""
        trim_index = _last_user_index(messages)
        current = messages
        raws: list[str] = []
        tries = 1 + max(0, int(self.settings.llm.max_retries))
        invalid = 0  # answers given so far that did not validate
        for _ in range(tries):
            with self._lock:
                self._check_grammar(grammar, schema.__name__)
                fitted = self._fit(current, budget, trim_index)
                # After a repetition stop: the next seed, a temperature that can leave the loop,
                # and no repeated n-grams inside a string.
                loops = record.repetition_stops
                escape = {"no_repeat_ngram": _LOOP_NGRAM} if loops else {}
                temperature, call_seed = retry_sampling(sampling.temperature, seed + loops, invalid)
                out = self.backend.complete(fitted.tokens, grammar=grammar, max_tokens=budget,
                                            temperature=(max(temperature, _LOOP_TEMPERATURE)
                                                         if loops else temperature),
                                            top_p=sampling.top_p, seed=call_seed, stop=fitted.stop,
                                            **escape)
            self._count_attempt(record, out, fitted)
            raw = out.text.strip()
            raws.append(raw)
            if out.finish_reason == "repetition":
                # The same prompt and seed would loop the same way (at a low temperature sampling
                # is nearly greedy), and a small model shown its loop copies it: the retry keeps
                # the prompt, samples hotter with the next seed and bans repeated n-grams within
                # a string (all a function of the call, so replay stays exact).
                record.truncations += 1
                record.repetition_stops += 1
                record.errors.append("the output repeated itself and was stopped")
                continue
            if out.finish_reason == "length" and not _complete(raw, schema):
                record.truncations += 1
                error = f"the output was cut off at its budget of {budget} tokens"
                record.errors.append(error)
                room = self.n_ctx - len(fitted.tokens)
                if budget < room:
                    # Same prompt and seed with more room: the model can finish what it began.
                    budget = min(budget * 2, room)
                else:
                    current = messages + _feedback(raw, CUT_OFF_NOTE)
                continue
            try:
                return schema.model_validate_json(raw), raw
            except ValidationError as exc:
                invalid += 1
                current = messages + invalid_feedback(record, raw, exc)
        raise no_valid_output(f"model '{self.name}'", schema, record, raws)

    def _count_attempt(self, record: CallRecord, out: Completion, fitted: _Fitted) -> None:
        record.attempts += 1
        record.prompt_tokens += out.prompt_tokens
        record.prompt_evaluated += out.prompt_evaluated
        record.generated_tokens += out.generated_tokens
        record.sampled_tokens += getattr(out, "sampled_tokens", 0)
        record.forced_tokens += getattr(out, "forced_tokens", 0)
        record.mask_seconds += getattr(out, "mask_seconds", 0.0)
        record.decode_seconds += getattr(out, "decode_seconds", 0.0)
        record.seconds += out.seconds
        record.trimmed = record.trimmed or fitted.trimmed

    def _check_grammar(self, grammar: str, schema_name: str) -> None:
        digest = hashlib.sha256(grammar.encode("utf-8")).digest()
        if digest not in self._checked_grammars:
            self.backend.check_grammar(grammar, schema_name)
            self._checked_grammars.add(digest)

    # ---------------------------------------------------------------- context budget

    def _fit(self, messages: list[dict[str, str]], budget: int, trim_index: int | None) -> _Fitted:
        """Prompt tokens that leave ``budget`` tokens of the context for the output, trimming
        the end of the message at ``trim_index`` (with a visible marker) when needed."""
        limit = self.n_ctx - budget
        tokens, stop = self.backend.render(messages)
        if len(tokens) <= limit:
            return _Fitted(tokens, stop, False)
        if trim_index is None:
            raise self._overflow(len(tokens), budget, "there is no user message to trim")
        content = messages[trim_index]["content"]
        content_tokens = self.backend.tokenize(content)
        keep = len(content_tokens) - (len(tokens) - limit) - len(self.backend.tokenize(TRIM_MARKER))
        for _ in range(_TRIM_ROUNDS):
            if keep <= 0:
                break
            shorter = self.backend.detokenize(content_tokens[:keep]).rstrip() + TRIM_MARKER
            trial = [dict(m) for m in messages]
            trial[trim_index]["content"] = shorter
            tokens, stop = self.backend.render(trial)
            if len(tokens) <= limit:
                return _Fitted(tokens, stop, True)
            # Token boundaries move when text is re-tokenized in context: cut a little more.
            keep -= (len(tokens) - limit) + 2
        raise self._overflow(len(tokens), budget, "even with the last user message trimmed away")

    def _overflow(self, prompt_tokens: int, budget: int, why: str) -> ContextOverflowError:
        return ContextOverflowError(
            f"model '{self.name}': a prompt of {prompt_tokens} tokens plus {budget} output tokens "
            f"does not fit its context of {self.n_ctx} tokens {why}",
            hint="raise llm.n_ctx (up to the model's own context), lower the output budget, "
                 "or shorten the fixed part of the prompt")


class ModelPool:
    """The manifest's models, each loaded once, handed out by role.

    One model holding several roles is one Engine (one llama.cpp context, one lock).
    """

    def __init__(self, settings: Settings, *, manifest: Manifest | None = None,
                 cache: CallCache | None | bool = True):
        self.settings = settings
        self.manifest = manifest or load_manifest_for(settings)
        if cache is True:
            cache = CallCache.for_settings(settings) if settings.llm.cache else None
        self.cache = cache if isinstance(cache, CallCache) else None
        self._hashes = HashCache.for_settings(settings)
        self._engines: dict[str, Any] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def for_role(self, role: str) -> Any:
        """The engine serving ``role`` (planner, extractor, verifier, writer), loaded on first use."""
        return self.engine(resolve_model(self.settings, role, self.manifest).name)

    def engine(self, name: str) -> Any:
        """The engine of the manifest model ``name``, loaded on first use: an ``Engine`` for a
        local file, a ``RemoteEngine`` for a ``kind = "openai"`` entry."""
        with self._lock:
            if name not in self._engines:
                entry = self.manifest.get(name)
                engine: Any
                if entry.is_remote:
                    from .remote import RemoteEngine

                    engine = RemoteEngine(entry, self.settings, cache=self.cache)
                else:
                    engine = Engine.load(entry, self.manifest, self.settings, cache=self.cache,
                                         hashes=self._hashes)
                for listener in self._listeners:
                    engine.add_listener(listener)
                self._engines[name] = engine
            return self._engines[name]

    def load_all_roles(self) -> dict[str, Any]:
        """Load the engine of every role now (fail fast before a run starts)."""
        return {role: self.for_role(role) for role in ROLES}

    def add_listener(self, listener: Listener) -> None:
        """Register a call listener on every engine, loaded now or later."""
        with self._lock:
            self._listeners.append(listener)
            engines = list(self._engines.values())
        for engine in engines:
            engine.add_listener(listener)

    @property
    def accounting(self) -> Accounting:
        """The sum of all engines' counters (a snapshot)."""
        with self._lock:
            engines = list(self._engines.values())
        total = Accounting()
        for engine in engines:
            total = total + engine.accounting
        return total

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()

    def __enter__(self) -> "ModelPool":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


# ---------------------------------------------------------------- helpers

def context_size(settings: Settings, entry: ModelEntry) -> int:
    """The context requested from llama.cpp: ``llm.n_ctx`` capped at the model's own."""
    return max(64, min(int(settings.llm.n_ctx), entry.n_ctx_train))


def derive_seed(base: int, messages: list[dict[str, str]], schema_text: str) -> int:
    """A fixed seed per call content: the same call always samples the same way."""
    payload = json.dumps([base, messages, schema_text], ensure_ascii=False, sort_keys=True)
    return int.from_bytes(hashlib.sha256(payload.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def _check_messages(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
            raise UsageError(f"message {i} must be {{'role': system|user|assistant, 'content': str}}, got {m!r:.80}")
        out.append({"role": m["role"], "content": m["content"]})
    if not out:
        raise UsageError("a structured call needs at least one message")
    return out


def _last_user_index(messages: list[dict[str, str]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "user":
            return i
    return None


def _complete(raw: str, schema: type[BaseModel]) -> bool:
    """True when an output that used its whole budget is nevertheless a valid instance (the
    grammar only lets the closing brace come last, so a valid object is a complete one)."""
    try:
        schema.model_validate_json(raw)
    except ValidationError:
        return False
    return True


CUT_OFF_NOTE = "Your answer was cut off because it was too long. Answer again, much shorter, as JSON only."


def retry_sampling(temperature: float, seed: int, invalid: int) -> tuple[float, int]:
    """The temperature and seed of an attempt after ``invalid`` answers that did not validate:
    the call's own at first; then at least ``RETRY_TEMPERATURE``, each retry with a seed of its
    own, so that a greedy call shown its error can answer otherwise (a function of the call
    alone, so replay stays exact)."""
    if not invalid:
        return temperature, seed
    return max(temperature, RETRY_TEMPERATURE), seed + 1000 * invalid


def invalid_feedback(record: CallRecord, raw: str, exc: ValidationError) -> list[dict[str, str]]:
    """The turns that show the model its invalid answer and what is wrong with it (noted on
    ``record``), for the retry."""
    error = _short_validation_error(exc)
    record.errors.append(error)
    return _feedback(raw, f"That JSON is not valid: {error}. Answer again with corrected JSON only.")


def replay_cached(cache, key: str, schema: type[M], record: CallRecord,
                  finish: Callable[[CallRecord], None]) -> M | None:
    """The instance stored for ``key`` (``record`` finished as a cache hit), or None when there
    is none (or one the schema's validators no longer accept: it is recomputed). A call stored
    as failed raises its ModelOutputError again, as a cache hit that did not succeed."""
    if cache is None:
        return None
    cached = cache.get(key)
    if cached is None:
        return None
    failure = cached.failure()
    if failure is None:
        try:
            instance = schema.model_validate_json(cached.raw)
        except ValidationError:
            cache.delete(key)
            return None
    record.cache_hit = True
    if failure is not None:
        record.ok = False
        record.error = failure.message
        finish(record)
        raise failure
    finish(record)
    return instance


def no_valid_output(where: str, schema: type, record: CallRecord, raws: list[str]) -> ModelOutputError:
    """The error of a call whose every attempt failed, naming its last problem."""
    return ModelOutputError(
        f"{where} gave no valid {schema.__name__}"
        f"{' for ' + record.purpose if record.purpose else ''} in {len(raws)} attempts "
        f"(last problem: {record.errors[-1] if record.errors else 'unknown'})",
        attempts=raws, last_raw=raws[-1] if raws else "",
        hint="a larger model for this role, or higher llm.max_output_tokens / llm.max_retries")


def _feedback(raw: str, note: str) -> list[dict[str, str]]:
    shown = raw if len(raw) <= 600 else raw[:600] + " ..."
    return [{"role": "assistant", "content": shown}, {"role": "user", "content": note}]


def _short_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    text = "; ".join(parts)
    return text if len(text) <= 300 else text[:300] + "..."
