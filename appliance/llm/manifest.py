"""The model manifest (models/models.toml): which GGUF files exist, their hashes, context
lengths, chat formats and the roles they serve; plus file checks and hashing.

A model is only handed to llama.cpp after its file has been checked here: it exists, starts
with the GGUF magic, its header is complete, and its sha256 matches the manifest. Hashing a
large file takes seconds, so verified hashes are remembered by (path, size, mtime) in the
state folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from ..atomic import write_atomic
from ..config import Settings, state_dir
from ..contracts import ROLES
from ..errors import ConfigError, ModelError, StateError, UsageError
from .gguf import GGUFInfo, read_gguf

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CHUNK = 1 << 20
# How long a process waits for another one's update of the hash cache before giving up on
# recording its own (an update takes milliseconds; the cache only saves time).
_LOCK_SECONDS = 10.0
FETCH_HINT = "run `make models` (or `appliance models add PATH` for your own file)"

_HEADER = """\
# The model manifest: one [[model]] table per local GGUF file.
#   name         how settings and commands refer to the model
#   file         path of the .gguf, relative to this folder (or absolute)
#   sha256       checked before the file is handed to llama.cpp
#   size         file size in bytes (a quick check before hashing)
#   n_ctx_train  the model's training context length, from its GGUF metadata
#   chat_format  "" uses the chat template inside the GGUF; otherwise a llama-cpp-python
#                chat format name such as "chatml"
#   roles        planner, extractor, verifier, writer: the first model listing a role serves
#                it unless [models] in the config names another
#   source       where the file came from (informational)
#   gguf_name    optional: the file's general.name metadata, checked with the file
#   file_type    optional: the file's general.file_type (quantisation, 15 = Q4_K_M), checked too
# `appliance models add PATH` and `make models` write this file; hand edits are fine.
# A model served by an OpenAI-compatible server instead: kind = "openai", base_url, model
# (the server's model name), roles, and optionally response_format ("json_schema", or
# "json_object" for llama-cpp-python's server), schema_check ("enforce", or "validate" to
# accept a server that ignores schemas), timeout, http_retries, api_key_env, n_ctx_train, slots
# (requests in flight at once; 0 = as many as the server's /props total_slots says, else 1).
"""


@dataclass(frozen=True)
class ModelEntry:
    """One manifest entry."""

    name: str
    file: str
    sha256: str
    n_ctx_train: int
    roles: tuple[str, ...] = ()
    chat_format: str = ""
    size: int | None = None
    source: str = ""
    # Expected GGUF metadata ("" / None: not checked): a file with the right hash but the
    # wrong metadata cannot exist, but a hand-edited entry can name the wrong file.
    gguf_name: str = ""
    file_type: int | None = None
    # kind "openai": the model is served by an OpenAI-compatible server, not a local file
    # (file and sha256 stay empty; the server's own model identity goes into cache keys).
    kind: str = "gguf"
    remote: "RemoteSpec | None" = None

    @property
    def is_remote(self) -> bool:
        return self.kind == "openai"

    def path(self, base: Path) -> Path:
        """The GGUF file's location; relative files are relative to the manifest's folder."""
        p = Path(self.file).expanduser()
        return p if p.is_absolute() else base / p


@dataclass(frozen=True)
class RemoteSpec:
    """Where and how an ``kind = "openai"`` entry is served."""

    base_url: str
    model: str
    # How the schema is sent: "json_schema" (OpenAI, llama-server, vLLM) or "json_object"
    # (llama-cpp-python's server: {"type": "json_object", "schema": ...}).
    response_format: str = "json_schema"
    # "enforce": a server that ignores the schema is refused; "validate": accept it and rely
    # on validation and retries alone (the user's explicit choice).
    schema_check: str = "enforce"
    timeout: float = 120.0
    # Retries of one request after 429/503/timeouts/connection errors, with back-off.
    http_retries: int = 4
    # Name of an environment variable holding a bearer token ("" = none).
    api_key_env: str = ""
    # Requests one engine has in flight at once: the server's parallel slots. 0: as many as
    # llama-server's /props total_slots says, 1 where the server does not say.
    slots: int = 0


_REMOTE_KEYS = {"base_url", "model", "response_format", "schema_check", "timeout", "http_retries",
                "api_key_env", "slots"}


def _remote_from_table(table: dict, where: str, name: str) -> RemoteSpec:
    base, model = table.get("base_url"), table.get("model")
    if not isinstance(base, str) or not base.startswith(("http://", "https://")):
        raise ConfigError(f"{where} ({name}): kind = \"openai\" needs base_url = \"http://HOST:PORT\"")
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where} ({name}): kind = \"openai\" needs model = the server's model name")
    fmt = table.get("response_format", "json_schema")
    if fmt not in ("json_schema", "json_object"):
        raise ConfigError(f"{where} ({name}): response_format must be \"json_schema\" or \"json_object\"")
    check = table.get("schema_check", "enforce")
    if check not in ("enforce", "validate"):
        raise ConfigError(f"{where} ({name}): schema_check must be \"enforce\" or \"validate\"")
    timeout = table.get("timeout", 120.0)
    retries = table.get("http_retries", 4)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ConfigError(f"{where} ({name}): timeout must be a positive number of seconds")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"{where} ({name}): http_retries must be a count >= 0")
    slots = table.get("slots", 0)
    if not isinstance(slots, int) or isinstance(slots, bool) or not 0 <= slots <= 256:
        raise ConfigError(f"{where} ({name}): slots must be a count from 0 (ask the server) to 256")
    key_env = table.get("api_key_env", "")
    if not isinstance(key_env, str):
        raise ConfigError(f"{where} ({name}): api_key_env must be an environment variable's name")
    return RemoteSpec(base_url=base.rstrip("/"), model=model, response_format=fmt,
                      schema_check=check, timeout=float(timeout), http_retries=retries,
                      api_key_env=key_env, slots=slots)


@dataclass
class Manifest:
    """The parsed manifest file; ``base`` is the folder relative files live in."""

    path: Path
    models: list[ModelEntry] = field(default_factory=list)

    @property
    def base(self) -> Path:
        return self.path.parent

    def get(self, name: str) -> ModelEntry:
        """The entry called ``name``; UsageError listing the known names otherwise."""
        for entry in self.models:
            if entry.name == name:
                return entry
        known = ", ".join(e.name for e in self.models) or "none"
        raise UsageError(f"no model named {name!r} in {self.path}", hint=f"known models: {known}")

    def path_of(self, entry: ModelEntry) -> Path:
        return entry.path(self.base)


# ---------------------------------------------------------------- reading and writing

def manifest_path(settings: Settings) -> Path:
    """The manifest file named by ``models.manifest``: relative to the working folder, or, when
    no such file is there, to the project folder this package was installed from (so the
    command works from any folder)."""
    path = Path(settings.models.manifest).expanduser()
    if not path.is_absolute() and not path.exists():
        project = Path(__file__).resolve().parents[2] / path
        if project.exists():
            return project
    return path


def load_manifest(path: str | Path) -> Manifest:
    """Parse and check a manifest file: ModelError if missing, ConfigError if malformed."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ModelError(f"model manifest {path} does not exist",
                         hint="run from the project folder, or set models.manifest / "
                              "APPLIANCE_MODELS_MANIFEST") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"model manifest {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ModelError(f"cannot read model manifest {path}: {exc.strerror}") from None
    tables = raw.get("model", [])
    if not isinstance(tables, list):
        raise ConfigError(f"model manifest {path}: 'model' must be an array of [[model]] tables")
    models = [_entry_from_table(t, path, i) for i, t in enumerate(tables)]
    names = [m.name for m in models]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"model manifest {path} lists {', '.join(dupes)} more than once")
    return Manifest(path=path, models=models)


