"""The local model engine: the model manifest, GGUF checks, grammar-constrained structured
calls with validation and bounded retries, token accounting and the content-addressed call
cache.

Typical use::

    pool = ModelPool(settings)
    vote = pool.for_role("verifier").structured(messages, Vote, seed=7, purpose="vote c12")
    before = pool.accounting; ...; spent = pool.accounting.diff(before)
"""

from .accounting import Accounting, CallRecord, Listener
from .cache import CallCache, call_key
from .engine import ENGINE_VERSION, TRIM_MARKER, Engine, ModelPool, context_size, derive_seed
from .gguf import GGUFInfo, read_gguf
from .grammar import dump_instance, grammar_for, normalize_schema, schema_json
from .manifest import (ROLES, HashCache, Manifest, ModelEntry, check_model_file, file_sha256,
                       load_manifest, load_manifest_for, manifest_path, register_model,
                       remove_model, resolve_model, save_manifest)

__all__ = [
    "Accounting", "CallRecord", "Listener", "CallCache", "call_key", "ENGINE_VERSION",
    "TRIM_MARKER", "Engine", "ModelPool", "context_size", "derive_seed", "GGUFInfo",
    "read_gguf", "dump_instance", "grammar_for", "normalize_schema", "schema_json", "ROLES", "HashCache", "Manifest",
    "ModelEntry", "check_model_file", "file_sha256", "load_manifest", "load_manifest_for",
    "manifest_path", "register_model", "remove_model", "resolve_model", "save_manifest",
]
