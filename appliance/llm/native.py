"""Everything that touches llama.cpp through llama-cpp-python, behind one small class.

``LlamaBackend`` is what the engine talks to: render a chat into the model's own tokens, run
one grammar-constrained completion (the decode loop of ``decode.py`` over llama.cpp's
low-level evaluation and logits), report the prompt tokens a later call may reuse from
llama.cpp's KV cache. A scripted fake with the same methods drives the engine's control-flow
tests.

llama.cpp writes its chatter (load progress, grammar parse errors) through a log callback
and, for a few messages, straight to file descriptor 2. The callback is replaced by one that
keeps the recent lines in memory (so errors can quote them) and hands them to Python logging;
loading additionally redirects descriptor 2 to a temporary file.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import ModelError
from .prefixes import PrefixStore

log = logging.getLogger("appliance.llm.native")

_RECENT: collections.deque[str] = collections.deque(maxlen=50)
_LOG_LOCK = threading.Lock()
_LOG_INSTALLED = False
_LOG_CALLBACK: Any = None  # kept referenced: ctypes callbacks must outlive their registration


def _llama_cpp():
    """Import llama_cpp lazily (it loads the native library) and install the log hook."""
    global _LOG_INSTALLED, _LOG_CALLBACK
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ModelError(f"llama-cpp-python is not importable: {exc}",
                         hint="run `make install` (it builds llama-cpp-python with CPU-safe flags)") from None
    with _LOG_LOCK:
        if not _LOG_INSTALLED:
            @llama_cpp.llama_log_callback
            def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
                line = text.decode("utf-8", errors="replace").rstrip("\n")
                if line:
                    _RECENT.append(line)
                    log.debug("%s", line)

            llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
            _LOG_CALLBACK = _on_log
            _LOG_INSTALLED = True
    return llama_cpp


def recent_native_log(n: int = 5) -> list[str]:
    """The last lines llama.cpp logged (for error messages)."""
    return list(_RECENT)[-n:]


def _last_error_line() -> str:
    for line in reversed(_RECENT):
        low = line.lower()
        if "error" in low or "failed" in low or "invalid" in low:
            return line.strip()
    return ""


@contextlib.contextmanager
def quiet_stderr() -> Iterator[Path]:
    """Send file descriptor 2 to a temporary file for the duration (llama.cpp writes there
    directly during load). Yields the file's path so a failure can quote it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.NamedTemporaryFile(prefix="appliance-llama-", suffix=".log", delete=False) as tmp:
        path = Path(tmp.name)
    try:
        with open(path, "wb") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield path
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        path.unlink(missing_ok=True)


@dataclass
class Completion:
    """One generation: the text, why it stopped ("stop", "length" or "repetition"), its token
    counts and where its time went."""

    text: str
    finish_reason: str
    prompt_tokens: int
    prompt_evaluated: int
    generated_tokens: int
    seconds: float
    sampled_tokens: int = 0      # output tokens chosen by the sampler
    forced_tokens: int = 0       # output tokens fast-forwarded from the grammar
    mask_seconds: float = 0.0    # computing token masks
    decode_seconds: float = 0.0  # llama.cpp evaluating the prompt and output tokens
    sample_seconds: float = 0.0  # masking logits and sampling


class _Captured(Exception):
    def __init__(self, prompt: Any, stop: Any):
        super().__init__("captured")
        self.prompt = prompt
        self.stop = stop


class _Probe:
    """Stands in for the Llama object inside a llama-cpp-python chat handler: the handler
    formats and tokenizes the chat as it always would, and is stopped before it generates.
    This way every chat format llama-cpp-python knows (the GGUF's own Jinja template first)
    gives the engine the exact prompt tokens, which it needs to budget the context."""

    def __init__(self, llama: Any):
        self._llama = llama

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, prompt: Any = None, stop: Any = None, **_: Any) -> Any:
        raise _Captured(prompt, stop)


