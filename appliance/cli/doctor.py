"""`appliance doctor`: is this machine ready for a run? One line per check."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
from typing import Callable

import click

from ..errors import ApplianceError
from .common import app

# (import name, distribution name) of what a run needs.
PACKAGES = [("llama_cpp", "llama-cpp-python"), ("lancedb", "lancedb"), ("trafilatura", "trafilatura"),
            ("sentence_transformers", "sentence-transformers"), ("torch", "torch"),
            ("pydantic", "pydantic"), ("click", "click"), ("httpx", "httpx")]
SELFTEST_TIMEOUT = 300
REBUILD_HINT = ("rebuild llama-cpp-python for this CPU: `make install` with LLAMA_CMAKE_ARGS "
                "(the default flags turn off AMX and native tuning and take AVX-512 only where "
                "/proc/cpuinfo reports it; `LLAMA_AVX512=-DGGML_AVX512=OFF` turns it off; see the README)")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True


def _line(check: Check) -> str:
    status = "ok  " if check.ok else ("FAIL" if check.required else "warn")
    return f"{status}  {check.name:<24} {check.detail}"


def _guard(name: str, fn: Callable[[], str], required: bool = True) -> Check:
    """Run one check; an ApplianceError (or any failure of a library) is its FAIL line."""
    try:
        return Check(name, True, fn(), required)
    except ApplianceError as exc:
        return Check(name, False, exc.one_line(), required)
    except Exception as exc:  # noqa: BLE001 - doctor reports whatever breaks, never a traceback
        return Check(name, False, f"{type(exc).__name__}: {exc}", required)


def check_python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, f"{platform.python_version()} ({sys.executable})"
                 + ("" if ok else ": Python 3.11 or newer is needed"))


def check_packages() -> list[Check]:
    checks = []
    for module, dist in PACKAGES:
        try:
            version = importlib.metadata.version(dist)
            found = importlib.util.find_spec(module) is not None
        except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
            version, found = "", False
        checks.append(Check(f"package {module}", found, version if found else "not installed: run `make install`"))
    return checks


def check_state(settings) -> str:
    from ..config import state_dir
    from ..errors import StateError
    from ..llm.cache import CallCache

    home = state_dir(settings)
    try:
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-", delete=True) as fh:
            fh.write(b"x" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise StateError(f"state folder {home} is not writable: {exc.strerror}",
                         hint="set APPLIANCE_HOME to a writable folder") from None
    detail = f"{home.resolve()} writable"
    if settings.llm.cache:
        cache = CallCache.for_settings(settings)
        detail += f"; call cache {cache.count()} entries"
    if settings.llm.keep_prefixes:
        sizes = []
        for kept in (home / "cache" / "prefixes").glob("*.kv"):
            with contextlib.suppress(OSError):  # pruned by a run meanwhile
                sizes.append(kept.stat().st_size)
        detail += f"; {len(sizes)} instruction heads kept ({sum(sizes) / 1e6:.0f} MB)"
    return detail


def selftest_model(path, n_ctx: int, chat_format: str) -> str:
    """Load the file and decode one token in a child process (a bad build crashes it, not us)."""
    from ..errors import ModelError

    cmd = [sys.executable, "-m", "appliance.llm.selftest", str(path), str(n_ctx), chat_format]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SELFTEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ModelError(f"loading {path} and decoding one token took over {SELFTEST_TIMEOUT} s") from None
    if proc.returncode < 0:
        raise ModelError(f"llama.cpp crashed (signal {-proc.returncode}) loading {path} or decoding its "
                         "first token", hint=REBUILD_HINT)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(f"the llama.cpp self-test of {path} failed (exit {proc.returncode}): {tail}",
                         hint=REBUILD_HINT) from None
    if not result.get("ok"):
        raise ModelError(result.get("error", "self-test failed"))
    return (f"loads in {result['load_seconds']:.2f} s, decodes a token in "
            f"{result['decode_seconds']:.2f} s (context {result['n_ctx']})")


def check_models(settings, load: bool = True) -> list[Check]:
    from ..llm.engine import context_size
    from ..llm.manifest import ROLES, HashCache, check_model_file, load_manifest_for

    manifest = _guard("model manifest", lambda: str(load_manifest_for(settings).path))
    if not manifest.ok:
        return [manifest]
    loaded = load_manifest_for(settings)
    checks = [Check("model manifest", True, f"{loaded.path} ({len(loaded.models)} models)")]
    used: dict[str, list[str]] = {}
    for role in ROLES:
        check = _guard(f"role {role}", partial(_role_model, settings, role, loaded))
        checks.append(check)
        if check.ok:
            used.setdefault(check.detail, []).append(role)
    hashes = HashCache.for_settings(settings)

    def verify_file(entry, note: str) -> str:
        if entry.is_remote:
            from ..llm.remote import RemoteEngine

            remote = RemoteEngine(entry, settings)
            try:
                honoured = remote.probe()
            finally:
                remote.close()
            how = "schema enforced" if honoured else "schema NOT enforced (schema_check = validate)"
            return f"{entry.remote.base_url} serves {entry.remote.model!r}: {how}{note}"
        check_model_file(loaded, entry, hashes=hashes)
        return f"{loaded.path_of(entry)}: GGUF, sha256 ok{note}"

    for entry in loaded.models:
        required = entry.name in used
        note = "" if required else " (serves no role)"
        file_check = _guard(f"model {entry.name}", partial(verify_file, entry, note), required)
        checks.append(file_check)
        if file_check.ok and load and not entry.is_remote:
            checks.append(_guard(f"llama.cpp {entry.name}", partial(
                selftest_model, loaded.path_of(entry), context_size(settings, entry), entry.chat_format),
                required))
    return checks


def _role_model(settings, role: str, manifest) -> str:
    from ..llm.manifest import resolve_model

    return resolve_model(settings, role, manifest).name


def check_embedder(settings) -> str:
    from ..embed import get_embedder

    embedder = get_embedder(settings)
    vectors = embedder.encode(["appliance doctor"])
    return f"{getattr(embedder, 'name', 'embedder')}: {len(vectors[0])} dimensions, offline"


def check_ocr(settings) -> Check:
    """OCR for scanned PDF pages: optional (without it they are skipped, named)."""
    from ..sources import ocr

    with ocr.languages(settings.corpus.ocr_languages, settings.corpus.ocr):
        ok, detail = ocr.describe()
    return Check("ocr (scanned PDFs)", ok, detail, required=False)


def check_searxng(settings) -> Check:
    url = settings.searxng.url
    if not url:
        return Check("searxng", True, "not configured (searxng.url is empty): the local corpus is searched",
                     required=False)

    def ping() -> str:
        from ..sources import searxng

        searxng.ping(url, settings.searxng.timeout)
        return f"{url} answers JSON"

    return _guard("searxng", ping, required=settings.search.backend in ("auto", "searxng"))


@click.command("doctor")
@click.option("--skip-models", is_flag=True, default=False,
              help="Do not load the models (file and hash checks still run).")
def doctor(skip_models: bool) -> None:
    """Check that this machine can run the appliance; one line per check.

    Python and package versions, the state folder, the model manifest and each model (file,
    sha256, and that this llama.cpp build loads it and decodes a token, in a child process so
    that a crash is reported, not suffered), the embedding model offline, OCR for scanned PDFs (optional), and SearXNG
    when searxng.url is set. Exits 1 when something a run needs is broken.
    """
    settings = app().settings()
    checks = [check_python(), *check_packages(), _guard("state folder", lambda: check_state(settings))]
    for check in checks:
        click.echo(_line(check))
    model_checks = check_models(settings, load=not skip_models)
    for check in model_checks:
        click.echo(_line(check))
    later = [_guard("embedding model", lambda: check_embedder(settings)), check_ocr(settings), check_searxng(settings)]
    for check in later:
        click.echo(_line(check))
    failed = [c for c in checks + model_checks + later if not c.ok and c.required]
    if failed:
        click.echo(f"error: {len(failed)} check(s) failed: {', '.join(c.name for c in failed)}", err=True)
        sys.exit(1)


COMMANDS = [doctor]
