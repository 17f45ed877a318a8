"""Secrets never leave the process: every configured API key is replaced by `[redacted]` in error
messages, the store, printed output and reports.

The keys are the values of the environment variables that name them: OPENAI_API_KEY, any variable
ending in _API_KEY, and every variable a model spec names with `key_env=` (providers call
`add_secret_env` when they read one), plus any key handed to a provider directly (`add_secret`).
Each key is also redacted in its URL-encoded forms, as a server may echo it in a query string.
`redact` is the one function every place that forms, stores or prints an error calls.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
MIN_SECRET_LEN = 6  # shorter values (placeholders like "x", "none") would shred ordinary text

_lock = threading.Lock()
_secrets: set[str] = set()
_secret_envs: set[str] = {"OPENAI_API_KEY"}


def add_secret(value: str | None) -> None:
    """Redact `value` from now on (an API key given to a provider directly)."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def add_secret_env(name: str) -> None:
    """Treat the value of environment variable `name` as a secret (a spec's key_env=NAME)."""
    if name:
        with _lock:
            _secret_envs.add(name)
        add_secret(os.environ.get(name))


def secrets() -> set[str]:
    """Every secret known now: registered values and the current values of the key variables."""
    with _lock:
        found = set(_secrets)
        names = set(_secret_envs)
    for name, value in os.environ.items():
        if (name in names or name.endswith("_API_KEY")) and value and len(value) >= MIN_SECRET_LEN:
            # the value as set, and without the newline or spaces a shell or a key file adds; str.strip()
            # alone would also eat Unicode spaces that are part of the key (a key of NEL characters vanished)
            found.update({value, value.strip(" \t\r\n")})
    return {s for s in found if len(s) >= MIN_SECRET_LEN}


def _forms(secret: str) -> list[str]:
    return list(dict.fromkeys([secret, quote(secret, safe=""), quote_plus(secret), quote(secret)]))


def redact(text: str) -> str:
    """`text` with every known secret (and its URL-encoded forms) replaced by [redacted]."""
    if not isinstance(text, str) or not text:
        return text
    known = secrets()
    if not known:
        return text
    forms = [form for secret in sorted(known, key=len, reverse=True) for form in _forms(secret)]
    for _ in range(8):  # again, in case a replacement joined the text around it into a secret
        before = text
        for form in forms:
            if form in text:
                text = text.replace(form, REDACTED)
        if text == before:
            break
    return text


def redact_data(value):
    """`value` (JSON-like data: dicts, lists, strings) with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_data(v) for v in value)
    return value