class LlamaBackend:
    """One loaded llama.cpp model and context. Not thread-safe: the engine serialises calls."""

    def __init__(self, llama: Any, *, name: str):
        self.llama = llama
        self.name = name
        self.n_ctx = int(llama.n_ctx())
        self._handler = self._chat_handler()
        self._specials = self._special_pattern()
        self._tokenizer: Any = None
        self._pieces: dict[int, bytes] = {}
        self._reusable = 0  # how many of llama.cpp's cached tokens a later call may reuse
        self.prefixes = PrefixBank()
        # Head states kept in the state folder across processes (``Engine.load`` sets it).
        self.store: PrefixStore | None = None
        self.model_digest = ""  # the weights' sha256, part of ``identity``
        # The fixed head of the prompt last rendered (its system message), by system text.
        self._head_lengths: dict[str, int] = {}
        self._last_head: tuple[int, ...] = ()

    # -- loading

    @classmethod
    def load(cls, path: Path, *, name: str, n_ctx: int, n_threads: int, n_batch: int, seed: int,
             chat_format: str | None) -> "LlamaBackend":
        """Load a checked GGUF file. llama.cpp's output is kept off the terminal; a failure is
        a ModelError that quotes llama.cpp's last error line."""
        llama_cpp = _llama_cpp()
        threads = n_threads if n_threads > 0 else (os.cpu_count() or 1)
        try:
            with quiet_stderr() as err_file:
                try:
                    llama = llama_cpp.Llama(
                        model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                        n_threads_batch=threads, n_batch=min(n_batch, n_ctx), seed=seed,
                        chat_format=chat_format or None, verbose=False)
                except Exception as exc:  # llama-cpp-python raises ValueError/RuntimeError
                    detail = _last_error_line() or _tail(err_file) or str(exc)
                    raise ModelError(f"llama.cpp cannot load {path} ('{name}'): {detail}",
                                     hint="the file may be corrupt or need a newer llama.cpp; "
                                          "`appliance models verify` checks the files") from None
        except OSError as exc:
            raise ModelError(f"cannot load {path}: {exc.strerror}") from None
        return cls(llama, name=name)

    def _chat_handler(self) -> Any:
        from llama_cpp import llama_chat_format

        llama = self.llama
        handler = llama.chat_handler or llama._chat_handlers.get(llama.chat_format)
        if handler is None:
            try:
                handler = llama_chat_format.get_chat_completion_handler(llama.chat_format)
            except Exception:
                raise ModelError(f"model '{self.name}': unknown chat format {llama.chat_format!r}",
                                 hint="set chat_format in models/models.toml to \"\" (the GGUF's "
                                      "template) or a llama-cpp-python format such as chatml") from None
        return handler

    def _special_pattern(self) -> re.Pattern | None:
        """A pattern matching the text of the vocabulary's control tokens (<|im_end|> ...)."""
        llama_cpp = _llama_cpp()
        vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        texts = set()
        for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
            if llama_cpp.llama_vocab_get_attr(vocab, token) & special:
                text = llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8", errors="ignore")
                if len(text) >= 2 and not text.isspace():
                    texts.add(text)
        if not texts:
            return None
        return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))

    def defuse(self, text: str) -> str:
        """``text`` with control-token strings broken up by a zero-width space.

        Why: the chat template's output is tokenized with special tokens enabled, so a web
        page containing "<|im_end|><|im_start|>system" would otherwise end the user message
        and inject its own instructions.
        """
        if self._specials is None:
            return text
        return self._specials.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.llama.close()

    # -- tokens

    def tokenize(self, text: str) -> list[int]:
        """Tokens of plain text (no BOS, special tokens not parsed: user text stays text)."""
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llama.detokenize(list(tokens)).decode("utf-8", errors="ignore")

    def render(self, messages: list[dict[str, str]]) -> tuple[list[int], list[str]]:
        """The chat as prompt tokens (chat template applied) plus the template's stop strings.

        Message contents are defused first (see ``defuse``): they are data, never markup."""
        messages = [{"role": m["role"], "content": self.defuse(m["content"])} for m in messages]
        try:
            self._handler(llama=_Probe(self.llama), messages=messages)
        except _Captured as cap:
            prompt, stop = cap.prompt, cap.stop
        except Exception as exc:  # a Jinja template can raise on odd role orders
            raise ModelError(f"model '{self.name}': its chat template rejected the messages: {exc}",
                             hint="check the roles (system, user, assistant) and their order") from None
        else:
            raise ModelError(f"model '{self.name}': chat format {self.llama.chat_format!r} cannot be "
                             "used for structured calls", hint="use the GGUF's template (chat_format = \"\")")
        if isinstance(prompt, str):
            prompt = self.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        tokens = list(prompt)
        self._last_head = tuple(tokens[:self._head_length(messages, tokens)])
        return tokens, [s for s in stops if s]

    def _render_raw(self, messages: list[dict[str, str]]) -> list[int]:
        try:
            self._handler(llama=_Probe(self.llama), messages=messages)
        except _Captured as cap:
            prompt = cap.prompt
        except Exception:  # noqa: BLE001 - a template that cannot render the head alone
            return []
        else:
            return []
        if isinstance(prompt, str):
            prompt = self.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        return list(prompt)

    def _head_length(self, messages: list[dict[str, str]], tokens: list[int]) -> int:
        """How many leading tokens of ``tokens`` the system message fixes: the part every call
        with the same instructions shares, whatever its variable text (worth keeping)."""
        if len(messages) < 2 or messages[0]["role"] != "system":
            return 0
        system = messages[0]["content"]
        if system not in self._head_lengths:
            alone = self._render_raw(messages[:1])
            head = 0
            for a, b in zip(alone, tokens):
                if a != b:
                    break
                head += 1
            self._head_lengths[system] = head
        return self._head_lengths[system]

    # -- grammar and generation

    @property
    def tokenizer(self) -> Any:
        """The grammar library's view of this model's vocabulary (built once, about a second
        for a 150k-token vocabulary; it tokenizes through llama.cpp, nothing is downloaded)."""
        if self._tokenizer is None:
            from llguidance.llamacpp import lltokenizer_from_vocab

            llama_cpp = _llama_cpp()
            with warnings.catch_warnings():
                # llguidance reads token attributes through a call llama-cpp-python marks as
                # deprecated, once per token of the vocabulary.
                warnings.simplefilter("ignore", DeprecationWarning)
                self._tokenizer = lltokenizer_from_vocab(llama_cpp.llama_model_get_vocab(self.llama.model))
        return self._tokenizer

    def matcher(self, grammar: str, schema_name: str) -> Any:
        """A fresh grammar matcher over this vocabulary; GrammarError when the grammar cannot
        be used (llguidance reports errors as a state, never as a crash)."""
        from llguidance import LLMatcher

        from .grammar import grammar_error

        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise grammar_error(schema_name, matcher.get_error())
        return matcher

    def check_grammar(self, grammar: str, schema_name: str) -> None:
        """Build the grammar against this model's vocabulary now, so that a schema it cannot
        use is a GrammarError before any generation starts."""
        self.matcher(grammar, schema_name)

    def evaluate_prompt(self, tokens: list[int]) -> int:
        """Evaluate the prompt, reusing the prefix llama.cpp still holds; returns the number of
        tokens evaluated (each evaluated once). Afterwards the prompt is exactly what llama.cpp holds, so generation
        samples at once from the logits checked here.

        Why by hand: llama.cpp's logits for a one-token batch differ slightly from those of
        the same position in a longer batch, so left to llama-cpp-python (the whole prompt
        cached from the previous call, its last token re-evaluated alone) the same call would
        sample differently depending on what ran before it. Here the last decode is always
        the prompt's last two tokens, and no chunk is shorter than that, so a call's output
        does not depend on the cache's history. And damaged weights show up as NaN logits,
        on which sampling would be meaningless: they are checked before sampling.
        """
        what = f"evaluate a prompt of {len(tokens)} tokens"
        cached = self.cached_tokens()
        lcp = _common_prefix(cached, tokens)
        # The same prompt again (the votes on one claim): everything but the two-token tail
        # was evaluated in the chunks this prompt itself makes.
        again = len(cached) == len(tokens) and lcp >= len(tokens) - _TAIL
        head = self._last_head if tuple(tokens[:len(self._last_head)]) == self._last_head else ()
        if head and lcp < len(head) and self.store is not None and self.prefixes.get(head) is None:
            self._load_kept(head)
        saved = self.prefixes.longest(tokens)
        if saved is not None and len(saved.tokens) > lcp:
            if self._restore(saved):
                lcp, again = len(saved.tokens), False
            else:
                self.prefixes.drop(saved.tokens)  # evaluated again below, in the head's own chunks
        evaluated = 0
        if head and lcp < len(head) <= len(tokens) - 2 * _TAIL and self.prefixes.get(head) is None:
            # Evaluate up to the end of the fixed head, keep its state, then go on from there:
            # the next call with the same instructions starts from it whatever ran in between.
            # The head is evaluated from the start of the prompt, in its own chunks: reusing a
            # few tokens another prompt left (the chat template's opening) would chunk it
            # differently, and llama.cpp's numbers for a position depend slightly on its chunk:
            # every later call with these instructions would then depend on what ran first.
            evaluated = self._evaluate(tokens[:len(head)], aligned_keep(lcp, 0, int(self.llama.n_batch)), what)
            self._save(head)
            lcp = len(head)
        elif not again:
            base = len(head) if head and lcp >= len(head) else 0
            lcp = aligned_keep(lcp, base, int(self.llama.n_batch))
        evaluated += self._evaluate(tokens, lcp, what)
        self._check_logits()
        return evaluated

    def _evaluate(self, tokens: list[int], lcp: int, what: str) -> int:
        """Evaluate ``tokens`` whose first ``lcp`` are in the KV cache (see ``prefill_plan``);
        returns the number of tokens evaluated."""
        plan = prefill_plan(len(tokens), lcp, int(self.llama.n_batch))
        self.llama.n_tokens = plan.keep  # eval() drops the KV cache beyond this prefix
        self._reusable = plan.keep
        pos = plan.keep
        for size in plan.chunks:
            self._eval(tokens[pos:pos + size], what)
            pos += size
        self._reusable = len(tokens)
        return len(tokens) - plan.keep

    def _save(self, head: tuple[int, ...]) -> None:
        """Keep the KV state of exactly ``head`` (what llama.cpp holds now) in the bank."""
        llama_cpp = _llama_cpp()
        ctx = self.llama.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0) == size:
            self.prefixes.put(SavedPrefix(tokens=head, state=buffer))
            if self.store is not None:
                self.store.save(head, bytes(buffer))

    def _load_kept(self, head: tuple[int, ...]) -> None:
        """Put the head's state kept in the state folder (``prefixes.PrefixStore``), if any,
        into the memory bank, from where it is restored like one saved in this process."""
        assert self.store is not None
        state = self.store.load(head)
        if state is not None:
            self.prefixes.put(SavedPrefix(tokens=head, state=(ctypes.c_uint8 * len(state)).from_buffer_copy(state)))

    def identity(self) -> str:
        """What a kept KV state is valid for: the weights, llama.cpp's build and CPU features,
        the context and batch sizes and the threads (a state restored elsewhere would make
        outputs differ from evaluating the same prompt here)."""
        llama_cpp = _llama_cpp()
        try:
            system = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - an older binding: the version stands for the build
            system = ""
        params = self.llama.context_params
        return "|".join(str(part) for part in (
            getattr(llama_cpp, "__version__", "?"), system, self.model_digest, self.n_ctx,
            int(self.llama.n_batch), params.n_ubatch, params.n_threads, params.n_threads_batch, params.type_k,
            params.type_v, getattr(params, "flash_attn_type", getattr(params, "flash_attn", ""))))

    def _restore(self, saved: "SavedPrefix") -> bool:
        """Put a saved prefix's KV state back as the sequence llama.cpp holds (a memory copy:
        its logits are those of evaluating it again, byte for byte)."""
        llama_cpp = _llama_cpp()
        n = len(saved.tokens)
        if llama_cpp.llama_state_seq_set_data(self.llama.ctx, saved.state, len(saved.state), 0) == 0:
            self.llama.reset()
            self._reusable = 0
            return False
        self.llama.n_tokens = n
        self.llama.input_ids[:n] = saved.tokens
        self._reusable = n
        self.prefixes.restored += 1
        return True

    def cached_tokens(self) -> list[int]:
        """Tokens whose evaluation llama.cpp holds in its KV cache and a later call may reuse.

        Only prompt tokens count: output tokens were evaluated one by one or in batches shaped
        by the grammar, and llama.cpp's results for a position depend slightly on its batch,
        so reusing them would make a later call depend on what ran before it."""
        return self.llama.input_ids[: min(self.llama.n_tokens, self._reusable)].tolist()

    def _eval(self, tokens: Sequence[int], what: str) -> None:
        try:
            self.llama.eval(tokens)
        except Exception as exc:  # llama.cpp decode failures surface as RuntimeError
            self.llama.reset()
            self._reusable = 0
            detail = _last_error_line() or str(exc)
            raise ModelError(f"model '{self.name}' failed to {what}: {detail}",
                             hint="`appliance doctor` checks that llama.cpp works on this machine") from None

    def _logits(self) -> Any:
        import numpy as np

        llama_cpp = _llama_cpp()
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llama.ctx, -1),
                                     shape=(self.llama.n_vocab(),))

    def _check_logits(self) -> None:
        import numpy as np

        if not np.isfinite(self._logits()).all():
            self.llama.reset()
            self._reusable = 0
            raise ModelError(f"model '{self.name}' computes invalid numbers (NaN or infinite logits): "
                             "its weights are damaged",
                             hint="download the file again; `appliance models verify` checks it against "
                                  "the manifest")

    def _piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode_bytes([token])
        return piece

    def complete(self, tokens: list[int], *, grammar: str, max_tokens: int, temperature: float,
                 top_p: float, seed: int, stop: list[str], schema_name: str = "?",
                 no_repeat_ngram: int = 0) -> Completion:
        """One grammar-constrained completion of prompt ``tokens`` (``no_repeat_ngram``: see
        ``decode.generate``).

        ``grammar`` is the llguidance grammar from ``grammar.grammar_for``; ``stop`` is not
        needed: the grammar admits no control token, and generation ends where the grammar
        does."""
        from .decode import Sampler, generate

        start = time.perf_counter()
        matcher = self.matcher(grammar, schema_name)
        evaluated = self.evaluate_prompt(tokens)
        prefill = time.perf_counter() - start
        tokenizer = self.tokenizer
        gen = generate(_Evaluator(self), matcher, Sampler(seed=seed, temperature=temperature, top_p=top_p),
                       max_tokens=max_tokens, eos=tokenizer.eos_tokens, piece=self._piece,
                       n_vocab=tokenizer.vocab_size, no_repeat_ngram=no_repeat_ngram)
        text = self.llama.detokenize(gen.tokens).decode("utf-8", errors="replace")
        return Completion(text=text, finish_reason=gen.finish_reason, prompt_tokens=len(tokens),
                          prompt_evaluated=evaluated, generated_tokens=len(gen.tokens),
                          seconds=time.perf_counter() - start, sampled_tokens=gen.sampled,
                          forced_tokens=gen.forced, mask_seconds=gen.mask_seconds,
                          decode_seconds=prefill + gen.decode_seconds,
                          sample_seconds=gen.sample_seconds)


