"""What an OpenAI-compatible server accepts, learned from its rejections and remembered per server.

Servers differ in the structured-output forms they take: OpenAI and vLLM take
`response_format: {"type": "json_schema", ...}`; llama-cpp-python's server takes only
`{"type": "json_object", "schema": ...}` and answers the other with an HTTP 500 that names the field.
We never guess from a server's name: a rejection that names a parameter we sent (whatever its status
code) is read as "unsupported", never retried as transient, and for `response_format` the next form
that keeps the schema enforced is tried. What worked is kept on the model for the run and in the
store (keyed by base URL and model name), so a later run sends no rejected request.
"""

from __future__ import annotations

import re
from typing import Any

from medpanel.errors import ModelCallError

# Structured-output forms, in the order tried. Each one has the server enforce the schema itself.
FORMS = ("json_schema", "json_object")
CAPABILITY = "response_format"

# Words servers use when they refuse a parameter (OpenAI, vLLM, pydantic-validated servers such as
# llama-cpp-python's). Naming a parameter is not enough: "max_tokens is too large" is about a value.
_REFUSAL = re.compile(
    r"unsupported|not supported|unrecogni[sz]ed|unknown (?:parameter|field|argument|option)|extra (?:inputs|fields)"
    r"|not permitted|not allowed|should be|must be one of|literal_error|unexpected (?:keyword|field|argument)|invalid (?:type|literal)",
    re.IGNORECASE,
)
# Status codes that say something other than "this request's shape": rate limits, keys, wrong URL or model.
_NOT_A_REJECTION = frozenset({401, 403, 404, 408, 429})
# Parameters a rejection may name. The model and messages are not optional, so naming them is another error.
_OPTIONAL = ("response_format", "seed", "top_p", "stop", "frequency_penalty", "presence_penalty", "temperature",
             "max_tokens", "max_completion_tokens")


class UnsupportedParameter(ModelCallError):
    """The server refused a parameter we sent. Not transient: sending it again is refused again."""

    def __init__(self, model: str, param: str, detail: str, status: int) -> None:
        self.param = param
        self.detail = detail
        self.status = status
        super().__init__(
            f"{model}: the server does not accept the parameter '{param}' (HTTP {status}): {detail}",
            f"Leave the option that sets '{param}' unset for this model, or serve it with a server that accepts it.",
            kind="unsupported_parameter",
            model=model,
        )


def rejected_parameter(status: int, body: Any, message: str, sent: dict) -> str | None:
    """The optional parameter of `sent` a server's error names as unsupported, or None.

    Uses the error's `param` field where the server fills it in (OpenAI does), else looks for the
    parameter's name (as a word, or a path such as ('body', 'response_format', 'type')) beside a refusal."""
    if status in _NOT_A_REJECTION or not _REFUSAL.search(message or ""):
        return None
    inner = body.get("error", body) if isinstance(body, dict) else None
    named = inner.get("param") if isinstance(inner, dict) else None
    if isinstance(named, str) and named:
        root = re.split(r"[.\[]", named, maxsplit=1)[0]
        if root in sent and root in _OPTIONAL:
            return root
    for param in _OPTIONAL:
        if param in sent and re.search(rf"(?<![A-Za-z0-9_]){re.escape(param)}(?![A-Za-z0-9_])", message):
            return param
    return None


def forms_in_order(first: str) -> list[str]:
    """The form to try first, then the others in their usual order."""
    return [first, *(f for f in FORMS if f != first)]


class ServerMemory:
    """The structured-output form one model on one server takes: this process's knowledge, backed by the
    store when the runtime has one (a cache without `server_capability` simply remembers nothing)."""

    def __init__(self, base_url: str | None, model: str, runtime: Any) -> None:
        self.key = ((base_url or "https://api.openai.com/v1").rstrip("/"), model)
        self.runtime = runtime  # its cache (the store) is read when needed: a runner may attach it after building models
        self._form: str | None = None  # what calls starting now should send first
        self._stored: str | None = None  # what the store holds
        self._looked_up = False

    def form(self) -> str | None:
        if not self._looked_up and self.runtime.cache is not None:
            self._looked_up = True
            read = getattr(self.runtime.cache, "server_capability", None)
            known = read(*self.key, CAPABILITY) if read else None
            if isinstance(known, dict) and known.get("form") in FORMS:
                self._form = self._stored = known["form"]
        return self._form

    def refused(self, form: str) -> None:
        """A form was just rejected: calls that start from now on (a board's seats, a judge's rubrics run
        concurrently) lead with another one, before any reply has shown which works."""
        if self._form in (None, form):
            self._form = next(f for f in FORMS if f != form)

    def learn(self, form: str, rejected: list[str]) -> None:
        """Keep the form that was accepted; written to the store only when it is news."""
        self._form = form
        if form == self._stored:
            return
        self._stored = form
        write = getattr(self.runtime.cache, "remember_server_capability", None)
        if write:
            write(*self.key, CAPABILITY, {"form": form, "rejected": rejected})
