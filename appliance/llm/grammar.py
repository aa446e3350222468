"""From a pydantic schema to a token-level grammar, explicitly and never silently.

The grammar engine is llguidance (the library llama.cpp itself integrates): it compiles a JSON
Schema into a grammar, computes the set of tokens allowed at each step as a bit mask, and
reports the tokens the grammar forces (which the decode loop evaluates as one batch instead of
sampling them). A schema it cannot compile is a GrammarError naming the schema; a structured
call never falls back to free text.

Before compilation the JSON Schema is normalised so that the grammar says what the validator
will check and what the pipeline needs:

* ``$ref`` to local ``$defs`` are inlined (recursive references are left to the compiler);
* every property is made required in the *grammar* (the pydantic model still has its
  defaults), so a small model cannot skip a list such as ``claims`` by leaving it out.

The output format is fixed: ``{"key": value, "key": value}`` with exactly these separators
and no other whitespace, so every key, quote and separator is forced, never sampled. String
constants (enum values such as a source's sentences) are matched byte for byte as
``json.dumps(value, ensure_ascii=False)`` writes them; strings admit no raw control
characters (nor DEL, written ``\\u007f``); ``maxLength`` counts characters, as pydantic does.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from ..errors import GrammarError

# The JSON layout the grammar forces (and json.dumps writes with these separators).
ITEM_SEPARATOR = ", "
KEY_SEPARATOR = ": "
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR,
                 "key_separator": KEY_SEPARATOR}


def schema_json(schema_cls: type[BaseModel]) -> str:
    """The canonical JSON Schema text of a pydantic model (part of the call cache key)."""
    if not (isinstance(schema_cls, type) and issubclass(schema_cls, BaseModel)):
        raise GrammarError(f"{schema_cls!r} is not a pydantic model class",
                           hint="structured calls take a pydantic BaseModel subclass")
    try:
        schema = schema_cls.model_json_schema()
    except Exception as exc:  # pydantic raises several types for unschematisable fields
        raise GrammarError(f"schema {schema_cls.__name__} has no JSON Schema: {exc}") from None
    # Key order is kept: the grammar emits properties in declaration order, which matters
    # to what the model writes first.
    return json.dumps(schema, ensure_ascii=False)


def normalize_schema(schema: dict) -> dict:
    """The grammar-side schema: local refs inlined, all properties required."""
    defs = schema.get("$defs", {})
    out = _normalize(copy.deepcopy(schema), defs, ())
    out.pop("$defs", None)
    if _has_ref(out):
        # Recursive models keep their refs; the compiler resolves them against $defs.
        out["$defs"] = {k: _normalize(copy.deepcopy(v), defs, (k,)) for k, v in defs.items()}
    return out


def _has_ref(node: Any) -> bool:
    if isinstance(node, dict):
        return "$ref" in node or any(_has_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v) for v in node)
    return False


def _normalize(node: Any, defs: dict, stack: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_normalize(v, defs, stack) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.split("/")[-1]
        if name in stack or name not in defs:
            return node
        siblings = {k: v for k, v in node.items() if k not in ("$ref", "description", "title", "default")}
        target = _normalize(copy.deepcopy(defs[name]), defs, stack + (name,))
        return {**target, **_normalize(siblings, defs, stack)} if siblings else target
    node = {k: _normalize(v, defs, stack) for k, v in node.items() if k != "$defs"}
    if isinstance(node.get("properties"), dict):
        node["required"] = list(node["properties"])
    return node


@lru_cache(maxsize=256)
def grammar_for(schema_text: str) -> str:
    """The llguidance grammar (its serialised form) for a JSON Schema text; GrammarError when
    the schema is not JSON or uses something the compiler does not support.

    Cached: each schema is compiled once per process (a compilation takes about a millisecond).
    """
    from llguidance import LLMatcher

    title = _title(schema_text)
    try:
        grammar = LLMatcher.grammar_from_json_schema(normalize_schema(json.loads(schema_text)),
                                                     overrides=_JSON_OPTIONS)  # type: ignore[arg-type]
        failed, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    except GrammarError:
        raise
    except Exception as exc:  # ValueError for bad JSON, TypeError for a schema that is not an object
        raise GrammarError(f"schema {title} cannot be turned into a grammar: {type(exc).__name__}: {exc}",
                           hint="simplify the schema; structured calls never fall back to free JSON") from None
    if failed:
        raise grammar_error(title, messages[0] if messages else "unknown error")
    return grammar


def grammar_error(title: str, detail: str) -> GrammarError:
    """The error for a schema the grammar library rejects (its message on one line)."""
    line = " ".join(str(detail).split())
    return GrammarError(f"schema {title} cannot be turned into a grammar: {line[:300]}",
                        hint="simplify the schema (supported: JSON Schema types, enum/const, "
                             "string lengths and patterns without look-around, array bounds); "
                             "structured calls never fall back to free JSON")


def dump_json(value: Any) -> str:
    """A JSON value as the grammar writes it: its separators, non-ASCII text as is, and DEL
    escaped (the grammar admits no raw DEL in strings, as it admits no raw control character)."""
    text = json.dumps(value, ensure_ascii=False, separators=(ITEM_SEPARATOR, KEY_SEPARATOR))
    return text.replace("\x7f", "\\u007f")


def dump_instance(instance: BaseModel) -> str:
    """An instance as the grammar writes it (text the matcher accepts whole)."""
    return dump_json(instance.model_dump(mode="json"))


def _title(schema_text: str) -> str:
    try:
        return str(json.loads(schema_text).get("title") or "?")
    except (ValueError, AttributeError):
        return "?"