class _Evaluator:
    """The decode loop's view of a backend: evaluate output tokens, read the last logits."""

    def __init__(self, backend: LlamaBackend):
        self._backend = backend

    def eval(self, tokens: Sequence[int]) -> None:
        self._backend._eval(list(tokens), "generate")

    def logits(self) -> Any:
        return self._backend._logits()


_TAIL = 2


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class SavedPrefix:
    tokens: tuple[int, ...]
    state: Any  # llama.cpp's serialised KV state of the sequence (a ctypes byte array)


class PrefixBank:
    """KV states of the fixed heads of prompts (their system messages), most recent first.

    With one llama.cpp sequence, only the previous call's prompt is in the KV cache, and the
    pipeline interleaves prompt kinds (extract, answer, vote...): each would evaluate its long
    fixed instructions again. Restoring a saved head is a memory copy of a few megabytes."""

    def __init__(self, capacity: int = 16):
        self.capacity = capacity
        self._items: "collections.OrderedDict[tuple[int, ...], SavedPrefix]" = collections.OrderedDict()
        self.restored = 0

    def get(self, head: tuple[int, ...]) -> SavedPrefix | None:
        return self._items.get(head)

    def put(self, saved: SavedPrefix) -> None:
        self._items[saved.tokens] = saved
        self._items.move_to_end(saved.tokens, last=False)
        while len(self._items) > self.capacity:
            self._items.popitem(last=True)

    def drop(self, head: tuple[int, ...]) -> None:
        self._items.pop(head, None)

    def longest(self, tokens: Sequence[int]) -> SavedPrefix | None:
        """The longest saved head that ``tokens`` begin with (leaving at least two tokens)."""
        best = None
        for head, saved in self._items.items():
            if len(head) <= len(tokens) - _TAIL and (best is None or len(head) > len(best.tokens)) \
                    and tuple(tokens[:len(head)]) == head:
                best = saved
        if best is not None:
            self._items.move_to_end(best.tokens, last=False)
        return best

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class PrefillPlan:
    keep: int                # cached tokens reused
    chunks: list[int]        # sizes evaluated in turn; the last is always the two-token tail