def load_manifest_for(settings: Settings) -> Manifest:
    """The manifest the settings point at."""
    return load_manifest(manifest_path(settings))


def _entry_from_table(table: object, path: Path, index: int) -> ModelEntry:
    where = f"model manifest {path}, entry {index + 1}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} is not a table")
    known = {"name", "file", "sha256", "n_ctx_train", "roles", "chat_format", "size", "source",
             "gguf_name", "file_type", "kind"}
    kind = table.get("kind", "gguf")
    if kind not in ("gguf", "openai"):
        raise ConfigError(f"{where}: kind must be \"gguf\" (a local file) or \"openai\" (a server)")
    if kind == "openai":
        known |= _REMOTE_KEYS
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {', '.join(unknown)}",
                          hint=f"known keys: {', '.join(sorted(known))}")
    if kind == "openai":
        return _remote_entry(table, where)
    for key in ("name", "file", "sha256", "n_ctx_train"):
        if key not in table:
            raise ConfigError(f"{where} lacks '{key}'")
    name, file, sha = table["name"], table["file"], table["sha256"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-'")
    if not isinstance(file, str) or not file.strip():
        raise ConfigError(f"{where} ({name}): 'file' must be a non-empty string")
    if not isinstance(sha, str) or not _SHA_RE.match(sha.lower()):
        raise ConfigError(f"{where} ({name}): 'sha256' must be 64 hex digits")
    n_ctx = table["n_ctx_train"]
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx <= 0:
        raise ConfigError(f"{where} ({name}): 'n_ctx_train' must be a positive integer")
    roles = table.get("roles", [])
    if not isinstance(roles, list) or any(r not in ROLES for r in roles):
        raise ConfigError(f"{where} ({name}): roles must be a list drawn from {', '.join(ROLES)}")
    size = table.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ConfigError(f"{where} ({name}): 'size' must be a byte count")
    chat_format = table.get("chat_format", "")
    source = table.get("source", "")
    gguf_name = table.get("gguf_name", "")
    if not isinstance(chat_format, str) or not isinstance(source, str) or not isinstance(gguf_name, str):
        raise ConfigError(f"{where} ({name}): 'chat_format', 'source' and 'gguf_name' must be strings")
    file_type = table.get("file_type")
    if file_type is not None and (not isinstance(file_type, int) or isinstance(file_type, bool)):
        raise ConfigError(f"{where} ({name}): 'file_type' must be an integer (GGUF general.file_type)")
    return ModelEntry(name=name, file=file, sha256=sha.lower(), n_ctx_train=n_ctx,
                      roles=tuple(dict.fromkeys(roles)), chat_format=chat_format,
                      size=size, source=source, gguf_name=gguf_name, file_type=file_type)


def _remote_entry(table: dict, where: str) -> ModelEntry:
    name = table.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-'")
    n_ctx = table.get("n_ctx_train", 4096)
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx <= 0:
        raise ConfigError(f"{where} ({name}): 'n_ctx_train' must be a positive integer")
    roles = table.get("roles", [])
    if not isinstance(roles, list) or any(r not in ROLES for r in roles):
        raise ConfigError(f"{where} ({name}): roles must be a list drawn from {', '.join(ROLES)}")
    for key in ("file", "sha256", "size", "chat_format", "gguf_name", "file_type"):
        if key in table:
            raise ConfigError(f"{where} ({name}): '{key}' belongs to local GGUF entries, "
                              "not to kind = \"openai\"")
    source = table.get("source", "")
    return ModelEntry(name=name, file="", sha256="", n_ctx_train=n_ctx,
                      roles=tuple(dict.fromkeys(roles)), source=str(source), kind="openai",
                      remote=_remote_from_table(table, where, name))


def _toml_str(value: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def render_manifest(manifest: Manifest) -> str:
    """The manifest as TOML text (header comment, one [[model]] table per entry)."""
    lines = [_HEADER]
    for m in manifest.models:
        lines.append("[[model]]")
        if m.remote is not None:
            lines.extend(_render_remote(m))
            continue
        lines.append(f"name = {_toml_str(m.name)}")
        lines.append(f"file = {_toml_str(m.file)}")
        lines.append(f"sha256 = {_toml_str(m.sha256)}")
        if m.size is not None:
            lines.append(f"size = {m.size}")
        lines.append(f"n_ctx_train = {m.n_ctx_train}")
        lines.append(f"chat_format = {_toml_str(m.chat_format)}")
        lines.append("roles = [" + ", ".join(_toml_str(r) for r in m.roles) + "]")
        if m.source:
            lines.append(f"source = {_toml_str(m.source)}")
        if m.gguf_name:
            lines.append(f"gguf_name = {_toml_str(m.gguf_name)}")
        if m.file_type is not None:
            lines.append(f"file_type = {m.file_type}")
        lines.append("")
    return "\n".join(lines)


def _render_remote(m: ModelEntry) -> list[str]:
    r = m.remote
    assert r is not None
    lines = [f"name = {_toml_str(m.name)}", 'kind = "openai"', f"base_url = {_toml_str(r.base_url)}",
             f"model = {_toml_str(r.model)}", f"response_format = {_toml_str(r.response_format)}",
             f"schema_check = {_toml_str(r.schema_check)}", f"timeout = {r.timeout}",
             f"http_retries = {r.http_retries}", f"n_ctx_train = {m.n_ctx_train}",
             "roles = [" + ", ".join(_toml_str(x) for x in m.roles) + "]"]
    if r.api_key_env:
        lines.append(f"api_key_env = {_toml_str(r.api_key_env)}")
    if r.slots:
        lines.append(f"slots = {r.slots}")
    if m.source:
        lines.append(f"source = {_toml_str(m.source)}")
    return lines + [""]


def save_manifest(manifest: Manifest) -> None:
    """Write the manifest atomically (a reader never sees half a file)."""
    _atomic_write_text(manifest.path, render_manifest(manifest), what="model manifest")


def _atomic_write_text(path: Path, text: str, *, what: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror}",
                         hint="check that the folder is writable") from None


# ---------------------------------------------------------------- roles

def resolve_model(settings: Settings, role: str, manifest: Manifest | None = None) -> ModelEntry:
    """The manifest entry serving ``role``: the one ``models.<role>`` names, else the first
    entry listing the role."""
    if role not in ROLES:
        raise UsageError(f"unknown model role {role!r}", hint=f"roles are {', '.join(ROLES)}")
    manifest = manifest or load_manifest_for(settings)
    wanted = getattr(settings.models, role)
    if wanted:
        for entry in manifest.models:
            if entry.name == wanted:
                return entry
        known = ", ".join(e.name for e in manifest.models) or "none"
        raise ConfigError(f"models.{role} names {wanted!r}, which is not in {manifest.path}",
                          hint=f"known models: {known}")
    for entry in manifest.models:
        if role in entry.roles:
            return entry
    raise ModelError(f"no model in {manifest.path} serves the role {role!r}",
                     hint=f"`appliance models add PATH --roles {role}`, or set models.{role}")


# ---------------------------------------------------------------- hashing and checks

def file_sha256(path: str | Path) -> str:
    """sha256 of a file, read in chunks (never the whole file in memory)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror}") from None
    return digest.hexdigest()


class HashCache:
    """Remembers verified hashes by (absolute path, size, mtime) in a small JSON file.

    It only saves time; when the state folder cannot be written the cache is simply not
    kept (the call cache and `appliance doctor` report an unwritable state folder).
    """

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings: Settings) -> "HashCache":
        try:
            return cls(state_dir(settings, "cache") / "model_hashes.json")
        except StateError:
            return cls(None)

    @staticmethod
    def _key(path: Path) -> tuple[str, str] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return str(path.resolve()), f"{st.st_size}:{st.st_mtime_ns}"

    def _read(self) -> dict:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, path: Path) -> str | None:
        key = self._key(path)
        if key is None:
            return None
        record = self._read().get(key[0])
        if isinstance(record, dict) and record.get("stamp") == key[1]:
            return record.get("sha256")
        return None

    def put(self, path: Path, sha: str) -> None:
        """Record a verified hash. Read, update and write happen under a lock file, so that
        processes sharing the state folder (batch workers, two shells) keep each other's
        entries; a cache that cannot be written or locked only costs a rehash later."""
        key = self._key(path)
        if key is None or self.path is None:
            return
        from filelock import FileLock, Timeout

        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with FileLock(self.path.with_name(f"{self.path.name}.lock"), timeout=_LOCK_SECONDS):
                    data = self._read()
                    data[key[0]] = {"stamp": key[1], "sha256": sha}
                    write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True))
            except (OSError, Timeout):
                pass

    def sha256(self, path: Path, *, rehash: bool = False) -> str:
        """The file's sha256, from the cache unless ``rehash`` or the file changed."""
        if not rehash:
            cached = self.get(path)
            if cached:
                return cached
        sha = file_sha256(path)
        self.put(path, sha)
        return sha


def check_model_file(manifest: Manifest, entry: ModelEntry, *, hashes: HashCache | None = None,
                     rehash: bool = False) -> GGUFInfo:
    """Check one entry's file: exists, GGUF, complete, right size and sha256.

    Returns the GGUF header; raises ModelError with a one-line fix otherwise.
    """
    if entry.is_remote:
        raise ModelError(f"model '{entry.name}' is served by {entry.remote.base_url if entry.remote else '?'}"
                         ", it has no file to check", hint="`appliance doctor` probes the server")
    path = manifest.path_of(entry)
    if not path.exists():
        raise ModelError(f"model file {path} ('{entry.name}') is missing", hint=FETCH_HINT)
    info = read_gguf(path)
    if entry.size is not None and info.size != entry.size:
        raise ModelError(
            f"model file {path} ('{entry.name}') has {info.size} bytes, the manifest expects {entry.size}",
            hint=f"the file is incomplete or different: {FETCH_HINT}")
    check_metadata(entry, info, path)
    sha = (hashes or HashCache(None)).sha256(path, rehash=rehash)
    if sha != entry.sha256:
        raise ModelError(
            f"model file {path} ('{entry.name}') has sha256 {sha[:12]}..., "
            f"the manifest expects {entry.sha256[:12]}...",
            hint=f"the file is corrupt or different: {FETCH_HINT}; "
                 "`appliance models verify` checks every model")
    return info


def check_metadata(entry: ModelEntry, info: GGUFInfo, path: Path) -> None:
    """The GGUF metadata the entry expects (name, quantisation), when it states any."""
    if entry.gguf_name and info.name != entry.gguf_name:
        raise ModelError(f"model file {path} ('{entry.name}') is {info.name or 'unnamed'!r} in its "
                         f"GGUF metadata, the manifest expects {entry.gguf_name!r}",
                         hint=f"the file is a different model: {FETCH_HINT}")
    found = info.metadata.get("general.file_type")
    if entry.file_type is not None and found != entry.file_type:
        raise ModelError(f"model file {path} ('{entry.name}') has GGUF file_type {found}, "
                         f"the manifest expects {entry.file_type}",
                         hint=f"the file is another quantisation of the model: {FETCH_HINT}")


# ---------------------------------------------------------------- registering a file

def register_model(manifest: Manifest, source: str | Path, *, name: str | None = None,
                   roles: Iterable[str] = (), chat_format: str = "", copy: bool = False,
                   hashes: HashCache | None = None) -> ModelEntry:
    """Add a GGUF file to the manifest (and save it); returns the new entry.

    The file is registered where it lies (absolute path, or relative when it is already in
    the manifest's folder) unless ``copy``, which copies it into the manifest's folder first.
    Roles given here move to the new model: other entries stop listing them, so that the
    model just added is the one that serves them.
    """
    src = Path(source).expanduser()
    if not src.is_file():
        raise UsageError(f"{src} is not a file", hint="give the path of a .gguf file")
    info = read_gguf(src)
    roles = tuple(dict.fromkeys(r.strip() for r in roles if r.strip()))
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise UsageError(f"unknown role(s) {', '.join(bad)}", hint=f"roles are {', '.join(ROLES)}")
    if not chat_format and info.chat_template is None:
        raise ModelError(f"{src} has no chat template in its GGUF metadata",
                         hint="pass --chat-format (e.g. chatml) to say how to format its prompts")
    n_ctx = info.context_length
    if not n_ctx:
        raise ModelError(f"{src} does not state its context length in its GGUF metadata",
                         hint="this file is not a usable chat model")
    name = name or _default_name(src)
    if not _NAME_RE.match(name):
        raise UsageError(f"model name {name!r} must be letters, digits, '.', '_' or '-'")
    if any(e.name == name for e in manifest.models):
        raise UsageError(f"a model named {name!r} is already in {manifest.path}",
                         hint="choose another --name, or `appliance models remove` it first")
    sha = (hashes or HashCache(None)).sha256(src)
    file_field = _place_file(manifest, src, copy)
    entry = ModelEntry(name=name, file=file_field, sha256=sha, n_ctx_train=n_ctx, roles=roles,
                       chat_format=chat_format, size=info.size, source=f"added from {src.resolve()}",
                       gguf_name=info.name, file_type=_int_or_none(info.metadata.get("general.file_type")))
    others = [replace(e, roles=tuple(r for r in e.roles if r not in roles)) for e in manifest.models]
    manifest.models = others + [entry]
    save_manifest(manifest)
    return entry


def remove_model(manifest: Manifest, name: str) -> ModelEntry:
    """Drop an entry from the manifest (the file itself is left alone)."""
    entry = manifest.get(name)
    manifest.models = [e for e in manifest.models if e.name != name]
    save_manifest(manifest)
    return entry


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _default_name(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._").lower()
    return stem[:64] or "model"


def _place_file(manifest: Manifest, src: Path, copy: bool) -> str:
    base = manifest.base.resolve()
    if copy:
        dest = base / src.name
        if dest.exists() and dest.resolve() != src.resolve():
            raise UsageError(f"{dest} already exists", hint="remove it, or register without --copy")
        if not dest.exists():
            tmp = dest.with_name(f".{dest.name}.part")
            try:
                base.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, tmp)
                os.replace(tmp, dest)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise UsageError(f"cannot copy {src} into {base}: {exc.strerror}") from None
        return dest.name
    resolved = src.resolve()
    try:
        return str(resolved.relative_to(base))
    except ValueError:
        return str(resolved)
