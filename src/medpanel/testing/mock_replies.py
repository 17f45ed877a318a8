"""What the mock server answers, as pure functions of the request: its identity for counting retries
(`request_hash`), the text of its messages, a letter A-E fixed by the case and the model (`choice_for`),
and a value that satisfies a requested JSON schema (`fake_from_schema`). They are kept apart from the
HTTP side because tests call them directly, to know what the mock will say without starting it, and
because being deterministic (hashes of the request, never a clock or a shared RNG) is what lets a
re-ask or a retry get the same answer, which no server state may change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CHOICES = "ABCDE"


def request_hash(body: dict) -> str:
    """Identity of a request for counting retries: the model, messages and response_format only."""
    canonical = json.dumps([body.get("model"), body.get("messages"), body.get("response_format")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string or a list of parts (vision requests)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def user_texts(body: dict) -> list[str]:
    return [content_text(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]


def first_user(body: dict) -> str:
    users = user_texts(body)
    return users[0] if users else ""


def _digest(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:12], 16)


def choice_for(body: dict) -> str:
    """A letter A-E fixed by the first user message and the model, so re-asks and retries agree."""
    return CHOICES[_digest(first_user(body), str(body.get("model", ""))) % len(CHOICES)]


def requested_schema(body: dict) -> tuple[bool, dict | None]:
    """(is this a structured request, its JSON schema if one was given)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return False, None
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") or {}
        return True, inner.get("schema") if isinstance(inner, dict) else None
    if fmt.get("type") == "json_object":
        return True, fmt.get("schema")
    return False, None


def fake_from_schema(schema: dict, seed: str = "") -> Any:
    """A value satisfying `schema`, chosen deterministically from `seed`.

    Covers what pydantic emits: $ref into $defs, anyOf for Optional, enum/const for Literal and Enum,
    nested objects, arrays with bounds, numeric bounds and common string formats.
    """
    root = schema

    def resolve(node: Any) -> dict:
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 50:
            ref = node["$ref"]
            target: Any = root
            if not ref.startswith("#"):
                raise ValueError(f"only local $ref is supported, not {ref}")
            for part in [p for p in ref.lstrip("#").split("/") if p]:
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
        return node if isinstance(node, dict) else {}

    def pick(path: str, n: int) -> int:
        return _digest(seed, path) % n if n > 0 else 0

    def gen(node: Any, path: str, depth: int) -> Any:
        node = resolve(node)
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][pick(path, len(node["enum"]))]
        for key in ("anyOf", "oneOf"):
            if node.get(key):
                options = [resolve(o) for o in node[key]]
                real = [o for o in options if o.get("type") != "null"]
                return gen(real[0], path, depth) if real else None
        if node.get("allOf"):
            merged: dict = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                part = resolve(part)
                merged.setdefault("properties", {}).update(part.get("properties", {}))
                merged.update({k: v for k, v in part.items() if k != "properties"})
            return gen(merged, path, depth)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        if kind == "object":
            required = set(node.get("required", []))
            props = node.get("properties", {})
            # Deep (possibly self-referencing) schemas: past a depth, fill only what is required.
            names = [n for n in props if depth < 6 or n in required]
            return {n: gen(props[n], f"{path}.{n}", depth + 1) for n in names}
        if kind == "array":
            low = int(node.get("minItems", 0))
            high = int(node.get("maxItems", max(low, 2)))
            count = low if depth >= 6 else max(low, min(high, 1 + pick(path + "#n", 2)))
            items = node.get("items", {})
            values = [gen(items, f"{path}[{i}]", depth + 1) for i in range(count)]
            if node.get("uniqueItems"):
                unique: list = []
                for v in values:
                    if v not in unique:
                        unique.append(v)
                values = unique if len(unique) >= low else values
            return values
        if kind == "string":
            return _fake_string(node, path, pick(path, 1 << 30))
        if kind == "integer":
            lo = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else None)
            hi = node.get("maximum", node["exclusiveMaximum"] - 1 if "exclusiveMaximum" in node else None)
            lo = int(lo) if lo is not None else (int(hi) - 10 if hi is not None else 0)
            hi = int(hi) if hi is not None else lo + 10
            return lo + pick(path, hi - lo + 1)
        if kind == "number":
            lo = node.get("minimum", node.get("exclusiveMinimum"))
            hi = node.get("maximum", node.get("exclusiveMaximum"))
            lo = float(lo) if lo is not None else (float(hi) - 1.0 if hi is not None else 0.0)
            hi = float(hi) if hi is not None else lo + 1.0
            frac = (pick(path, 998) + 1) / 1000  # strictly inside (0, 1), so exclusive bounds hold
            return round(lo + (hi - lo) * frac, 6)
        if kind == "boolean":
            return pick(path, 2) == 0
        return None

    return gen(schema, "$", 0)


def _fake_string(node: dict, path: str, h: int) -> str:
    fmt = node.get("format")
    if fmt == "date-time":
        text = "2024-01-%02dT09:00:00Z" % (1 + h % 28)
    elif fmt == "date":
        text = "2024-01-%02d" % (1 + h % 28)
    elif fmt == "email":
        text = f"mock{h % 1000}@example.com"
    elif fmt in ("uri", "url"):
        text = f"https://example.com/{h % 1000}"
    elif fmt == "uuid":
        hexed = hashlib.sha256(str(h).encode()).hexdigest()
        text = f"{hexed[:8]}-{hexed[8:12]}-4{hexed[13:16]}-8{hexed[17:20]}-{hexed[20:32]}"
    else:
        name = path.rsplit(".", 1)[-1].strip("$[]0123456789") or "text"
        text = f"mock {name} {h % 100000:05d}"
    low, high = int(node.get("minLength", 0)), node.get("maxLength")
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if high is not None:
        text = text[: int(high)]
    return text