def aligned_keep(lcp: int, base: int, n_batch: int) -> int:
    """How much of a cached prefix of ``lcp`` tokens to reuse so that every position is
    evaluated in the chunks the prompt makes on its own: chunks run from ``base`` (the end of
    the fixed head, or 0) in steps of ``n_batch``, so reuse stops at the last such boundary
    within the prefix. A prefix another prompt left was chunked from the same boundaries up
    to there; past it, its chunks ended where that prompt's text did."""
    step = max(n_batch, 2 * _TAIL)
    if lcp < base:  # within the head, which is chunked from the prompt's start
        return lcp // step * step
    return base + (lcp - base) // step * step


def prefill_plan(n_prompt: int, lcp: int, n_batch: int) -> PrefillPlan:
    """How to evaluate a prompt of ``n_prompt`` tokens whose first ``lcp`` are cached: reuse a
    prefix, evaluate the rest in chunks of at least two and at most ``n_batch`` tokens, the
    last chunk being exactly the prompt's last two tokens (prompts under four tokens: one chunk)."""
    if n_prompt < 2 * _TAIL:
        return PrefillPlan(0, [n_prompt] if n_prompt else [])
    keep = min(lcp, n_prompt - _TAIL)
    rest = n_prompt - _TAIL - keep
    if rest == 1:  # a one-token chunk: take one more token from the cached prefix
        keep, rest = keep - 1, 2
    n_batch = max(n_batch, 2 * _TAIL)
    chunks = [n_batch] * (rest // n_batch)
    if rest % n_batch:
        chunks.append(rest % n_batch)
    if len(chunks) > 1 and chunks[-1] < _TAIL:
        chunks[-2] -= _TAIL - chunks[-1]
        chunks[-1] = _TAIL
    return PrefillPlan(keep, chunks + [_TAIL])


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " / ".join(text[-lines:])
