"""Everything that touches llama.cpp through llama-cpp-python, behind one small class.

``LlamaBackend`` is what the engine talks to: render a chat into the model's own tokens, run
one grammar-constrained completion, report the tokens already in llama.cpp's KV cache. A
scripted fake with the same methods drives the engine's control-flow tests.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import GrammarError, ModelError

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
    """One generation: the text, why it stopped, and its token counts."""

    text: str
    finish_reason: str
    prompt_tokens: int
    prompt_evaluated: int
    generated_tokens: int
    seconds: float


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
        return list(prompt), [s for s in stops if s]

    def cached_tokens(self) -> list[int]:
        """Tokens whose evaluation llama.cpp holds in its KV cache from the previous call."""
        return self.llama.input_ids[: self.llama.n_tokens].tolist()

    # -- grammar and generation

    def check_grammar(self, gbnf: str, schema_name: str) -> None:
        """Parse the grammar with llama.cpp now: an unparseable grammar handed to the sampler
        would crash the process, and must instead be a GrammarError."""
        llama_cpp = _llama_cpp()
        vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        _RECENT.clear()
        # The grammar parser prints its error and the whole grammar straight to stderr.
        with quiet_stderr() as err_file:
            sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
            printed = _first_line(err_file)
        if not sampler:
            detail = printed or _last_error_line() or "llama.cpp rejected the grammar"
            raise GrammarError(f"schema {schema_name}: llama.cpp cannot parse its grammar: {detail}",
                               hint="simplify the schema (fewer or shorter bounded fields)")
        llama_cpp.llama_sampler_free(sampler)

    def evaluate_prompt(self, tokens: list[int]) -> int:
        """Evaluate the prompt, reusing the prefix llama.cpp still holds; returns the number of
        tokens reused. Afterwards the prompt is exactly what llama.cpp holds, so generation
        samples at once from the logits checked here.

        Why by hand: llama.cpp's logits for a one-token batch differ slightly from those of
        the same position in a longer batch, so left to llama-cpp-python (the whole prompt
        cached from the previous call, its last token re-evaluated alone) the same call would
        sample differently depending on what ran before it. Here the last decode is always
        the prompt's last two tokens, and no chunk is shorter than that, so a call's output
        does not depend on the cache's history. And damaged weights show up as NaN logits,
        on which llama.cpp's samplers abort the process: they are checked before sampling.
        """
        cached = self.cached_tokens()
        lcp = 0
        for a, b in zip(cached, tokens):
            if a != b:
                break
            lcp += 1
        plan = prefill_plan(len(tokens), lcp, int(self.llama.n_batch))
        self.llama.n_tokens = plan.keep  # eval() drops the KV cache beyond this prefix
        pos = plan.keep
        try:
            for size in plan.chunks:
                self.llama.eval(tokens[pos:pos + size])
                pos += size
        except Exception as exc:  # llama.cpp decode failures surface as RuntimeError
            self.llama.reset()
            detail = _last_error_line() or str(exc)
            raise ModelError(f"model '{self.name}' failed to evaluate a prompt of {len(tokens)} tokens: "
                             f"{detail}") from None
        self._check_logits()
        return plan.keep

    def _check_logits(self) -> None:
        import numpy as np

        llama_cpp = _llama_cpp()
        n_vocab = self.llama.n_vocab()
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llama.ctx, -1), shape=(n_vocab,))
        if not np.isfinite(logits).all():
            self.llama.reset()
            raise ModelError(f"model '{self.name}' computes invalid numbers (NaN or infinite logits): "
                             "its weights are damaged",
                             hint="download the file again; `appliance models verify` checks it against "
                                  "the manifest")

    def complete(self, tokens: list[int], *, gbnf: str, max_tokens: int, temperature: float,
                 top_p: float, seed: int, stop: list[str]) -> Completion:
        """One grammar-constrained completion of prompt ``tokens``."""
        from llama_cpp import LlamaGrammar

        start = time.perf_counter()
        reused = self.evaluate_prompt(tokens)
        try:
            out = self.llama.create_completion(
                prompt=tokens, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                top_k=40, min_p=0.05, repeat_penalty=1.0, seed=seed, stop=stop,
                grammar=LlamaGrammar.from_string(gbnf, verbose=False))
        except Exception as exc:  # llama.cpp decode failures surface as RuntimeError/ValueError
            detail = _last_error_line() or str(exc)
            raise ModelError(f"model '{self.name}' failed while generating: {detail}",
                             hint="`appliance doctor` checks that llama.cpp works on this machine") from None
        seconds = time.perf_counter() - start
        choice = out["choices"][0]
        return Completion(text=choice["text"], finish_reason=choice.get("finish_reason") or "stop",
                          prompt_tokens=len(tokens), prompt_evaluated=len(tokens) - reused,
                          generated_tokens=int(out["usage"]["completion_tokens"]), seconds=seconds)


_TAIL = 2


@dataclass
class PrefillPlan:
    keep: int                # cached tokens reused
    chunks: list[int]        # sizes evaluated in turn; the last is always the two-token tail


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


def _first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().strip()[:300]
    except OSError:
        return ""


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " / ".join(text[-lines:])
