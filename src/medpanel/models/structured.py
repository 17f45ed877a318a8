"""Structured output: turn a pydantic model or JSON schema into one shape, and validate replies against it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from pydantic import BaseModel, ValidationError

from medpanel.errors import UsageError


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
        """Parse and validate a reply. Returns the parsed object; raises ValueError with a short reason."""
        data = extract_json(text)
        if self.model is not None:
            try:
                return self.model.model_validate(data)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
                raise ValueError(problems) from None
        try:
            jsonschema.validate(data, self.json_schema)
        except jsonschema.ValidationError as exc:
            raise ValueError(exc.message) from None
        return data


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def extract_json(text: str) -> Any:
    """The JSON value in a reply, tolerating a code fence or prose around one object."""
    stripped = _FENCE.sub("", text.strip()).strip()
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    start = stripped.find("{")
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(stripped[start:])
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
