"""Structured output: turn a pydantic model or JSON schema into one shape, and validate replies against it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from pydantic import BaseModel, ValidationError

from medpanel.errors import UsageError
from medpanel.reply_text import strip_fence, strip_reasoning


class Schema:
    """A requested output shape. Built from a pydantic model class or a plain JSON-schema dict."""

    def __init__(self, source: type[BaseModel] | dict) -> None:
        if isinstance(source, type) and issubclass(source, BaseModel):
            self.model: type[BaseModel] | None = source
            self.json_schema = source.model_json_schema()
            self.name = source.__name__
        elif isinstance(source, dict):
            self.model = None
            self.json_schema = source
            self.name = str(source.get("title") or "reply")
        else:
            raise UsageError(f"Unsupported schema of type {type(source).__name__}.", "Pass a pydantic model class or a JSON-schema dict.")
        self.name = re.sub(r"[^A-Za-z0-9_-]", "_", self.name)[:64] or "reply"

    def validate(self, text: str) -> Any:
        """Parse and validate a reply against the full schema. Returns the parsed object; raises ValueError
        with a short reason that states any bound the reply broke ("score must be between 1 and 10")."""
        data = extract_json(text)
        if self.model is not None:
            try:
                return self.model.model_validate(data)
            except ValidationError as exc:
                raise ValueError("; ".join(self._pydantic_problem(e) for e in exc.errors()[:5])) from None
        validator = jsonschema.validators.validator_for(self.json_schema)(self.json_schema)
        errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            raise ValueError("; ".join(_jsonschema_problem(e) for e in errors[:5]))
        return data

    def _pydantic_problem(self, error: dict) -> str:
        where = ".".join(map(str, error["loc"])) or "reply"
        keyword = _PYDANTIC_BOUNDS.get(error["type"])
        if keyword is not None:
            node = _node_at(self.json_schema, list(error["loc"]), keyword)
            if node is not None:
                return bound_text(where, node, error.get("input"))
        return f"{where}: {error['msg']}"

    def wire_schema(self) -> dict:
        """The copy of the schema sent to a server: see `server_schema`."""
        return server_schema(self.json_schema)


# llama.cpp's grammar compiler refuses a repetition of more than about 1,000 (a string maxLength of 1,001
# already brings llama-cpp-python's server down; 1,000 works), and other engines share such limits.
# Bounds above this are left out of the schema a server sees and checked on our side instead.
GRAMMAR_REPETITION_LIMIT = 1000
# Keywords left out of the server's copy whatever their value. A regex `pattern` is compiled into the
# grammar by each engine's own partial regex translator: llama-cpp-python's crashes on an optional group
# with a bounded repeat, e.g. the ICD-10 code pattern's `(\.?[0-9A-Za-z]{1,4})?`, and ignores unanchored ones.
_DROPPED_KEYWORDS = ("pattern",)
_REPETITION_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames", "unevaluatedProperties")


def server_schema(schema: Any, limit: int = GRAMMAR_REPETITION_LIMIT) -> Any:
    """A copy of `schema` that grammar engines can compile: repetition bounds above `limit`, and regex
    patterns, are dropped.

    Dropping (rather than lowering) a bound only loosens the schema, so the server never forbids a
    reply the full schema allows; `Schema.validate` then enforces the dropped bound with a re-ask."""
    if isinstance(schema, list):
        return [server_schema(s, limit) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict = {}
    for key, value in schema.items():
        if key in _REPETITION_KEYWORDS and isinstance(value, int) and value > limit:
            continue
        if key in _DROPPED_KEYWORDS and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: server_schema(sub, limit) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS + _SCHEMA_ONE:
            out[key] = server_schema(value, limit)
        else:
            out[key] = value  # enum, const, default, examples...: data, not schemas
    return out


# ------------------------------------------------------------------ stating the bound a reply broke

_PYDANTIC_BOUNDS = {
    "greater_than": "exclusiveMinimum", "greater_than_equal": "minimum", "less_than": "exclusiveMaximum",
    "less_than_equal": "maximum", "string_too_short": "minLength", "string_too_long": "maxLength",
    "too_short": "minItems", "too_long": "maxItems",
}
_BOUND_KEYWORDS = frozenset(_PYDANTIC_BOUNDS.values())


def _resolve(root: dict, node: Any) -> Any:
    for _ in range(16):  # a bounded walk down a chain of local $refs
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/")):
            return node
        target: Any = root
        for part in node["$ref"][2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        node = target
    return node


def _node_at(root: dict, loc: list, keyword: str) -> dict | None:
    """The subschema at a pydantic error location that carries `keyword` (following $ref and anyOf)."""
    node = _resolve(root, root)
    for part in loc:
        if not isinstance(node, dict):
            return None
        if "anyOf" in node and "properties" not in node and "items" not in node:
            node = next((_resolve(root, o) for o in node["anyOf"] if isinstance(o, dict) and ("properties" in o or "items" in o)), node)
        if isinstance(part, int):
            node = _resolve(root, node.get("items"))
        else:
            node = _resolve(root, (node.get("properties") or {}).get(part))
    if isinstance(node, dict) and keyword not in node:
        node = next((_resolve(root, o) for o in node.get("anyOf", []) if isinstance(o, dict) and keyword in _resolve(root, o)), node)
    return node if isinstance(node, dict) and keyword in node else None


def _range(low: Any, high: Any, unit: str = "") -> str:
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}{unit}" if isinstance(low, float) or isinstance(high, float) else f"between {low} and {high}{unit}"
    return f"at least {low}{unit}" if low is not None else f"at most {high}{unit}"


def bound_text(where: str, node: dict, value: Any) -> str:
    """'score must be between 1 and 10 (got 89)': every bound of the field, so the model can aim inside them."""
    if any(k in node for k in ("minLength", "maxLength")):
        got = f" (got {len(value)})" if isinstance(value, str) else ""
        return f"{where} must be {_range(node.get('minLength'), node.get('maxLength'), ' characters')} long{got}"
    if any(k in node for k in ("minItems", "maxItems")):
        got = f" (got {len(value)})" if isinstance(value, list) else ""
        return f"{where} must have {_range(node.get('minItems'), node.get('maxItems'), ' items')}{got}"
    parts = []
    if "minimum" in node or "maximum" in node:
        parts.append(_range(node.get("minimum"), node.get("maximum")))
    if "exclusiveMinimum" in node:
        parts.append(f"greater than {node['exclusiveMinimum']}")
    if "exclusiveMaximum" in node:
        parts.append(f"less than {node['exclusiveMaximum']}")
    return f"{where} must be {' and '.join(parts)} (got {value!r})"


def _jsonschema_problem(error: jsonschema.ValidationError) -> str:
    where = ".".join(map(str, error.absolute_path)) or "reply"
    if error.validator in _BOUND_KEYWORDS and isinstance(error.schema, dict):
        return bound_text(where, error.schema, error.instance)
    return error.message if where == "reply" else f"{where}: {error.message}"


def extract_json(text: str) -> Any:
    """The JSON value in a reply, tolerating a reasoning block, a code fence or prose around one object."""
    answer = strip_reasoning(text)  # the shared policy: a '{' inside <think> is not the answer
    if answer.unclosed_reasoning:
        raise ValueError("the reply's reasoning never closed, so it holds no answer")
    unfenced, _ = strip_fence(answer.text)
    try:
        return json.loads(unfenced)
    except json.JSONDecodeError:
        pass
    # Prose around the object, or a fence on one line with it: read from the first brace.
    start = answer.text.find("{")
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(answer.text[start:])
            return value
        except json.JSONDecodeError:
            pass
    raise ValueError("the reply is not valid JSON")


def reask_message(problem: str, schema: Schema) -> str:
    """What we say to a model whose reply did not validate. Kept short: small models lose the thread."""
    return (
        f"That reply could not be used ({problem}). Reply again with only one JSON object matching this "
        f"schema, and nothing else:\n{json.dumps(schema.json_schema)}"
    )
