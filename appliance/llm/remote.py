"""Structured calls to a model behind an OpenAI-compatible server (llama.cpp's llama-server,
llama-cpp-python's server, vLLM, SGLang, Ollama), behind the same StructuredModel protocol
as the in-process ``Engine``.

Every call sends the contract's JSON Schema as the server's structured-output parameter; the
answer is validated and retried exactly as in-process. A server is probed once, before its
first call, with a schema it must honour (an enum of two values nobody would write unasked):
a server that ignores schemas is refused unless its entry says ``schema_check = "validate"``.
Cache keys carry the server's own model identity (``/v1/models``, ``/props``), so replay
never mixes models; replay rests on the cache, never on the server's determinism.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from ..config import Settings
from ..errors import ModelError, ModelOutputError, UsageError
from .accounting import CallCounting, CallRecord
from .cache import CallCache, call_key
from .engine import (CUT_OFF_NOTE, _check_messages, _feedback, derive_seed, invalid_feedback, no_valid_output,
                     replay_cached, retry_sampling)
from .grammar import schema_json
from .manifest import ModelEntry, RemoteSpec

M = TypeVar("M", bound=BaseModel)

# Part of every remote cache key: bump it when request construction or retries change.
REMOTE_VERSION = 2
_PROBE_VALUES = ("quokka-7", "zebra-3")
_PROBE_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"pick": {"type": "string", "enum": list(_PROBE_VALUES)}},
    "required": ["pick"], "additionalProperties": False}
# The probe's answer budget: llama-server's grammar lets the model lay the JSON out over lines
# ('{\n  "pick" : "zebra-3"\n}'), which 24 tokens cut short of its closing brace.
_PROBE_TOKENS = 64
_RETRY_STATUS = {429, 502, 503, 504}
_BACKOFF_CAP = 30.0


class RemoteEngine(CallCounting):
    """One model on an OpenAI-compatible server. Thread-safe; as many requests in flight as
    the server has slots (the entry's ``slots``, else llama-server's /props ``total_slots``,
    else one). A run's calls are made in its own order on each of its threads, so calls that
    share a prompt prefix (a claim's votes) still follow one another."""

    def __init__(self, entry: ModelEntry, settings: Settings, *, cache: CallCache | None = None,
                 client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep):
        if entry.remote is None:
            raise UsageError(f"model '{entry.name}' is not a server entry (kind = \"openai\")")
        self.entry = entry
        self.spec: RemoteSpec = entry.remote
        self.name = entry.name
        self.settings = settings
        self.cache = cache
        self.n_ctx = entry.n_ctx_train
        headers = {}
        if self.spec.api_key_env:
            token = os.environ.get(self.spec.api_key_env, "")
            if not token:
                raise ModelError(f"model '{self.name}': the environment variable "
                                 f"{self.spec.api_key_env} (api_key_env) is empty",
                                 hint="export the server's token in it, or remove api_key_env")
            headers["Authorization"] = f"Bearer {token}"
        self._client = client or httpx.Client(base_url=self.spec.base_url, headers=headers,
                                              timeout=self.spec.timeout)
        self._sleep = sleep
        self._lock = threading.RLock()
        self._init_counting()
        self._identity: str | None = None
        self._probed = False
        self._props_data: dict | None = None
        self._slots: threading.BoundedSemaphore | None = None
        self.slots = 0   # requests in flight at once, known after the first call
        # Requests that reached the server's generation endpoint (the probe included).
        self.remote_calls = 0
        # One line per transient problem met (429, 503, timeout, connection refused).
        self.notes: list[str] = []

    # ---------------------------------------------------------------- protocol

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    @property
    def where(self) -> str:
        return f"model '{self.name}' at {self.spec.base_url}"

    # ---------------------------------------------------------------- identity and probe

    def identity(self) -> str:
        """The server's identity of the model (cached per engine): the model id it lists at
        ``/v1/models``, plus what ``/props`` says about the loaded file when it answers."""
        with self._lock:
            if self._identity is None:
                data = self._request("GET", "/v1/models", None).json()
                ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
                if self.spec.model not in ids:
                    raise ModelError(f"{self.where} does not serve {self.spec.model!r} "
                                     f"(it lists {', '.join(map(str, ids)) or 'nothing'})",
                                     hint=f"set model = one of those in the manifest entry '{self.name}'")
                parts = [self.spec.model]
                for m in data["data"]:
                    if isinstance(m, dict) and m.get("id") == self.spec.model:
                        # Not "created": llama-server gives the time of the request there, which
                        # would give every run new cache keys and no replay.
                        parts.append(json.dumps({k: m.get(k) for k in ("owned_by", "meta")},
                                                sort_keys=True, default=str))
                parts.append(self._props())
                self._identity = "|".join(parts)
            return self._identity

    def _server_props(self) -> dict:
        """llama-server's /props (the loaded file, its slots); {} where the server has none."""
        if self._props_data is None:
            self._props_data = {}
            try:
                response = self._client.get("/props")
                props = response.json() if response.status_code == 200 else {}
            except (httpx.HTTPError, ValueError):
                props = {}
            if isinstance(props, dict):
                self._props_data = props
        return self._props_data

    def _props(self) -> str:
        props = self._server_props()
        settings = props.get("default_generation_settings", {})
        settings = settings if isinstance(settings, dict) else {}
        return str(props.get("model_path") or settings.get("model") or "")

    def _slot_gate(self) -> threading.BoundedSemaphore:
        """The gate of requests in flight: the entry's slots, else the server's, else one."""
        with self._lock:
            if self._slots is None:
                told = self._server_props().get("total_slots") if not self.spec.slots else None
                server = told if isinstance(told, int) and not isinstance(told, bool) and told > 0 else 1
                self.slots = min(256, self.spec.slots or server)
                self._slots = threading.BoundedSemaphore(self.slots)
            return self._slots

    def probe(self) -> bool:
        """Ask for a value only the schema names: True when the server honoured it. A server
        that does not is refused (ModelError) unless the entry opts into ``validate``."""
        with self._lock:
            if self._probed:
                return True
            self.identity()
            messages = [{"role": "user", "content": "Write a haiku about the sea."}]
            body = self._body(messages, _PROBE_SCHEMA, "probe", max_tokens=_PROBE_TOKENS, temperature=0.0,
                              top_p=1.0, seed=1)
            text, _, _ = self._complete(body)
            try:
                honoured = json.loads(text).get("pick") in _PROBE_VALUES
            except (ValueError, AttributeError):
                honoured = False
            if not honoured and self.spec.schema_check == "enforce":
                raise ModelError(
                    f"{self.where} ignored the JSON Schema sent as response_format="
                    f"{self.spec.response_format!r} (asked for one of {'/'.join(_PROBE_VALUES)}, "
                    f"got {text.strip()[:60]!r})",
                    hint=f"use a server that enforces schemas, try response_format = "
                         f"\"{'json_object' if self.spec.response_format == 'json_schema' else 'json_schema'}\""
                         f", or set schema_check = \"validate\" in the manifest entry '{self.name}'")
            self._probed = True
            return honoured

    # ---------------------------------------------------------------- structured calls

    def structured(self, messages: Sequence[dict[str, str]], schema: type[M], *,
                   seed: int | None = None, max_tokens: int | None = None,
                   temperature: float | None = None, top_p: float | None = None,
                   purpose: str = "", cache: bool | None = None) -> M:
        """One validated ``schema`` instance from the server (see ``Engine.structured``).

        Raises ModelError (server refused, down, or still failing after its retries) and
        ModelOutputError (no valid output after the validation retries)."""
        msgs = _check_messages(messages)
        text = schema_json(schema)
        llm = self.settings.llm
        budget = int(max_tokens or llm.max_output_tokens)
        if budget <= 0:
            raise UsageError(f"max_tokens must be positive, got {budget}")
        temp = float(llm.temperature if temperature is None else temperature)
        nucleus = float(llm.top_p if top_p is None else top_p)
        if seed is None:
            seed = derive_seed(llm.seed, msgs, text)
        key = call_key({"v": REMOTE_VERSION, "backend": "openai", "model": self.identity(),
                        "messages": msgs, "schema": text, "temperature": temp, "top_p": nucleus,
                        "seed": seed, "max_tokens": budget})
        record = CallRecord(model=self.name, purpose=purpose, schema=schema.__name__, key=key,
                            seed=seed, cache_hit=False)
        use_cache = self.cache is not None and (llm.cache if cache is None else cache)
        meta = {"model": self.name, "server": self.spec.base_url, "schema": schema.__name__,
                "purpose": purpose, "seed": seed}
        if use_cache:
            hit = replay_cached(self.cache, key, schema, record, self._finish)
            if hit is not None:
                return hit
        try:
            self.probe()
            sent, renamed = server_enums(server_schema(json.loads(text)))
            instance, raw = self._attempts(msgs, schema, sent, budget, temp, nucleus, seed, record, renamed)
        except Exception as exc:
            record.ok = False
            record.error = getattr(exc, "message", str(exc))
            try:
                # No valid output is the model's answer to this call, stored like one; a server
                # that is down or refuses (ModelError) is not, and is asked again next time.
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
            self._finish(record)
        return instance

    def _attempts(self, messages: list[dict[str, str]], schema: type[M], schema_obj: dict, budget: int,
                  temperature: float, top_p: float, seed: int, record: CallRecord,
                  renamed: dict[str, str] | None = None) -> tuple[M, str]:
        current = messages
        raws: list[str] = []
        invalid = 0  # answers given so far that did not validate (a cut-off one included)
        for _ in range(1 + max(0, int(self.settings.llm.max_retries))):
            attempt_temperature, attempt_seed = retry_sampling(temperature, seed, invalid)
            body = self._body(current, schema_obj, schema.__name__, max_tokens=budget,
                              temperature=attempt_temperature, top_p=top_p, seed=attempt_seed)
            started = time.monotonic()
            with self._slot_gate():
                raw, finish, usage = self._complete(body)
            record.attempts += 1
            record.seconds += time.monotonic() - started
            record.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            record.prompt_evaluated += int(usage.get("prompt_tokens") or 0)
            record.generated_tokens += int(usage.get("completion_tokens") or 0)
            raw = restore_enums(raw.strip(), renamed or {})
            raws.append(raw)
            try:
                return schema.model_validate_json(raw), raw
            except ValidationError as exc:
                invalid += 1
                if finish == "length":
                    record.truncations += 1
                    record.errors.append(f"the output was cut off at its budget of {budget} tokens")
                    current = messages + _feedback(raw, CUT_OFF_NOTE)
                    continue
                current = messages + invalid_feedback(record, raw, exc)
        raise no_valid_output(self.where, schema, record, raws)

    def _body(self, messages: list[dict[str, str]], schema: dict, name: str, *, max_tokens: int,
              temperature: float, top_p: float, seed: int) -> dict[str, Any]:
        if self.spec.response_format == "json_object":
            fmt: dict[str, Any] = {"type": "json_object", "schema": schema}
        else:
            fmt = {"type": "json_schema", "json_schema": {"name": name[:64] or "answer",
                                                          "schema": schema, "strict": True}}
        return {"model": self.spec.model, "messages": messages, "response_format": fmt,
                "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                "seed": seed, "stream": False}

    def _complete(self, body: dict[str, Any]) -> tuple[str, str, dict]:
        with self._lock:
            self.remote_calls += 1
        data = self._request("POST", "/v1/chat/completions", body).json()
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"{self.where} answered without choices[0].message.content",
                             hint="is base_url an OpenAI-compatible server?") from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return str(text), str(choice.get("finish_reason") or ""), usage

    # ---------------------------------------------------------------- HTTP with back-off

    def _request(self, method: str, path: str, body: dict | None) -> httpx.Response:
        """One request, retried with exponential back-off on 429/5xx-busy, timeouts and a
        refused connection (a server restarting); each problem is noted in one line."""
        tries = 1 + self.spec.http_retries
        problem = ""
        for attempt in range(tries):
            wait: float | None = None
            try:
                response = self._client.request(method, path, json=body)
            except httpx.TimeoutException:
                problem = f"timed out after {self.spec.timeout:g} s (the entry's timeout)"
            except httpx.TransportError as exc:
                problem = f"cannot be reached ({type(exc).__name__}: {exc})"
            else:
                if response.status_code in _RETRY_STATUS:
                    problem = f"answered {response.status_code} (busy)"
                    wait = _retry_after(response)
                elif response.status_code >= 400:
                    raise ModelError(f"{self.where} answered {response.status_code} to {path}: "
                                     f"{response.text.strip()[:160]}",
                                     hint=f"check model / response_format in the manifest entry '{self.name}'")
                else:
                    return response
            if attempt + 1 >= tries:
                break
            if wait is None:
                wait = min(_BACKOFF_CAP, 0.5 * 2 ** attempt)
            self.notes.append(f"{self.where} {problem}; retry {attempt + 1} of {tries - 1} in {wait:.1f} s")
            self._sleep(wait)
        raise ModelError(f"{self.where} {problem}; gave up after {tries} tries",
                         hint=f"start the server or raise timeout / http_retries in the manifest "
                              f"entry '{self.name}'")


def server_schema(schema: Any) -> Any:
    """The contract's JSON Schema as a server is sent it: every part kept (types, required
    keys, enums such as a quote's source sentences, item counts) but strings' maxLength.

    llama.cpp's servers turn a maxLength into that many optional repetitions of a character,
    and a string bounded so inside items of a bounded list multiplies past their grammar
    parser's repetition limit: the request fails ("number of rules that are going to be
    repeated ... exceeds sane defaults") and llama-cpp-python's server dies of it. The length
    bound stays a check here: the answer is validated against the whole contract, and the
    request's max_tokens bounds what the model writes."""
    if isinstance(schema, dict):
        return {k: server_schema(v) for k, v in schema.items() if not (k == "maxLength" and isinstance(v, int))}
    if isinstance(schema, list):
        return [server_schema(v) for v in schema]
    return schema


# Characters llama-cpp-python's server escapes wrongly inside an enum value when it turns the
# schema into its grammar: the grammar does not parse and the server process dies of it.
_UNSAFE_IN_ENUMS = str.maketrans({'"': "'", "\\": "/"})


def server_enums(schema: Any) -> tuple[Any, dict[str, str]]:
    """``schema`` with every enum value that holds a double quote or backslash (a quote's
    source sentence may: 'He called it "the end".') sent with single quotes and slashes
    instead, and the map from each value as sent back to the contract's own. A value whose
    safe form is another value of the same enum is left out of what the server may choose."""
    renamed: dict[str, str] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        for key in ("enum", "const"):
            if key not in out:
                continue
            values = out[key]
            many = isinstance(values, list)
            safe_values: list[Any] = []
            taken = {v for v in (values if many else [values]) if isinstance(v, str)}
            for value in (values if many else [values]):
                if isinstance(value, str) and value != value.translate(_UNSAFE_IN_ENUMS):
                    safe = value.translate(_UNSAFE_IN_ENUMS)
                    if safe in taken or safe in renamed:
                        continue
                    renamed[safe] = value
                    taken.add(safe)
                    value = safe
                safe_values.append(value)
            out[key] = safe_values if many else (safe_values[0] if safe_values else values)
        return out

    return walk(schema), renamed


def restore_enums(raw: str, renamed: dict[str, str]) -> str:
    """A server's JSON answer with each enum value ``server_enums`` renamed put back as the
    contract has it; the text as it is when there is none, or it is no JSON."""
    if not renamed:
        return raw
    try:
        data = json.loads(raw)
    except ValueError:
        return raw

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return renamed.get(node, node)
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return json.dumps(walk(data), ensure_ascii=False)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return min(_BACKOFF_CAP, max(0.0, float(value)))
    except ValueError:
        return None


def wait_until_serving(base_url: str, timeout: float, process: Any = None) -> bool:
    """Whether the OpenAI-compatible server at ``base_url`` answers ``/v1/models`` within
    ``timeout`` seconds; gives up at once when ``process`` (the server's ``Popen``) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            if httpx.get(f"{base_url.rstrip('/')}/v1/models", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False
