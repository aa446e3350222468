"""The KV states of prompts' fixed heads (their system messages), kept in the state folder.

A process that starts evaluates each kind of prompt's instructions once before the memory
bank (``native.PrefixBank``) can restore them: a one-question run or a new batch worker pays
for every kind (the plan's, the extractor's, the votes', the answers'), 50 to 250 tokens each,
400 to 600 in a quick run (a sixth of the prompt tokens it evaluates). Kept here, a later
process restores them with a file read.

A file holds exactly what the memory bank holds: the tokens of the head and llama.cpp's
serialised state of the sequence after evaluating them in their own chunks, so what a call
returns is the same whether its head was evaluated, restored from memory or read from here.
States are only valid for the same weights, build, context and batch size: those make the
store's ``identity``, and each file's name is a digest of the identity and the tokens. A file
that does not read back whole (its digest, its tokens) is removed and counted, and the head is
evaluated as if it had never been kept. Files are written atomically (concurrent workers may
share the folder); the least recently used go once the files pass ``capacity`` bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from array import array
from pathlib import Path
from typing import Sequence

from ..atomic import write_atomic

log = logging.getLogger("appliance.llm.prefixes")

_MAGIC = b"appliance-prefix 1\n"
# Bytes kept at most (a head of 250 tokens of a 1.5B model is about 7 MB, of a 7B model 14 MB).
CAPACITY = 256 * 2**20


class PrefixStore:
    """Head states on disk: ``load(tokens)`` gives the state bytes or None, ``save`` keeps them."""

    def __init__(self, folder: Path, identity: str, capacity: int = CAPACITY):
        self.folder = Path(folder)
        self.identity = identity
        self.capacity = capacity
        self.loaded = 0
        self.saved = 0
        self.damaged = 0
        self.failed_writes = 0

    def path_for(self, tokens: Sequence[int]) -> Path:
        digest = hashlib.sha256(self.identity.encode("utf-8") + b"\0" + _packed(tokens)).hexdigest()
        return self.folder / f"{digest[:40]}.kv"

    def load(self, tokens: Sequence[int]) -> bytes | None:
        """The state kept for exactly ``tokens``, or None (never kept, or damaged: removed)."""
        path = self.path_for(tokens)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        state = _parse(data, tokens)
        if state is None:
            self.damaged += 1
            log.warning("prefix store: %s did not read back whole; removed (its head is evaluated again)", path.name)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        try:
            os.utime(path)  # recently used: kept longest
        except OSError:
            pass
        self.loaded += 1
        return state

    def save(self, tokens: Sequence[int], state: bytes) -> None:
        """Keep ``state`` for ``tokens``; a failed write only costs a later evaluation."""
        header = json.dumps({"tokens": len(tokens), "size": len(state),
                             "sha256": hashlib.sha256(state).hexdigest()}).encode("utf-8")
        try:
            write_atomic(self.path_for(tokens), _MAGIC + header + b"\n" + _packed(tokens) + state)
        except OSError as exc:
            self.failed_writes += 1
            if self.failed_writes == 1:
                log.warning("prefix store: cannot write in %s (%s); heads are kept in memory only",
                            self.folder, exc.strerror)
            return
        self.saved += 1
        self._prune()

    def _prune(self) -> None:
        files = []
        for path in self.folder.glob("*.kv"):
            try:
                stat = path.stat()
            except OSError:  # removed by another process meanwhile
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        files.sort(key=lambda f: f[0], reverse=True)
        total = 0
        for _, size, path in files:
            total += size
            if total > self.capacity:
                try:
                    path.unlink()
                except OSError:
                    pass


def _packed(tokens: Sequence[int]) -> bytes:
    return array("i", tokens).tobytes()


def _parse(data: bytes, tokens: Sequence[int]) -> bytes | None:
    """The state bytes of a kept file, when its header, tokens and digest all check out."""
    if not data.startswith(_MAGIC):
        return None
    end = data.find(b"\n", len(_MAGIC))
    if end < 0:
        return None
    try:
        header = json.loads(data[len(_MAGIC):end])
        count, size, digest = int(header["tokens"]), int(header["size"]), str(header["sha256"])
    except (ValueError, KeyError, TypeError):
        return None
    packed = _packed(tokens)
    body = data[end + 1:]
    if count != len(tokens) or body[:len(packed)] != packed or len(body) != len(packed) + size or size <= 0:
        return None
    state = body[len(packed):]
    if hashlib.sha256(state).hexdigest() != digest:
        return None
    return state
