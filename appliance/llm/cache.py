"""The content-addressed call cache: what makes a killed run replay in seconds.

A key is the sha256 of everything that determines a call's output (model file hash, context
size, messages, schema, sampling, seed, output budget); the value is the final valid JSON
text, or for a call that gave no valid output after its retries, that failure (its message and
attempts): asked again with the same seed a model fails the same way, so a rerun replays the
failure instead of spending the retries again, and the run that follows asks what it asked
before. SQLite in WAL mode, one short transaction per read or write, so several processes
(batch runs) can share it. A row is written in one statement inside a transaction, so an
interrupted write leaves the old state, never half a row; each value also carries its own
digest, and a row that does not match it is treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..config import Settings, state_dir
from ..errors import ModelOutputError, StateError

T = TypeVar("T")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key      TEXT PRIMARY KEY,
    raw      TEXT NOT NULL,
    digest   TEXT NOT NULL,
    meta     TEXT NOT NULL,
    created  REAL NOT NULL
)
"""
_LOCK_RETRIES = 8


def call_key(payload: dict[str, Any]) -> str:
    """sha256 of a canonical JSON encoding of ``payload``."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


# The meta key of a call stored as failed: its error message.
FAILED = "failed"


@dataclass
class CachedCall:
    raw: str
    meta: dict[str, Any]

    def failure(self) -> ModelOutputError | None:
        """The stored failure of a call that gave no valid output, or None for a valid one."""
        message = self.meta.get(FAILED)
        if not message:
            return None
        tried = self.meta.get("tried")
        return ModelOutputError(str(message), attempts=[str(t) for t in tried] if isinstance(tried, list) else [],
                                last_raw=self.raw, hint=self.meta.get("hint") or None)


class CallCache:
    """SQLite store of finished calls. Every failure to use it is a StateError."""

    def __init__(self, path: Path, *, timeout: float = 30.0):
        self.path = Path(path)
        self.timeout = timeout
        self._run(self._init_db)

    @classmethod
    def for_settings(cls, settings: Settings) -> "CallCache":
        """The cache at ``<state home>/cache/calls.sqlite``."""
        return cls(state_dir(settings, "cache") / "calls.sqlite")

    # -- plumbing

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return conn

    @staticmethod
    def _init_db(conn: sqlite3.Connection) -> None:
        # WAL lets readers and one writer work at once across processes.
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(_SCHEMA)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` on a fresh connection; retry while another process holds the lock."""
        for attempt in range(_LOCK_RETRIES):
            try:
                with closing(self._connect()) as conn:
                    return work(conn)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                    if attempt + 1 < _LOCK_RETRIES:
                        time.sleep(0.05 * (2 ** attempt) * (0.5 + random.random()))
                        continue
                raise self._state_error(exc) from None
            except sqlite3.DatabaseError as exc:
                raise self._state_error(exc) from None
        raise StateError(f"call cache {self.path} stayed locked")  # pragma: no cover

    def _state_error(self, exc: Exception) -> StateError:
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return StateError(f"call cache {self.path} is corrupt ({text})",
                              hint="delete the file; it is only a cache, or run with --no-cache")
        return StateError(f"call cache {self.path} cannot be used: {text}",
                          hint="set APPLIANCE_HOME to a writable folder with free space, or run with --no-cache")

    # -- public

    def get(self, key: str) -> CachedCall | None:
        """The cached call for ``key``, or None (also for a row that fails its digest)."""
        def read(conn: sqlite3.Connection):
            return conn.execute("SELECT raw, digest, meta FROM calls WHERE key = ?", (key,)).fetchone()

        row = self._run(read)
        if row is None:
            return None
        raw, digest, meta = row
        if _digest(raw) != digest:
            self.delete(key)
            return None
        try:
            meta_obj = json.loads(meta)
        except ValueError:
            meta_obj = {}
        return CachedCall(raw=raw, meta=meta_obj if isinstance(meta_obj, dict) else {})

    def put(self, key: str, raw: str, meta: dict[str, Any]) -> None:
        """Store a finished call (replacing any previous value for the key)."""
        row = (key, raw, _digest(raw), json.dumps(meta, ensure_ascii=False, sort_keys=True), time.time())

        def write(conn: sqlite3.Connection) -> None:
            with conn:  # one transaction: all of the row or nothing
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO calls (key, raw, digest, meta, created) "
                             "VALUES (?, ?, ?, ?, ?)", row)

        self._run(write)

    def put_failure(self, key: str, error: ModelOutputError, meta: dict[str, Any]) -> None:
        """Store a call that gave no valid output (``CachedCall.failure`` gives it back)."""
        self.put(key, error.last_raw, {**meta, FAILED: error.message, "hint": error.hint or "",
                                       "tried": list(error.attempts)})

    def delete(self, key: str) -> None:
        def remove(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM calls WHERE key = ?", (key,))

        self._run(remove)

    def count(self) -> int:
        """Number of cached calls."""
        return self._run(lambda conn: conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
