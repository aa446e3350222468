"""From a pydantic schema to a llama.cpp grammar, explicitly and never silently.

llama-cpp-python's own ``response_format`` falls back to free JSON when a schema cannot be
converted; here a schema that cannot be compiled is a GrammarError. Before conversion the
JSON Schema is normalised so that the grammar says what the validator will check:

* ``$ref`` to local ``$defs`` are inlined (recursive references are left to the converter);
* every property is made required in the *grammar* (the pydantic model still has its
  defaults), so a small model cannot skip a list such as ``claims`` by leaving it out;
* integers with a small ``minimum``..``maximum`` range become an enum, because the
  converter ignores numeric bounds.

String ``maxLength`` and array ``minItems``/``maxItems`` are supported by the converter, but
long ``maxLength`` nests are rewritten as ``char{0,N}`` (see ``_NESTED_CHARS``). After conversion the converter's string-character rule is replaced: it admits raw control
characters (a newline inside a string), which no JSON parser accepts.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from ..errors import GrammarError

# Integer ranges up to this many values are written out as an enum.
_MAX_INT_ENUM = 64
# A JSON string character: anything but a quote, a backslash or a control character, or an escape.
_CHAR_RULE = (r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] '
              r'[0-9a-fA-F] [0-9a-fA-F])')
_CHAR_LINE = re.compile(r"^char ::= .*$", re.MULTILINE)
# The converter writes maxLength N as N nested optional groups, "(char (char ...)?)?"; llama.cpp
# refuses grammars with more than about 2000 rules (ReportDraft's four long strings exceed
# it), so each nest is rewritten as the native bounded repetition "char{0,N}".
_NESTED_CHARS = re.compile(r"\((?:char \()*char(?:\)\?)+")


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
    """The grammar-side schema: refs inlined, all properties required, small int ranges as enums."""
    defs = schema.get("$defs", {})
    out = _normalize(copy.deepcopy(schema), defs, ())
    out.pop("$defs", None)
    if _has_ref(out):
        # Recursive models keep their refs; the converter resolves them against $defs.
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
    if node.get("type") == "integer":
        lo, hi = _int_bounds(node)
        if lo is not None and hi is not None and 0 < hi - lo + 1 <= _MAX_INT_ENUM:
            node = {"enum": list(range(lo, hi + 1))}
    return node


def _int_bounds(node: dict) -> tuple[int | None, int | None]:
    lo = node.get("minimum")
    hi = node.get("maximum")
    if isinstance(node.get("exclusiveMinimum"), (int, float)):
        lo = int(node["exclusiveMinimum"]) + 1
    if isinstance(node.get("exclusiveMaximum"), (int, float)):
        hi = int(node["exclusiveMaximum"]) - 1
    lo = int(lo) if isinstance(lo, (int, float)) and float(lo).is_integer() else None
    hi = int(hi) if isinstance(hi, (int, float)) and float(hi).is_integer() else None
    return lo, hi


@lru_cache(maxsize=256)
def gbnf_for(schema_text: str) -> str:
    """GBNF grammar text for a JSON Schema text; GrammarError when the converter fails.

    Cached: each schema is converted once per process.
    """
    try:
        schema = json.loads(schema_text)
        grammar = _convert(normalize_schema(schema))
    except GrammarError:
        raise
    except Exception as exc:  # the converter signals failures with asserts, KeyError, ValueError...
        title = _title(schema_text)
        raise GrammarError(f"schema {title} cannot be turned into a llama.cpp grammar: "
                           f"{type(exc).__name__}: {exc}",
                           hint="simplify the schema; structured calls never fall back to free JSON") from None
    if "root ::=" not in grammar:
        raise GrammarError(f"schema {_title(schema_text)} gave an empty grammar")
    grammar = _NESTED_CHARS.sub(_flatten_nest, grammar)
    return _CHAR_LINE.sub(lambda _m: _CHAR_RULE, grammar)


def _convert(schema: dict) -> str:
    """llama-cpp-python's converter, with string constants written correctly.

    Its literal writer escapes quotes but not backslashes, so a constant holding a double
    quote (an enum of source sentences, say) ends its literal early and llama.cpp rejects the
    grammar; and it writes non-ASCII characters as JSON escapes the model would have to spell
    out. Both are fixed here; everything else is the converter's.
    """
    # Imported here so that the manifest and CLI listing work without loading llama.cpp.
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def _format_literal(self, literal: str) -> str:
            escaped = (literal.replace("\\", "\\\\").replace('"', '\\"')
                       .replace("\r", "\\r").replace("\n", "\\n"))
            return f'"{escaped}"'

        def _generate_constant_rule(self, value: Any) -> str:
            return self._format_literal(json.dumps(value, ensure_ascii=False))

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "stdin"), "")
    return converter.format_grammar()


def _flatten_nest(match: re.Match) -> str:
    text = match.group(0)
    opened, closed = text.count("(char"), text.count(")?")
    if opened != closed:  # not the converter's pattern after all: leave it alone
        return text
    return f"char{{0,{opened}}}"


def _title(schema_text: str) -> str:
    try:
        return str(json.loads(schema_text).get("title") or "?")
    except ValueError:
        return "?"
