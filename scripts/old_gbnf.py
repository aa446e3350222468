"""The engine's previous grammar path, kept only as the benchmark's "old path".

JSON Schema -> GBNF with llama-cpp-python's converter (two escaping fixes applied, nested
maxLength groups flattened, raw control characters removed from strings), for
``create_chat_completion(grammar=LlamaGrammar.from_string(...))``. The product uses
llguidance (appliance/llm/grammar.py); nothing in appliance/ imports this.
"""

from __future__ import annotations

import json
import re
from typing import Any

from appliance.llm.grammar import normalize_schema

_MAX_INT_ENUM = 64
_CHAR_RULE = (r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] '
              r'[0-9a-fA-F] [0-9a-fA-F])')
_CHAR_LINE = re.compile(r"^char ::= .*$", re.MULTILINE)
_NESTED_CHARS = re.compile(r"\((?:char \()*char(?:\)\?)+")


def gbnf_for(schema_text: str) -> str:
    """GBNF text for a JSON Schema text (as the engine built it before llguidance)."""
    grammar = _convert(_int_enums(normalize_schema(json.loads(schema_text))))
    grammar = _NESTED_CHARS.sub(_flatten_nest, grammar)
    return _CHAR_LINE.sub(lambda _m: _CHAR_RULE, grammar)


def _int_enums(node: Any) -> Any:
    """Small integer ranges as enums: the converter ignores numeric bounds."""
    if isinstance(node, list):
        return [_int_enums(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _int_enums(v) for k, v in node.items()}
    if node.get("type") == "integer" and isinstance(node.get("minimum"), int) \
            and isinstance(node.get("maximum"), int) \
            and 0 < node["maximum"] - node["minimum"] + 1 <= _MAX_INT_ENUM:
        node = {"enum": list(range(node["minimum"], node["maximum"] + 1))}
    return node


def _convert(schema: dict) -> str:
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
    if opened != closed:
        return text
    return f"char{{0,{opened}}}"
